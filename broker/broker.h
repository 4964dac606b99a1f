// The broker's operations: each one asks the registry (registry.h) whether it may happen,
// has the privhelper do the privileged part, and records the outcome in the registry and the
// state directory (state_dir.h). The broker holds no authority of its own: every privileged
// step is a request to the privhelper, which checks it again.
//
// Every operation returns absl::StatusOr<kj::Promise<T>>: a refusal decided here is the
// status (nothing has changed); what happens later -- including the privhelper's own refusals,
// forwarded with their reason -- is the promise. The RPC servers (api_servers.h) translate.
#pragma once

#include <optional>
#include <string>

#include <kj/async-io.h>
#include <kj/async-unix.h>

#include "absl/status/statusor.h"
#include "broker/authorization.h"
#include "broker/port_relay.h"
#include "broker/process_io.h"
#include "broker/registry.h"
#include "broker/state_dir.h"
#include "schema/api.capnp.h"
#include "schema/helper.capnp.h"

namespace paseo {

class Broker {
 public:
  // `state_dir`: the broker's own directory of logs and records. `timer` times the release of
  // ended processes (ReleaseRules, registry.h); tests pass a kj::TimerImpl they advance.
  Broker(kj::LowLevelAsyncIoProvider& low, kj::UnixEventPort& events, kj::Timer& timer,
         helper::Helper::Client helper, helper::BrokerPolicy::Reader policy,
         std::string state_dir);

  Registry& registry() { return registry_; }

  struct CreatedSandbox {
    std::string id;
    bool created = true;  // false: spec.key named an existing sandbox
  };
  // Resolves to the new sandbox's id once the privhelper has created and started it. With a
  // key that names an existing sandbox of the caller's uid, resolves to that one instead --
  // after its own create has ended, if it is still being created (and fails as that create
  // did), so concurrent creates with one key make one sandbox.
  absl::StatusOr<kj::Promise<CreatedSandbox>> CreateSandbox(const Peer& peer,
                                                            api::SandboxSpec::Reader spec);
  // Pause and resume (runsc pause/resume through the privhelper); both idempotent.
  absl::StatusOr<kj::Promise<void>> PauseSandbox(const Peer& peer, const std::string& id);
  absl::StatusOr<kj::Promise<void>> ResumeSandbox(const Peer& peer, const std::string& id);
  absl::StatusOr<kj::Promise<void>> DeleteSandbox(const Peer& peer, const std::string& id,
                                                  bool force);
  // Sandbox.connect: a TCP connection to `port` inside a running sandbox of the caller's, made
  // by the privhelper (which decides whether the profile allows the port) and relayed by the
  // broker (port_relay.h). The fd, a Unix stream socket, is the caller's to hand to its client.
  absl::StatusOr<kj::Promise<kj::AutoCloseFd>> Connect(const Peer& peer, const std::string& id,
                                                       uint16_t port);
  // How the sandbox's processes start (api.capnp SandboxInfo.spawner), as the privhelper says;
  // empty if it cannot say (an older privhelper, a sandbox it no longer has).
  kj::Promise<std::string> SpawnerState(const std::string& id);
  // What the privhelper measures of sandboxes `ids` now (cgroups, link counters) and of all
  // sandboxes together (Helper.sandboxUsage, asked in parts of at most kUsagePart ids, its
  // bound); fails as a part's call did.
  struct UsageAnswer {
    std::vector<capnp::Response<helper::Helper::SandboxUsageResults>> parts;  // at least one
    helper::ServiceUsage::Reader service() { return parts.front().getService(); }
    template <typename F>
    void ForEachSandbox(F&& f) {
      for (auto& part : parts)
        for (auto u : part.getSandboxes()) f(u);
    }
  };
  static constexpr size_t kUsagePart = 1024;
  kj::Promise<UsageAnswer> Usage(const std::vector<std::string>& ids);
  absl::StatusOr<kj::Promise<kj::Own<ProcessRecord>>> StartProcess(
      const Peer& peer, const std::string& sandbox_id, api::ProcessSpec::Reader spec);

  // Operations on a process the caller has already found visible (Registry::VisibleProcess).
  absl::StatusOr<kj::Promise<void>> WriteInput(ProcessRecord& p,
                                               kj::ArrayPtr<const capnp::byte> data);
  absl::StatusOr<kj::Promise<void>> CloseInput(ProcessRecord& p);
  absl::StatusOr<kj::Promise<void>> Resize(ProcessRecord& p, uint16_t rows, uint16_t cols);
  absl::StatusOr<kj::Promise<void>> Signal(ProcessRecord& p, int sig);
  // Process.release: failed-precondition while it runs. The promise resolves once the
  // privhelper has let go of it too.
  absl::StatusOr<kj::Promise<void>> Release(ProcessRecord& p);

  // Rebuilds the registry at start-up from the privhelper's inventory and the state dir's
  // records, reattaching every kept process (its output continues in its log at the same
  // offsets), and removes logs of sandboxes that no longer exist.
  void Restore(helper::Helper::InventoryResults::Reader inventory, kj::WaitScope& wait);

 private:
  // Takes over a process's stdio: stdin into its input queue, output into its logs, and its
  // end from the privhelper's waitProcess.
  void Attach(ProcessRecord& p, kj::AutoCloseFd in, kj::AutoCloseFd out, kj::AutoCloseFd err);
  // Keeps a waitSandbox open with the privhelper and records the stop it reports (its sentry or
  // gofer exited). Ends quietly when the sandbox is deleted.
  void WatchForStop(const std::string& sandbox_id);
  // Sends a helper request naming sandbox `id` (to its end, as ToCompletion) and, once it
  // succeeded, records that in the registry; a failure is forwarded with its reason.
  template <typename Request>
  kj::Promise<void> SendThenRecord(Request request, const std::string& id,
                                   void (Registry::*record)(const std::string&));
  // Releases a process the registry has let go of: cancels its pumps, removes its logs and
  // has the privhelper release its part. Persisting the record is the caller's.
  kj::Promise<void> FreeReleased(kj::Own<ProcessRecord> p);
  // Releases what ReleaseRules says is due in one sandbox, then re-arms the release timer.
  void ReleaseDue(const std::string& sandbox_id);
  // Arms the timer for the earliest time a process becomes due (if earlier than the armed one).
  void ArmReleaseTimer();
  // Hooks a process's end and drain into the release rules.
  void WatchForRelease(ProcessRecord& p);
  // A process the broker's record has but a restarted privhelper could not keep (`reason`,
  // helper.capnp AdoptedSandbox.lostReason): listed as ended (unknown), its logs readable, the
  // reason appended to its stderr.
  void RestoreLost(SandboxRecord& sb, const std::string& id, const StateDir::SavedProcess& what,
                   const std::string& reason);
  // Runs `work` to its end even if the returned promise (an RPC call) is cancelled.
  template <typename T>
  kj::Promise<T> ToCompletion(kj::Promise<T> work);

  kj::LowLevelAsyncIoProvider& low_;
  kj::UnixEventPort& events_;
  kj::Timer& timer_;
  helper::Helper::Client helper_;
  Registry registry_;
  StateDir state_;
  // The creates under way of sandboxes with a key, by sandbox id: a second create with the key
  // waits for the first one's outcome.
  std::map<std::string, kj::ForkedPromise<std::string>> keyed_creates_;
  // Deletes the privhelper has not answered yet, by sandbox id: a second delete waits for the
  // same answer.
  std::map<std::string, kj::ForkedPromise<void>> deletes_;
  // After a delete was answered: waits for the privhelper's background teardown, then forgets
  // the sandbox (its record and logs).
  void AwaitGone(const std::string& id);
  // A delete the privhelper did not answer with success: not-found finishes it (nothing is
  // held any more), a refusal puts the sandbox back as it was `before`, anything else is a
  // teardown that failed (TeardownFailed). Rejects with the error unless it finished it.
  kj::Promise<void> DeleteFailed(const std::string& id, SandboxState before, kj::Exception&& e);
  // The sandbox is `stopped` with "its delete did not finish (...); delete it again".
  void TeardownFailed(const std::string& id, const kj::Exception& e);
  kj::TaskSet tasks_;
  PortRelays relays_;
  // The release timer: when it fires next (none: not armed). A timer armed for a later time
  // finds release_at_ changed when it fires and does nothing.
  std::optional<kj::TimePoint> release_at_;
  uint64_t release_generation_ = 0;
};

}  // namespace paseo
