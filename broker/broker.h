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
#include <kj/async-unix.h>
#include <kj/io.h>

#include "broker/authorization.h"
#include "broker/output_log.h"
#include "schema/api.capnp.h"
#include "schema/helper.capnp.h"

namespace paseo {

struct ExitInfo {
  enum Kind { kRunning, kExitCode, kSignal, kUnknown, kOomKilled } kind = kRunning;
  int value = 0;
  void To(api::ExitStatus::Builder out) const;
};

struct ProcessRecord : public kj::Refcounted {
  std::string id;
  std::string sandbox_id;
  std::vector<std::string> argv;
  kj::Own<OutputLog> stdout_log;
  kj::Own<OutputLog> stderr_log;
  // Shared with the writes queued on it, so a write still in flight when the process ends (or
  // its input is closed) never outlives the stream it writes to.
  struct StdinPipe : public kj::Refcounted {
    explicit StdinPipe(kj::Own<kj::AsyncOutputStream> s) : stream(kj::mv(s)) {}
    kj::Own<kj::AsyncOutputStream> stream;
  };
  kj::Maybe<kj::Own<StdinPipe>> stdin_stream;
  kj::Promise<void> stdin_chain = kj::READY_NOW;  // serializes writes
  size_t stdin_queued = 0;                         // bytes accepted but not yet written
  static constexpr size_t kMaxQueuedInput = 16 << 20;
  static constexpr size_t kQueuedCallBytes = 1024;  // what each queued write is charged extra
  ExitInfo exit;
  kj::Vector<kj::Own<kj::PromiseFulfiller<void>>> exit_waiters;
  kj::Promise<void> pumps = nullptr;

  bool tty = false;
  bool input_closed = false;  // tty: closeInput sent the EOF frame; the pipe stays for resize

  // A tty process's single stream would be kept as stdout; `pty` names it.
  OutputLog& buffer(api::Stream s) { return s == api::Stream::STDERR ? *stderr_log : *stdout_log; }
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
  // `log_dir` is the broker's own state directory: one subdirectory of output logs per sandbox.
  Broker(kj::AsyncIoProvider& io, kj::LowLevelAsyncIoProvider& low, kj::UnixEventPort& events,
         helper::Helper::Client helper, capnp::MallocMessageBuilder& policy_message,
         std::string log_dir);

  // Opens (or reopens, after a broker restart) a process's two output logs.
  void OpenLogs(const std::string& sandbox_id, ProcessRecord& p, uint64_t capacity);
  // Starts moving the process's output pipes into its logs and waiting for its exit.
  void StartPumps(const std::string& sandbox_id, ProcessRecord& p, kj::AutoCloseFd stdout_fd,
                  kj::AutoCloseFd stderr_fd);
  // Writes the sandbox's record (owner, labels, processes) crash-safely next to its logs.
  void Persist(const SandboxRecord& sandbox);
  // Removes a deleted sandbox's logs.
  void RemoveLogs(const std::string& sandbox_id);

  // Rebuilds the registry at start-up from the privhelper's inventory, reattaching every kept
  // process, and removes output logs of sandboxes that no longer exist.
  void Restore(helper::Helper::InventoryResults::Reader inventory, kj::WaitScope& wait);

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
  kj::UnixEventPort& events_;
  std::string log_dir_;
  helper::Helper::Client helper_;
  helper::BrokerPolicy::Reader policy_;
  std::map<std::string, std::unique_ptr<SandboxRecord>> sandboxes_;
  ErrorHandler error_handler_;
  kj::TaskSet tasks_;
};

}  // namespace paseo
