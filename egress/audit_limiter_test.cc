// AuditLimiter: the burst, the refill, sandboxes apart, and what was suppressed.
#include "egress/audit_limiter.h"

#include "gtest/gtest.h"

namespace paseo::egress {
namespace {

TEST(AuditLimiterTest, ABurstThenTheRateThenTheCountOfTheRest) {
  AuditLimiter limiter;
  int written = 0;
  for (int i = 0; i < 1000; ++i) written += limiter.Allow("sb-a", 100.0) ? 1 : 0;
  EXPECT_EQ(written, static_cast<int>(AuditLimiter::kBurst));
  auto suppressed = limiter.TakeSuppressed();
  ASSERT_EQ(suppressed.size(), 1u);
  EXPECT_EQ(suppressed[0], std::make_pair(std::string("sb-a"), uint64_t{1000 - 50}));
  EXPECT_TRUE(limiter.TakeSuppressed().empty()) << "the count starts again";
  // A second later: kPerSecond more.
  written = 0;
  for (int i = 0; i < 1000; ++i) written += limiter.Allow("sb-a", 101.0) ? 1 : 0;
  EXPECT_EQ(written, static_cast<int>(AuditLimiter::kPerSecond));
}

TEST(AuditLimiterTest, OneSandboxsFloodLeavesAnothersLinesAlone) {
  AuditLimiter limiter;
  for (int i = 0; i < 1000; ++i) limiter.Allow("sb-flood", 5.0);
  EXPECT_TRUE(limiter.Allow("sb-quiet", 5.0));
  auto suppressed = limiter.TakeSuppressed();
  ASSERT_EQ(suppressed.size(), 1u);
  EXPECT_EQ(suppressed[0].first, "sb-flood");
  limiter.Forget("sb-flood");
  EXPECT_TRUE(limiter.Allow("sb-flood", 5.0)) << "a forgotten sandbox starts with a full bucket";
}

}  // namespace
}  // namespace paseo::egress
