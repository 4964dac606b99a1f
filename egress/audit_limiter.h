// How many of a sandbox's connection lines the egress proxy writes: a token bucket per sandbox
// (kPerSecond, kBurst), the rest counted and written once a second as one "coalesced" line, so a
// sandbox opening and closing connections as fast as it can cannot flood the privhelper's log.
//
//   AuditLimiter limiter;
//   if (limiter.Allow(event.sandbox_id, now_seconds)) WriteLine(event);
//   for (auto& [id, n] : limiter.TakeSuppressed()) WriteCoalesced(id, n);  // every second
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace paseo::egress {

class AuditLimiter {
 public:
  static constexpr double kPerSecond = 20;
  static constexpr double kBurst = 50;

  // Whether a line for `sandbox` may be written at `now` (seconds, monotonic); if not, it is
  // counted for TakeSuppressed.
  bool Allow(const std::string& sandbox, double now);
  // The lines suppressed since the last call, per sandbox (the counts start again at zero).
  std::vector<std::pair<std::string, uint64_t>> TakeSuppressed();
  // Forgets a sandbox that is no longer served.
  void Forget(const std::string& sandbox) { buckets_.erase(sandbox); }

 private:
  struct Bucket {
    double tokens = kBurst;
    double at = 0;
    uint64_t suppressed = 0;
  };
  std::map<std::string, Bucket> buckets_;
};

}  // namespace paseo::egress
