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
#include "privhelper/request_validation.h"
#include "privhelper/runsc.h"
#include "schema/helper.capnp.h"

namespace paseo {

class SandboxHost {
 public:
  SandboxHost(const Config& config, RunscRunner& runsc);
  ~SandboxHost();

  struct Stdio {
    kj::AutoCloseFd stdin_w, stdout_r, stderr_r;
  };

  kj::Promise<void> Create(ValidatedCreate request);
  kj::Promise<Stdio> StartProcess(ValidatedStart request);
  // Resolves to the wait status of the process's `runsc exec` (the process's own exit status).
  kj::Promise<int> Wait(const std::string& sandbox_id, const std::string& process_id);
  kj::Promise<void> Signal(const std::string& sandbox_id, const std::string& process_id, int sig);
  kj::Promise<void> Delete(const std::string& sandbox_id);
  // Deletes every sandbox (service shutdown).
  kj::Promise<void> DeleteAll();
  size_t size() const { return sandboxes_.size(); }

 private:
  struct Process {
    kj::ForkedPromise<int> exit;
    std::string pid_file;
    bool exited = false;
  };
  struct Sandbox {
    std::string id;
    std::string bundle_dir;
    std::vector<std::string> staging;  // mounted staging dirs
    std::vector<std::string> files;    // files we wrote in the bundle
    uid_t uid = 0;
    gid_t gid = 0;
    std::string default_cwd = "/";
    bool running = false;
    bool deleting = false;
    std::map<std::string, kj::Own<Process>> processes;
  };

  Sandbox* Find(const std::string& id);
  // Unmounts and removes everything of the bundle without ever deleting recursively (a staging
  // dir that cannot be unmounted is left in place rather than emptied).
  void RemoveBundle(Sandbox& sandbox);

  const Config& config_;
  RunscRunner& runsc_;
  std::map<std::string, kj::Own<Sandbox>> sandboxes_;
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

 private:
  const Config& config_;
  SandboxHost& host_;
};

}  // namespace paseo
