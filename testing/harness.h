// Integration harness: a real privhelper (which starts the real broker) serving a private
// state directory, inside a fresh mount and network namespace that the test process made for
// itself, plus helpers to run the real CLI as an arbitrary uid. Used by the root suites under
// testing/ (tagged local + exclusive: runsc cannot run inside Bazel's sandbox).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "testing/util.h"

namespace paseo::testing {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

struct Identity {
  uid_t uid;
  gid_t gid;
  std::vector<gid_t> groups;
};

struct ServiceOptions {
  // Extra privhelper arguments (for example --without-capability NAME).
  std::vector<std::string> privhelper_args;
  // A different broker binary (runfiles-relative), e.g. a hostile one speaking the helper
  // protocol directly. The broker shares the privhelper's stdout, so what it prints lands in
  // Log().
  std::string broker_runfile;
  // Runs with the work area laid out and its config written, before the privhelper starts: for
  // fixtures, or for more config (e.g. the bench's own deployment and profile under base/etc).
  std::function<void(const std::string& base)> before_start;
  // Appended inside helper.json's object, e.g. `, "onRestart": "keep"`.
  std::string helper_json_extra;
  // Wait for the client socket to accept connections and the broker to be running (false for a
  // broker that never serves).
  bool wait_for_socket = true;
  // Start without the run's shared runsc probe record ($PASEO_RUNSC_PROBE_RECORD), so the
  // privhelper probes its runsc itself (and, for "auto", measures systrap against ptrace).
  bool fresh_runsc_probe = false;
  // The runsc and platform of this service (default: RunscPath() and RunscPlatform()), e.g. the
  // bench's workload scenario running one service per runsc and platform.
  std::string runsc_path;
  std::string runsc_platform;
  // Size of the work area's tmpfs (used as needed).
  std::string tmpfs_size = "512m";
  // Socket activation as systemd does it (installer/systemd/paseo-sandbox.socket): the harness
  // makes the listening socket once and passes it to every privhelper it starts (fd 3,
  // LISTEN_FDS=1, LISTEN_PID), so the socket file survives Crash/Stop and Restart.
  bool socket_activation = false;
  // A rootfs version built elsewhere (<out>/<version> of rootfs/build-rootfs, e.g. the agent
  // rootfs testing/run-tests builds once per machine): bind-mounted read-only at
  // base/state/rootfs/<version>, so a profile can name <version>. Empty: none.
  std::string extra_rootfs;
};

class Service {
 public:
  // The shared default service. The first service made (this or any other) unshares mount+net
  // namespaces for the whole process, so it must be made while the process is single-threaded;
  // every service then gets its own tmpfs work area, binaries, rootfs, config and privhelper.
  // Aborts with a clear message if anything is missing (root, the paseo-sandbox user, runsc).
  static Service& Get();
  explicit Service(ServiceOptions options);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  const std::string& base() const { return base_; }
  std::string socket() const { return base_ + "/run/supervisor.sock"; }
  std::string runsc_root() const { return base_ + "/run/runsc"; }
  std::string bundles() const { return base_ + "/state/bundles"; }
  // The rootfs version built into base/state/rootfs/<version>/rootfs.
  const std::string& rootfs_version() const { return rootfs_version_; }
  // The version of ServiceOptions.extra_rootfs (its directory's name), or empty.
  std::string extra_rootfs_version() const;
  pid_t privhelper_pid() const { return privhelper_pid_; }
  pid_t broker_pid() const;  // the privhelper's broker child, or -1
  // This service's own cgroup parent (so concurrent services never see each other's).
  std::string CgroupParent() const { return "paseo-it-" + base_.substr(base_.rfind('.') + 1); }
  // The gVisor platform this service's sandboxes run on: the configured one, or what runsc.platform
  // "auto" chose (its record, "platform <name>" in <state>/runsc-probe); "" if not known yet.
  std::string Platform() const;
  gid_t socket_gid() const { return socket_gid_; }
  uid_t broker_uid() const { return broker_uid_; }

  // Runs `paseo-sandbox --socket <sock> args...` as `who`, killing it after 120 s.
  CliResult Cli(const Identity& who, const std::vector<std::string>& args) const;
  // The same, but SIGKILLs the CLI if it has not ended within `deadline`: exit_code is then -1
  // and err ends with "(killed at the deadline)".
  CliResult Cli(const Identity& who, const std::vector<std::string>& args,
                std::chrono::milliseconds deadline) const;

  // Stops the privhelper (SIGTERM, or `signal`: the unit's SIGUSR2 stops per onRestart) and
  // waits for it (SIGKILL after 60 s); returns its wait status.
  int Stop(int signal = SIGTERM);
  // SIGKILLs the privhelper (its broker follows), as a crash would; sandboxes stay.
  void Crash();
  // Starts a new privhelper on the same state, config and run directory.
  void Restart();
  std::string Log() const;

  // Unmounts this service's tmpfs work area and removes its directory (after Stop and Leaks).
  // If a test of this binary failed, or KeepLog() was called, the privhelper's log (the
  // broker's goes into it) is first copied to $TEST_UNDECLARED_OUTPUTS_DIR, so a failure seen
  // once in CI can be read afterwards (testing/run-tests keeps each phase's outputs.zip).
  void RemoveWorkArea();
  void KeepLog() { keep_log_ = true; }

  // The live host process of sandbox `id` of this service: `kind` is "runsc-sandbox" (its
  // sentry) or "runsc-gofer"; -1 unless exactly one matches.
  pid_t SandboxProcess(const std::string& kind, const std::string& id) const;

  // What is left behind: bundle dirs, runsc container state, mounts under base, processes
  // running a runsc from our runsc root. Empty when nothing leaked.
  std::vector<std::string> Leaks() const;
  // Leaks(), again every 100 ms until nothing is left or `seconds` pass (teardown that runs in
  // the background, such as a delete during a restart, gets that long to finish).
  std::vector<std::string> LeaksAfter(int seconds) const;

 private:
  void Start();
  void Launch();
  void SeedRunscProbe();  // $PASEO_RUNSC_PROBE_RECORD -> state/runsc-probe
  void KeepRunscProbe();  // the run's first record -> $PASEO_RUNSC_PROBE_RECORD
  void RemoveCgroupParent() const;
  ServiceOptions options_;
  std::string base_;
  std::string rootfs_version_;
  pid_t privhelper_pid_ = -1;
  int activation_fd_ = -1;  // the socket held for socket activation, or -1
  bool keep_log_ = false;   // RemoveWorkArea keeps the privhelper's log (KeepLog)
  gid_t socket_gid_ = 0;
  uid_t broker_uid_ = 0;
};

// main() for a suite that shares Service::Get(): starts the service before any test (while the
// process is single-threaded, for the namespaces), runs the tests, stops the service, and
// fails if anything leaked.
int RunTestsWithSharedService(int argc, char** argv);
// The same for a suite with a service of its own, made from `options` before any test; `*service`
// points at it while the tests run.
int RunTestsWithOwnService(int argc, char** argv, ServiceOptions options, Service** service);

// For suites on the agent rootfs: PASEO_AGENT_ROOTFS, the <out>/<version> that testing/run-tests
// builds with rootfs/build-rootfs --profile agent (for ServiceOptions.extra_rootfs); "" after
// telling stderr that `suite` needs it.
std::string AgentRootfsFromEnv(const std::string& suite);

}  // namespace paseo::testing
