// SandboxHost: the privileged work behind the helper protocol. It owns every sandbox this
// privhelper created (bundle, staged workspace mounts, runsc container, exec'd processes) and
// acts only on requests request_validation.h has checked; HelperServer (helper_server.h) is
// the RPC table in front of it. Its code is split by role: sandbox_host.cc (lookups, create,
// pause, connect, stops), sandbox_host_processes.cc (processes and the spawner),
// sandbox_host_teardown.cc (delete) and sandbox_host_adopt.cc (restart: adoption, reattach,
// collection), sharing sandbox_host_internal.h. runsc is reached through RunscRunner and the sandboxes' host
// processes through ProcessWatcher, so all of this but the mounts is tested with fakes and no
// root (sandbox_host_test.cc).
//
// Every running sandbox is watched: its sentry and gofer (pidfd_watch.h). If either exits --
// killed, crashed, OOM-killed -- the sandbox is `stopped` with the reason, nothing new starts in
// it, waitSandbox answers, and delete still removes everything.
//
// Errors: a refusal is a Status returned before anything is changed or started; what fails
// later (runsc, a teardown) rejects the returned promise with an exception made by
// StatusToException, so both carry the same client-facing reason tokens.
//
//   RunscProcessRunner runsc(events, runsc_fd, {run_dir + "/runsc", "ptrace"});
//   PidfdWatcher watcher(events);
//   SandboxHost host(config, runsc, watcher, shim_path);
//   host.Reconcile(config::RestartPolicy::KILL).wait(wait_scope);
//   ASSIGN_OR_RETURN(kj::Promise<void> created, host.Create(std::move(validated_create)));
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kj/async.h>
#include <kj/function.h>
#include <kj/io.h>
#include <kj/vector.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/process_exit.h"
#include "privhelper/bundle.h"
#include "privhelper/config.h"
#include "privhelper/netns_connect.h"
#include "privhelper/network/dns_resolver.h"
#include "privhelper/network/sandbox_networks.h"
#include "privhelper/pidfd_watch.h"
#include "privhelper/request_validation.h"
#include "privhelper/runsc.h"
#include "privhelper/cpu_priority.h"
#include "privhelper/egress_link.h"
#include "privhelper/service_cgroup.h"
#include "privhelper/spawner_channel.h"
#include "schema/config.capnp.h"
#include "schema/api.capnp.h"
#include "schema/helper.capnp.h"

namespace paseo {

// How long a create waits for the egress proxy's answer (the sandbox's CA) before it fails.
inline constexpr kj::Duration kEgressAnswerPatience = 10 * kj::SECONDS;

class SandboxHost {
 public:
  // `shim`: host path of the shim binary mounted into every sandbox (bundle.h).
  // `cgroup_root`: where the cgroup hierarchies are mounted (tests point it elsewhere).
  // `timer`: paces the wait for a just-started process's pid (Signal).
  // `ports`: makes Sandbox.connect's connections (netns_connect.h); none: every connect is
  // unavailable.
  SandboxHost(const Config& config, RunscRunner& runsc, ProcessWatcher& watcher, kj::Timer& timer,
              std::string shim, std::string cgroup_root = "/sys/fs/cgroup",
              PortConnector* ports = nullptr);
  ~SandboxHost();

  // Where sandboxes with network mode "sandbox" get their network (main.cc sets it when a
  // profile uses that mode). Without one, such a create is refused (failed-precondition).
  void SetNetworks(network::SandboxNetworks* networks) { networks_ = networks; }
  // The cgroup with the service's bounds (main.cc sets it once they are applied). With it a
  // create is refused (resource-exhausted, naming the bound) when the sandbox's own bounds are
  // above the service's, or when the sandboxes together already leave no room for another
  // (CheckServiceRoom). Sandboxes' own bounds are never above the service's (LoadConfig).
  // With it, too, a client's process start puts its sandbox ahead of the others' for CPU
  // (cpu_priority.h).
  void SetServiceCgroup(const ServiceCgroup* service);
  // What a sandbox costs the service's cgroup to start (an idle sandbox measured: about 45 MiB
  // and 60 host tasks under ptrace), for CheckServiceRoom.
  static constexpr uint64_t kSandboxStartBytes = uint64_t{64} << 20;
  static constexpr uint64_t kSandboxStartHostTasks = 128;
  // The resolver every sandbox with network mode "sandbox" gets at its link's host end (main.cc
  // sets it with the networks). Without one, their names do not resolve.
  void SetDns(network::DnsResolver* dns) { dns_ = dns; }
  // The egress proxy (decision 58), with SandboxNetworks' egress port set: sandboxes with
  // allowNames rules are served by it.
  void SetEgress(EgressLink* egress) {
    egress_ = egress;
    if (egress_ != nullptr)
      egress_->SetOnNewCa([this](const std::string& id, const std::string& pem) { NewEgressCa(id, pem); });
  }
  // Processes start through a spawner inside each sandbox (sandbox/spawner.cc) rather than a
  // `runsc exec` each (main.cc enables it unless helper.json says `"spawner": false`). Without
  // this call every process is a `runsc exec`.
  void EnableSpawners(kj::LowLevelAsyncIoProvider& io) { spawner_io_ = &io; }
  // The sandbox's spawner as `inspect` shows it (api.capnp SandboxInfo.spawner): "off",
  // "starting", "running", or "down: <why>"; not-found for an unknown sandbox.
  absl::StatusOr<std::string> SpawnerState(const ValidatedSandboxRef& request);
  // A sandbox's network as the broker shows it (Api.NetworkInfo); nothing for an unknown id.
  void DescribeNetwork(const std::string& sandbox_id, api::NetworkInfo::Builder out) const;
  // Its tool directories, kept paths and home (Api.SandboxPaths); nothing for an unknown id.
  void DescribePaths(const std::string& sandbox_id, api::SandboxPaths::Builder out) const;
  // The link of a running sandbox with network mode "sandbox", or null.
  const network::SandboxLink* LinkOf(const std::string& sandbox_id) const;

  // What a sandbox uses now (Helper.sandboxUsage): its cgroup's figures (measured: they could be
  // read) and, with a link, its byte counters.
  struct Usage {
    std::string sandbox_id;
    bool measured = false;
    CgroupUsage cgroup;
    bool networked = false;
    uint64_t network_in_bytes = 0, network_out_bytes = 0;
  };
  // Each of `ids` this host holds, in that order (the others are left out).
  std::vector<Usage> SandboxUsage(const std::vector<std::string>& ids) const;
  // All sandboxes together: the service's cgroup (zeros when it cannot be read).
  CgroupUsage ServiceUsage() const;

  struct Stdio {
    kj::AutoCloseFd stdin_w, stdout_r, stderr_r;
  };

  // Checks capacity, the rootfs, destinations and workspaces, then writes the bundle; the
  // promise creates and starts the container (a failure there tears everything down).
  absl::StatusOr<kj::Promise<void>> Create(ValidatedCreate request);
  // Starts `runsc exec` in a running sandbox; returns the broker's ends of its stdio.
  absl::StatusOr<Stdio> StartProcess(const ValidatedStart& request);
  // The promise resolves to how the process ended (exit_status.h).
  absl::StatusOr<kj::Promise<ProcessExit>> Wait(const ValidatedProcessRef& request);
  // While the sandbox is paused, a signal is queued and sent once it resumes.
  absl::StatusOr<kj::Promise<void>> Signal(const ValidatedSignal& request);
  // `runsc pause` / `runsc resume`; both idempotent. While paused (from the moment the pause
  // is asked until the resume has succeeded) nothing new starts in the sandbox. A stopped
  // sandbox is refused (failed-precondition); a deleted one is not-found.
  absl::StatusOr<kj::Promise<void>> Pause(const ValidatedSandboxRef& request);
  absl::StatusOr<kj::Promise<void>> Resume(const ValidatedSandboxRef& request);
  // Stops the sandbox and answers once nothing can run in it any more (its sentry has exited),
  // having first marked its record deleting on disk; runsc's state, mounts, cgroups, network
  // and bundle are released in the background (AwaitGone). While that runs the sandbox is
  // `deleting`: a second Delete answers as the first, nothing new starts in it, it counts
  // against its deployment's maxSandboxes only beyond maxSandboxes of them (CheckCapacity),
  // and a restarted privhelper that finds the marker finishes the teardown. runsc's part is
  // tried kTeardownTries times; a teardown that still fails is logged and leaves the sandbox
  // deleting (here and on disk), and the next Delete, gc (Reconcile) or start finishes it.
  absl::StatusOr<kj::Promise<void>> Delete(const ValidatedDelete& request);
  // Resolves once nothing of the sandbox is left (at once for an unknown id); fails if its
  // teardown failed. failed-precondition if it is not being deleted.
  absl::StatusOr<kj::Promise<void>> AwaitGone(const ValidatedSandboxRef& request);
  // For a (re)starting broker: every sandbox and every process with kept stdio.
  // A sandbox's lostReason is reported once: to the first broker after the restart that lost
  // its processes (a later broker restart has nothing more to learn from it).
  void Inventory(const ValidatedInventory& request,
                 helper::Helper::InventoryResults::Builder out);
  struct Reattached {
    Stdio stdio;
    uint64_t stdout_start = 0, stderr_start = 0;  // helper.capnp reattach: stdoutStart, ...
  };
  // The broker's ends of a process's stdio (stdin may be absent): for a process a reattached
  // spawner holds, new pipes continuing its streams from the broker's log ends (or later: a
  // gap); for any other, duplicates of its kept stdio.
  absl::StatusOr<kj::Promise<Reattached>> Reattach(const ValidatedReattach& request);
  absl::Status CloseInput(const ValidatedProcessRef& request);
  // Sandbox.connect: a TCP connection to the port of a running (not paused, not stopped)
  // sandbox, made from inside its network namespace. failed-precondition ("sandbox has no
  // network") unless its profile's network mode is sandbox; permission-denied unless the port
  // is in the profile's network.inboundPorts; the promise fails with unavailable ("nothing
  // listening on port N") if nothing accepts it in time.
  absl::StatusOr<kj::Promise<kj::AutoCloseFd>> ConnectPort(const ValidatedConnect& request);
  // Forgets an ended process: its record, kept stdio, exec log and its files in the bundle
  // (process-<id>.json, .pid). failed-precondition while it runs, not-found if unknown.
  absl::Status ReleaseProcess(const ValidatedProcessRef& request);

  // Why a sandbox stopped by itself.
  struct Stop {
    std::string reason;
    bool oom_killed = false;
  };
  // Resolves when the sandbox stops by itself (at once if it has); fails with not-found when it
  // is deleted.
  absl::StatusOr<kj::Promise<Stop>> WaitStopped(const ValidatedSandboxRef& request);

  // Destroys every sandbox, whatever state it is in (service shutdown, after the RPC system
  // and with it every in-flight request is gone).
  kj::Promise<void> DeleteAll();
  // Runs `work` to its end even if the returned promise (an RPC call) is cancelled.
  kj::Promise<void> RunToCompletion(kj::Promise<void> work);
  // At start-up, before serving, and on SIGHUP: finds what a previous privhelper left (runsc
  // containers in the control netns, bundles, cgroups). Running sandboxes with a readable
  // record are adopted (policy keep) or destroyed (policy kill); everything else is
  // garbage-collected. Collects nothing if `runsc list` fails or cannot be parsed. Teardowns that
  // failed before are started again first.
  kj::Promise<void> Reconcile(config::RestartPolicy policy);
  size_t size() const { return sandboxes_.size(); }

  // Counts running processes only: ended ones are the broker's to release.
  static constexpr size_t kMaxProcessesPerSandbox = 4096;
  // How long a signal waits for a just-started process's pid, and how often it looks.
  static constexpr kj::Duration kPidPatience = 10 * kj::SECONDS;
  static constexpr kj::Duration kPidPoll = 5 * kj::MILLISECONDS;
  // Signals queued while a sandbox is paused; more are refused (resource-exhausted).
  static constexpr size_t kMaxQueuedSignals = 256;
  // Tests lower the cap to reach it cheaply.
  void SetMaxProcessesPerSandbox(size_t max) { max_processes_ = max; }
  // How long a stop's reason waits for the sentry's or gofer's wait status: the kernel has it
  // once their parent (init, since `runsc run --detach` exited) reaps them. Measured here: about 1.7 s
  // under this VM's init; at once under systemd. The sandbox is refused new processes meanwhile.
  static constexpr kj::Duration kExitStatusPatience = 3 * kj::SECONDS;
  // How long a delete waits for the sentry to exit after its init was killed before it lets
  // `runsc delete --force` kill the rest (docs/decisions.md 39: measured 30-60 ms).
  static constexpr kj::Duration kHaltPatience = 2 * kj::SECONDS;
  // How long a create waits for an init spawner's hello, and a delete for it to exit when told.
  static constexpr kj::Duration kSpawnerHelloPatience = 2 * kj::SECONDS;
  // How long a restarted privhelper waits for an adopted sandbox's spawner to take a new channel
  // and list what it holds (a `runsc exec` of `shim attach` and a round trip).
  static constexpr kj::Duration kReattachPatience = 10 * kj::SECONDS;
  static constexpr kj::Duration kInitExitPatience = 500 * kj::MILLISECONDS;
  // How often a teardown tries runsc's part (resume, kill, delete) before it is reported
  // failed, and the wait before the first retry (doubled before each next one: 1, 2, 4 s).
  static constexpr int kTeardownTries = 4;
  static constexpr kj::Duration kTeardownRetryDelay = 1 * kj::SECONDS;

 private:
  struct Process : public kj::Refcounted {
    explicit Process(kj::Promise<ProcessExit> exit_status) : exit(exit_status.fork()) {}
    kj::ForkedPromise<ProcessExit> exit;
    kj::Promise<void> watcher = nullptr;  // sets `exited` as soon as the exit is reaped
    std::string pid_file;
    std::string process_json;
    bool exited = false;
    bool tty = false;
    uint32_t spawner_id = 0;  // started through the sandbox's spawner (0: a runsc exec)
    // Held by a spawner this privhelper reattached, and not continued yet (Reattach): no kept
    // stdio until then.
    bool held = false;
    std::vector<std::string> argv;
    // Copies of the broker's ends, kept so a restarted broker can take the process over.
    kj::AutoCloseFd kept_stdin, kept_stdout, kept_stderr;
  };
  struct Sandbox {
    std::string id;
    std::string profile;
    int64_t created_ms = 0;
    uint64_t generation = 0;  // distinguishes a re-used id from the sandbox a continuation saw
    std::string deployment;
    std::string bundle_dir;
    std::vector<std::string> staging;  // mounted staging dirs
    // Its empty workspaces' own directories (<bundle>/mounts/empty-N), removed with it.
    std::vector<std::string> empty_dirs;
    // The first workspace on the host (its staging dir or empty dir), for workspaceCwd.
    std::string first_workspace_dir;
    std::vector<std::string> files;    // files we wrote in the bundle
    uid_t uid = 0;
    gid_t gid = 0;
    // The first workspace's destination (staged at <bundle>/mounts/0), or "/" without one.
    std::string default_cwd = "/";
    // The profile's tool destinations, in front of every process's PATH.
    std::vector<std::string> tool_path;
    // The home mounted in it (LaunchProfile.homePath when created), $HOME of its processes.
    std::string home;
    // Its read-write workspace and credential destinations (Api.SandboxPaths.kept).
    std::vector<std::string> kept;
    // Its secrets' placeholders (decision 59): "ENV=placeholder" and NODE_EXTRA_CA_CERTS, added
    // to every process's environment that does not set the name; and each placeholder file's
    // destination and placeholder.
    std::vector<std::string> secret_env;
    std::vector<std::pair<std::string, std::string>> secret_files;
    std::vector<std::string> secret_hosts;  // every host its secrets are bound to
    // Network mode "sandbox": its link (namespace, veth, addresses); none for "none".
    std::optional<network::SandboxLink> link;
    std::vector<uint16_t> inbound_ports;  // its profile's network.inboundPorts
    bool container_created = false;
    bool running = false;
    bool deleting = false;
    bool unattached = false;  // adopted from a previous privhelper
    // Pause and resume: `paused` is what the broker asked for (set when a pause is asked,
    // cleared once the resume succeeded), `frozen` what runsc did. Nothing starts while
    // paused; runsc refuses exec, kill and delete on a frozen container (measured on
    // 20221219: "cannot ... in state paused"; `delete --force` panics), so signals wait in
    // `queued_signals` and a delete resumes first.
    bool paused = false;
    bool frozen = false;
    std::vector<std::pair<std::string, int>> queued_signals;  // process id, signal
    // The end of the last pause, resume or destroy: the next one runs after it, since runsc
    // refuses a transition from a state the container is still leaving.
    kj::Maybe<kj::ForkedPromise<void>> transitions;
    bool oom_killed = false;  // a process of it ended oom-killed: the sandbox is dead
    // Its sentry or gofer exited (or it was found stopped): nothing new starts in it. The
    // reason is final once `stop_known` (it may wait kExitStatusPatience for a status).
    bool stopped = false;
    bool stop_known = false;
    std::string stop_reason;
    // Resolved by MarkStopped, rejected when the record goes; every WaitStopped is a branch, so
    // a cancelled call leaves nothing behind.
    kj::Own<kj::PromiseFulfiller<Stop>> stop_fulfiller;
    kj::ForkedPromise<Stop> stop = nullptr;
    // Resolved once nothing can run in it any more: its sentry exited (or was gone when it was
    // looked for). Never rejected. Without a watched sentry (`halt_watched` false) a delete
    // answers only when runsc has deleted it.
    kj::Own<kj::PromiseFulfiller<void>> halt_fulfiller;
    kj::ForkedPromise<void> halted = nullptr;
    bool halt_watched = false;
    // A Delete under way: `answered` resolves when its caller is answered, `gone` when the
    // background teardown has released everything (each is shared by every later Delete and
    // AwaitGone). Both are replaced when a failed teardown is started again.
    kj::Maybe<kj::ForkedPromise<void>> answered;
    kj::Maybe<kj::ForkedPromise<void>> gone;
    // The last teardown failed after its retries: it stays `deleting` and not running (as its
    // record on disk says) until the next Delete or gc starts it again.
    bool teardown_failed = false;
    std::map<std::string, kj::Own<Process>> processes;
    // Its spawner (null: none yet, or spawners are off). Once down it stays down: every later
    // process is a runsc exec, and `spawner_down` says why.
    kj::Own<SpawnerChannel> spawner;
    bool spawner_is_init = false;  // it is the sandbox's init (started by `runsc run`)
    // What a reattach must present (<bundle>/spawner.key; spawner_frames.h kKey).
    std::string spawner_key;
    // Adopted: why a process the broker knew of is not in the inventory (helper.capnp
    // AdoptedSandbox.lostReason).
    std::string lost_reason;
    std::string spawner_pid_file;
    std::string spawner_down;
    // Waits for the sentry or the gofer to exit (WatchHostProcesses); declared last, so it is
    // cancelled first when the record goes.
    kj::Promise<void> watch = nullptr;
  };
  struct CreatePlan;
  class ReapErrors : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}
  };
  // Which sandboxes a request may name: any, or only one that runs and is not being deleted.
  enum class Need { kAny, kRunning };

  // The sandbox with this id, if it is still the one of this generation (0: any).
  Sandbox* Find(const std::string& id, uint64_t generation = 0);
  // The same, or not-found.
  absl::StatusOr<Sandbox*> FindSandbox(const std::string& id, Need need);
  absl::StatusOr<Process*> FindProcess(const ValidatedProcessRef& ref, Need need);
  // A new record for `id` (a new generation), its bundle at <stateDir>/bundles/<id>.
  Sandbox& Add(const std::string& id);
  std::string BundlesDir() const;

  // Create, before anything is written: destinations checked, workspaces resolved, the uid.
  absl::StatusOr<CreatePlan> PlanCreate(const ValidatedCreate& request) const;
  // Create, after every check: the bundle, with its record, overlay and staged mounts.
  // The profile's secrets as the deployment registers them, each value read from its root-owned
  // file (secret_file.h) and given a fresh placeholder.
  absl::StatusOr<std::vector<EgressSecret>> SecretsOf(config::Deployment::Reader deployment,
                                                      config::LaunchProfile::Reader profile) const;
  // The sandbox's trust files (<bundle>/trust-ca.pem and trust-bundle.crt, bound read-only in
  // it) with `ca_pem`, rewritten in place.
  absl::Status WriteTrustFiles(Sandbox& sb, const std::string& ca_pem);
  // A restarted egress proxy's new CA for a sandbox: into its trust files.
  void NewEgressCa(const std::string& id, const std::string& ca_pem);
  absl::Status WriteBundle(Sandbox& sb, const ValidatedCreate& request, const CreatePlan& plan);
  // Create, asynchronously: `runsc run --detach` (create and start in one runsc process), or
  // a teardown.
  kj::Promise<void> StartContainer(const std::string& id, uint64_t generation);
  // After start (or adoption): finds the sentry and the gofer (runsc's state file) and watches
  // them (Sandbox::watch), marking the sandbox stopped when either exits; marks it stopped at
  // once if the sentry is gone already. If they cannot be found it logs and leaves it running.
  void WatchHostProcesses(Sandbox& sb);
  // The sandbox has stopped for good: records why and answers every WaitStopped.
  void MarkStopped(Sandbox& sb, std::string reason, bool oom_killed);
  // A started sandbox is refused new processes and signals once it has stopped.
  static absl::Status RequireNotStopped(const Sandbox& sb);
  // Where a process starts: its workspaceCwd resolved beneath the sandbox's first workspace
  // (invalid-argument if it leaves it or is no directory), else its cwd, else the default.
  static absl::StatusOr<std::string> WorkingDirectory(const Sandbox& sb,
                                                      const ProcessCommand& command);
  // The tool destinations the profile places, for a sandbox created (or adopted) with it.
  std::vector<std::string> ToolPath(const std::string& profile) const;
  // Runs `step` after the sandbox's earlier pause, resume or destroy has ended.
  kj::Promise<void> Sequenced(Sandbox& sb, kj::Function<kj::Promise<void>()> step);
  // `runsc pause`/`resume` of the sandbox (generation-checked), as a Sequenced step.
  kj::Promise<void> Freeze(const std::string& id, uint64_t generation);
  kj::Promise<void> Thaw(const std::string& id, uint64_t generation);
  // Sends the signals queued while the sandbox was paused, in order.
  kj::Promise<void> SendQueuedSignals(const std::string& id, uint64_t generation);
  // `runsc kill --pid=<its pid in the sandbox> <id> <sig>`. A process whose `runsc exec` has not
  // written its pid yet (startProcess answers as soon as runsc runs) is waited for, polling
  // every kPidPoll until `deadline`: a signal sent right after the start is not lost. It fails
  // with failed-precondition if the process ends (or goes) first, unavailable at the deadline.
  kj::Promise<void> Kill(const std::string& sandbox_id, uint64_t generation,
                         const std::string& process_id, int sig, kj::TimePoint deadline);
  // Records a started process under the sandbox; `ended` resolves to how it ended. An ending
  // without a status of its own becomes oom-killed if the sandbox's cgroup counted an OOM kill
  // meanwhile.
  Process& Track(Sandbox& sb, const std::string& process_id, kj::Promise<ProcessExit> ended);
  // Records the command in `p` and keeps copies of the broker's ends of its stdio; returns them.
  absl::StatusOr<Stdio> KeepCopies(Process& p, const ProcessCommand& command, Stdio stdio);
  // How a `runsc exec` ended (exit_status.h), from its wait status and debug log.
  kj::Promise<ProcessExit> RunscExecEnd(kj::Promise<int> runsc_exit, kj::AutoCloseFd exec_log);
  // Starts the sandbox's spawner with a `runsc exec` as its run-as user, unless spawners are off
  // or it has one (up, starting or down).
  void StartSpawner(Sandbox& sb);
  struct RunscExecStarted {
    kj::Promise<ProcessExit> exit;
    std::string pid_file, process_json;
  };
  // `runsc exec` of `exec` as process `process_id`, on the given stdio.
  absl::StatusOr<RunscExecStarted> StartRunscExec(Sandbox& sb, const std::string& process_id,
                                                  const ExecSpec& exec, int in, int out, int err);
  // sb.spawner on the given ends of its channel; `is_init`: the spawner is the sandbox's init;
  // `reattach`: the channel is a `shim attach` to a spawner a previous privhelper started.
  void OpenSpawnerChannel(Sandbox& sb, kj::AutoCloseFd to_spawner, kj::AutoCloseFd from_spawner,
                          bool is_init, bool reattach = false);
  // A new key for the sandbox's spawner, written to <bundle>/spawner.key with whether the
  // spawner is its init.
  absl::Status NewSpawnerKey(Sandbox& sb, bool is_init);
  // An adopted sandbox's spawner (from <bundle>/spawner.key) given a new channel through
  // `runsc exec shim attach`; resolves once it listed what it holds, each then tracked as a held
  // process, or once that failed (its processes are lost, with sb.lost_reason saying why).
  kj::Promise<void> ReattachSpawner(Sandbox& sb);
  // A process through the sandbox's spawner; nullopt if the spawner cannot take it (then it is
  // a runsc exec).
  std::optional<absl::StatusOr<Stdio>> StartThroughSpawner(Sandbox& sb,
                                                           const std::string& process_id,
                                                           const ProcessCommand& command,
                                                           const ExecSpec& exec);

  // Marks the record deleting, kills and deletes the runsc container (if created), unmounts and
  // removes the bundle, and forgets the sandbox. Processes still running are reaped in the
  // background. If runsc fails it keeps the sandbox deleting (teardown_failed).
  kj::Promise<void> Destroy(const std::string& id, uint64_t generation);
  // Destroy's runsc part, as a Sequenced step: resume if frozen, kill its init, wait for the
  // halt, `delete --force`; tried again after a failure until kTeardownTries.
  kj::Promise<void> StopContainer(const std::string& id, uint64_t generation, int attempt);
  // Destroy in the background, as Delete does it (sets answered and gone); resolves with the
  // answer.
  kj::Promise<void> StartTeardown(Sandbox& sb);
  // Starts every teardown that failed again (gc).
  void RetryFailedTeardowns();
  // resource-exhausted if a create would pass the deployment's maxSandboxes, counting every
  // sandbox that is not being deleted and those being deleted beyond maxSandboxes of them.
  absl::Status CheckCapacity(const config::Deployment::Reader& deployment) const;
  absl::Status CheckServiceRoom() const;
  // Resolves once the sandbox's sentry has exited, or after kHaltPatience; at once if its
  // sentry is not watched.
  kj::Promise<void> AwaitHalt(const std::string& id, uint64_t generation);
  // Ends the sandbox's init: an init spawner is told to exit, any other is SIGKILLed by runsc.
  kj::Promise<void> StopInit(const std::string& id, uint64_t generation);
  // Sets the persisted marker (records.capnp SandboxRecord.deleting) in its record.
  absl::Status MarkDeleting(const Sandbox& sb);
  // Nothing can run in it any more: answers a delete waiting for that.
  static void MarkHalted(Sandbox& sb);
  void Forget(Sandbox& sandbox);
  // Unmounts and removes everything of the bundle without ever deleting recursively (a staging
  // dir that cannot be unmounted is left in place rather than emptied).
  void RemoveBundle(Sandbox& sandbox);
  // Removes the sandbox's (empty) cgroup in every hierarchy.
  void RemoveCgroups(const std::string& sandbox_id);

  // Reconcile's two halves: a container `runsc list` reported, and what nobody owns. An adopted
  // running sandbox's spawner reattach goes into `reattaches`.
  void AdoptOrDestroy(const std::string& id, const std::string& status,
                      config::RestartPolicy policy, kj::Vector<kj::Promise<void>>& reattaches);
  void CollectUnowned();
  // An adopted sandbox's network back in place (its recorded block, pin, firewall chains).
  void AdoptNetwork(Sandbox& sb);

  const Config& config_;
  network::SandboxNetworks* networks_ = nullptr;
  const ServiceCgroup* service_ = nullptr;
  std::unique_ptr<CpuPriority> priority_;  // with service_
  network::DnsResolver* dns_ = nullptr;
  EgressLink* egress_ = nullptr;
  RunscRunner& runsc_;
  ProcessWatcher& watcher_;
  kj::Timer& timer_;
  std::string shim_;
  std::string cgroup_root_;
  PortConnector* ports_;
  kj::LowLevelAsyncIoProvider* spawner_io_ = nullptr;
  uint64_t next_generation_ = 1;
  size_t max_processes_ = kMaxProcessesPerSandbox;
  std::map<std::string, kj::Own<Sandbox>> sandboxes_;
  ReapErrors reap_errors_;
  kj::TaskSet reaper_;
};

}  // namespace paseo
