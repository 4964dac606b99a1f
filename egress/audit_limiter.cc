// See audit_limiter.h.
#include "egress/audit_limiter.h"

#include <algorithm>

namespace paseo::egress {

bool AuditLimiter::Allow(const std::string& sandbox, double now) {
  auto [it, fresh] = buckets_.try_emplace(sandbox);
  Bucket& b = it->second;
  if (fresh) b.at = now;
  b.tokens = std::min(kBurst, b.tokens + std::max(0.0, now - b.at) * kPerSecond);
  b.at = now;
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return true;
  }
  ++b.suppressed;
  return false;
}

std::vector<std::pair<std::string, uint64_t>> AuditLimiter::TakeSuppressed() {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (auto& [id, b] : buckets_) {
    if (b.suppressed == 0) continue;
    out.emplace_back(id, b.suppressed);
    b.suppressed = 0;
  }
  return out;
}

}  // namespace paseo::egress
