#include "privhelper/cpu_priority.h"

#include <kj/debug.h>

namespace paseo {

void CpuPriority::Started(const std::string& sandbox_id) {
  auto [it, fresh] = until_.insert_or_assign(sandbox_id, timer_.now() + kWindow);
  if (fresh) (void)set_(sandbox_id, kBoostShares);
  if (running_) return;
  running_ = true;
  run_ = Run().eagerlyEvaluate([this](kj::Exception&& e) {
    running_ = false;
    KJ_LOG(ERROR, "the CPU priority timer failed", e);
  });
}

kj::Promise<void> CpuPriority::Run() {
  kj::TimePoint earliest = until_.begin()->second;
  for (const auto& [id, until] : until_) earliest = kj::min(earliest, until);
  return timer_.atTime(earliest).then([this]() -> kj::Promise<void> {
    kj::TimePoint now = timer_.now();
    for (auto it = until_.begin(); it != until_.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      (void)set_(it->first, kBaseShares);
      it = until_.erase(it);
    }
    if (!until_.empty()) return Run();
    running_ = false;
    return kj::READY_NOW;
  });
}

}  // namespace paseo
