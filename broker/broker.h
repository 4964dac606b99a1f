// The broker's registry of sandboxes and processes, and the client-facing capnp servers
// (Supervisor, Sandbox, Process). The broker holds no authority of its own: every privileged
// step is a request to the privhelper, which checks it again.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <kj/async-io.h>
#include <kj/io.h>

#include "broker/authorization.h"
#include "broker/output_buffer.h"
#include "schema/api.capnp.h"
#include "schema/helper.capnp.h"

namespace paseo {

struct ExitInfo {
  enum Kind { kRunning, kExitCode, kSignal, kUnknown } kind = kRunning;
  int value = 0;
  void To(api::ExitStatus::Builder out) const;
};

struct ProcessRecord : public kj::Refcounted {
  std::string id;
  std::string sandbox_id;
  std::vector<std::string> argv;
  OutputBuffer stdout_buf;
  OutputBuffer stderr_buf;
  kj::Maybe<kj::Own<kj::AsyncOutputStream>> stdin_stream;
  kj::Promise<void> stdin_chain = kj::READY_NOW;  // serializes writes
  size_t stdin_queued = 0;                         // bytes accepted but not yet written
  static constexpr size_t kMaxQueuedInput = 16 << 20;
  ExitInfo exit;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> exit_waiters;
  kj::Promise<void> pumps = nullptr;

  bool tty = false;

  ProcessRecord(uint64_t buffer_bytes) : stdout_buf(buffer_bytes), stderr_buf(buffer_bytes) {}
  // A tty process's single stream is kept as stdout; `pty` names it.
  OutputBuffer& buffer(api::Stream s) { return s == api::Stream::STDERR ? stderr_buf : stdout_buf; }
  bool ended() const { return exit.kind != ExitInfo::kRunning; }
  void SetExit(ExitInfo info);
  kj::Promise<void> WhenEnded();
};

struct SandboxRecord {
  std::string id;
  std::string deployment_id;
  std::string profile;
  uid_t owner_uid = 0;
  int64_t created_ms = 0;
  std::vector<std::pair<std::string, std::string>> labels;
  std::string state = "running";
  std::vector<std::string> process_order;
  std::map<std::string, kj::Own<ProcessRecord>> processes;
  uint64_t buffer_bytes = 8 << 20;
};

class Broker {
 public:
  Broker(kj::AsyncIoProvider& io, kj::LowLevelAsyncIoProvider& low, helper::Helper::Client helper,
         capnp::MallocMessageBuilder& policy_message);

  // Registers a sandbox from before a service restart, in state "running-unattached".
  void AddUnattached(helper::AdoptedSandbox::Reader adopted);

  // The bootstrap capability for a new connection from `peer`.
  api::Supervisor::Client NewSupervisor(Peer peer);

  // --- used by the servers ---
  helper::Helper::Client& helper() { return helper_; }
  kj::LowLevelAsyncIoProvider& low() { return low_; }
  std::optional<helper::DeploymentPolicy::Reader> Deployment(const std::string& id) const;
  bool MayUseDeployment(const Peer& peer, const std::string& id) const;
  std::vector<std::string> DeploymentsFor(const Peer& peer) const;
  // The sandbox if it exists and `peer` may use its deployment; throws not-found otherwise.
  SandboxRecord& VisibleSandbox(const Peer& peer, const std::string& id);
  std::map<std::string, std::unique_ptr<SandboxRecord>>& sandboxes() { return sandboxes_; }
  kj::TaskSet& tasks() { return tasks_; }

 private:
  class ErrorHandler : public kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& exception) override;
  };
  kj::AsyncIoProvider& io_;
  kj::LowLevelAsyncIoProvider& low_;
  helper::Helper::Client helper_;
  helper::BrokerPolicy::Reader policy_;
  std::map<std::string, std::unique_ptr<SandboxRecord>> sandboxes_;
  ErrorHandler error_handler_;
  kj::TaskSet tasks_;
};

}  // namespace paseo
