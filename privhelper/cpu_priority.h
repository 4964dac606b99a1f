// Work a client is waiting on runs first (decision 55): a sandbox a client has just started a
// process in weighs kBoostShares against its neighbours' CPU for kWindow after each start,
// every other sandbox kBaseShares (what its bundle asks runsc for). Four sandboxes busy on
// their own (a fork bomb, a build, an agent's loop) then leave a fifth's `exec` nearly the CPU
// it would have alone, within each sandbox's quota and the service's, which stay as they are.
//   CpuPriority priority(timer, [&](const std::string& id, uint64_t shares) {
//     return service.SetSandboxCpuShares(id, shares);
//   });
//   priority.Started("sb-...");  // boosted now, back to the base a window after the last start
//
// Weights are v1 cpu.shares (ServiceCgroup maps them to cpu.weight on v2). They only divide CPU
// that sandboxes contend for: alone, a sandbox at the base runs as fast as one boosted.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "absl/status/status.h"
#include <kj/async.h>
#include <kj/timer.h>
#include "privhelper/resource_limits.h"

namespace paseo {

class CpuPriority {
 public:
  static constexpr uint64_t kBaseShares = kBaseCpuShares;
  static constexpr uint64_t kBoostShares = kBoostCpuShares;
  static constexpr kj::Duration kWindow = 1 * kj::SECONDS;

  using SetShares = std::function<absl::Status(const std::string& sandbox_id, uint64_t shares)>;
  CpuPriority(kj::Timer& timer, SetShares set) : timer_(timer), set_(std::move(set)) {}

  // A client started a process in the sandbox: boosted until kWindow after the last start. A
  // weight that cannot be written (the sandbox's cgroup is gone) is left alone: it only orders
  // CPU, it bounds nothing.
  void Started(const std::string& sandbox_id);
  bool Boosted(const std::string& sandbox_id) const { return until_.count(sandbox_id) > 0; }

 private:
  // Ends each boost at its time, while any is left. A start always ends its boost after every
  // boost already there (one window from now), so the earliest end never moves earlier.
  kj::Promise<void> Run();

  kj::Timer& timer_;
  SetShares set_;
  std::map<std::string, kj::TimePoint> until_;  // the boosted sandboxes
  bool running_ = false;
  kj::Promise<void> run_ = kj::READY_NOW;
};

}  // namespace paseo
