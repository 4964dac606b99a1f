// The privhelper's side of the private protocol. SandboxHost owns every sandbox this privhelper
// created (bundle, staged workspace mounts, runsc container, exec'd processes) and does the
// privileged work; HelperServer is the thin RPC adapter the broker talks to, re-validating
// each request (request_validation.h) and turning errors into stable client-facing reasons.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kj/async.h>

#include "privhelper/config.h"
#include "privhelper/exit_status.h"
#include "privhelper/request_validation.h"
#include "privhelper/runsc.h"
#include "schema/config.capnp.h"
#include "schema/helper.capnp.h"

namespace paseo {

class SandboxHost {
 public:
  // `shim`: host path of the shim binary mounted into every sandbox (bundle.h).
  SandboxHost(const Config& config, RunscRunner& runsc, std::string shim);
  ~SandboxHost();

  struct Stdio {
    kj::AutoCloseFd stdin_w, stdout_r, stderr_r;
  };

  kj::Promise<void> Create(ValidatedCreate request);
  kj::Promise<Stdio> StartProcess(ValidatedStart request);
  // Resolves to how the process ended (exit_status.h).
  kj::Promise<ProcessExit> Wait(const std::string& sandbox_id, const std::string& process_id);
  kj::Promise<void> Signal(const std::string& sandbox_id, const std::string& process_id, int sig);
  kj::Promise<void> Delete(const std::string& sandbox_id);
  // Destroys every sandbox, whatever state it is in (service shutdown, after the RPC system
  // and with it every in-flight request is gone).
  kj::Promise<void> DeleteAll();
  // Runs `work` to its end even if the returned promise (an RPC call) is cancelled.
  kj::Promise<void> RunToCompletion(kj::Promise<void> work);
  // At start-up, before serving: finds what a previous privhelper left (runsc containers in the
  // control netns, bundles, cgroups). Running sandboxes with a readable record are adopted
  // (policy keep) or destroyed (policy kill); everything else is garbage-collected.
  kj::Promise<void> Reconcile(config::RestartPolicy policy);
  // For a (re)starting broker: every sandbox and every process with kept stdio.
  void Inventory(helper::Helper::InventoryResults::Builder out) const;
  // Duplicates of a process's kept stdio (stdin may be absent).
  kj::Promise<Stdio> Reattach(const std::string& sandbox_id, const std::string& process_id);
  void CloseInput(const std::string& sandbox_id, const std::string& process_id);
  size_t size() const { return sandboxes_.size(); }

  static constexpr size_t kMaxProcessesPerSandbox = 4096;

 private:
  struct Process : public kj::Refcounted {
    explicit Process(kj::Promise<ProcessExit> exit_status) : exit(exit_status.fork()) {}
    kj::ForkedPromise<ProcessExit> exit;
    kj::Promise<void> watcher = nullptr;  // sets `exited` as soon as the exit is reaped
    std::string pid_file;
    bool exited = false;
    bool tty = false;
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
    std::vector<std::string> files;    // files we wrote in the bundle
    uid_t uid = 0;
    gid_t gid = 0;
    std::string default_cwd = "/";
    bool container_created = false;
    bool running = false;
    bool deleting = false;
    bool unattached = false;  // adopted from a previous privhelper
    bool oom_killed = false;  // a process of it ended oom-killed: the sandbox is dead
    std::map<std::string, kj::Own<Process>> processes;
  };
  class ReapErrors : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}
  };

  // Watches a started `runsc exec` and records it under the sandbox.
  Process& Track(Sandbox& sb, const std::string& process_id, pid_t pid,
                 const std::string& pid_file, kj::AutoCloseFd exec_log);
  // The sandbox with this id, if it is still the one of this generation (0: any).
  Sandbox* Find(const std::string& id, uint64_t generation = 0);
  // Kills and deletes the runsc container (if created), unmounts and removes the bundle, and
  // forgets the sandbox. Processes still running are reaped in the background.
  kj::Promise<void> Destroy(const std::string& id, uint64_t generation);
  void Forget(Sandbox& sandbox);
  // Unmounts and removes everything of the bundle without ever deleting recursively (a staging
  // dir that cannot be unmounted is left in place rather than emptied).
  void RemoveBundle(Sandbox& sandbox);

  const Config& config_;
  RunscRunner& runsc_;
  std::string shim_;
  uint64_t next_generation_ = 1;
  std::map<std::string, kj::Own<Sandbox>> sandboxes_;
  ReapErrors reap_errors_;
  kj::TaskSet reaper_;
};

class HelperServer final : public helper::Helper::Server {
 public:
  HelperServer(const Config& config, SandboxHost& host) : config_(config), host_(host) {}

 protected:
  kj::Promise<void> policy(PolicyContext context) override;
  kj::Promise<void> createSandbox(CreateSandboxContext context) override;
  kj::Promise<void> startProcess(StartProcessContext context) override;
  kj::Promise<void> waitProcess(WaitProcessContext context) override;
  kj::Promise<void> signalProcess(SignalProcessContext context) override;
  kj::Promise<void> deleteSandbox(DeleteSandboxContext context) override;
  kj::Promise<void> inventory(InventoryContext context) override;
  kj::Promise<void> reattach(ReattachContext context) override;
  kj::Promise<void> closeInput(CloseInputContext context) override;

 private:
  const Config& config_;
  SandboxHost& host_;
};

}  // namespace paseo
