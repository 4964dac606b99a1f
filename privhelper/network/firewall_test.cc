// Firewall's memory of what resolved names opened, with a fake clock and a fake nft: which
// answers cost a transaction, what they contain, and the bounds (elements, rate). The real nft
// side is in sandbox_networks_test.cc.
#include "privhelper/network/firewall.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace paseo::network {
namespace {

using namespace std::chrono_literals;

constexpr uint32_t kA = 0xCB007101;  // 203.0.113.1

class FirewallMemoryTest : public ::testing::Test {
 protected:
  FirewallMemoryTest() : fw_(-1, *ParseCidr("10.88.0.0/24"), "") {
    fw_.SetClockForTesting([this] { return now_; });
    fw_.SetResolvedRunnerForTesting([this](const std::string& text) {
      texts_.push_back(text);
      return fail_ ? absl::InternalError("nft says no") : absl::OkStatus();
    });
  }
  std::chrono::seconds Allow(std::vector<uint32_t> addrs, std::chrono::seconds ttl = 300s,
                             std::vector<uint16_t> ports = {443}) {
    return fw_.AllowResolved("sb-1", addrs, ports, ttl);
  }

  Firewall fw_;
  std::chrono::steady_clock::time_point now_ = std::chrono::steady_clock::time_point{} + 1000h;
  std::vector<std::string> texts_;
  bool fail_ = false;
};

TEST_F(FirewallMemoryTest, AnAnswerOfThreeAddressesIsOneTransaction) {
  EXPECT_EQ(Allow({kA, kA + 1, kA + 2}), 300s);
  ASSERT_EQ(fw_.resolved_transactions(), 1u);
  ASSERT_EQ(texts_.size(), 1u);
  for (const char* a : {"203.0.113.1 . 443", "203.0.113.2 . 443", "203.0.113.3 . 443"})
    EXPECT_TRUE(absl::StrContains(texts_[0], a)) << a;
}

TEST_F(FirewallMemoryTest, AnAnswerTooLargeForOneMessageIsSplit) {
  std::vector<uint32_t> addrs;
  std::vector<uint16_t> ports;
  for (uint32_t i = 0; i < 32; ++i) addrs.push_back(kA + i);
  for (uint16_t p = 1; p <= 100; ++p) ports.push_back(p);
  EXPECT_EQ(Allow(addrs, 300s, ports), 300s);
  size_t chunks = (3200 + Firewall::kResolvedPerTransaction - 1) / Firewall::kResolvedPerTransaction;
  EXPECT_EQ(fw_.resolved_transactions(), chunks) << "3200 elements in chunks";
  ASSERT_EQ(texts_.size(), chunks);
  EXPECT_TRUE(absl::StrContains(texts_.back(), "203.0.113.32 . 100 timeout"));
  EXPECT_EQ(Allow(addrs, 300s, ports), 300s);
  EXPECT_EQ(fw_.resolved_transactions(), chunks);
}

TEST_F(FirewallMemoryTest, RepeatedAnswersCostNothingUntilHalfTheTtlIsLeft) {
  EXPECT_EQ(Allow({kA, kA + 1, kA + 2}), 300s);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(Allow({kA + 2, kA, kA + 1}), 300s);
  EXPECT_EQ(fw_.resolved_transactions(), 1u);
  now_ += 100s;
  EXPECT_EQ(Allow({kA, kA + 1, kA + 2}), 200s) << "kept, and the answer's TTL says how long";
  EXPECT_EQ(fw_.resolved_transactions(), 1u);
  now_ += 51s;  // 149 s left of 300: refreshed
  EXPECT_EQ(Allow({kA, kA + 1, kA + 2}), 300s);
  EXPECT_EQ(fw_.resolved_transactions(), 2u);
  // A longer TTL than what is left refreshes; a much shorter one does not.
  EXPECT_EQ(Allow({kA}, 30s), 30s);
  EXPECT_EQ(fw_.resolved_transactions(), 2u);
  EXPECT_EQ(Allow({kA}, 3600s), 3600s);
  EXPECT_EQ(fw_.resolved_transactions(), 3u);
  EXPECT_TRUE(absl::StrContains(texts_.back(), "203.0.113.1 . 443 timeout 3600s"));
}

TEST_F(FirewallMemoryTest, OnlyTheElementsThatNeedItAreInTheTransaction) {
  Allow({kA});
  now_ += 10s;
  EXPECT_EQ(Allow({kA, kA + 1}), 290s) << "the shortest one kept caps the answer";
  ASSERT_EQ(texts_.size(), 2u);
  EXPECT_FALSE(absl::StrContains(texts_[1], "203.0.113.1 "));
  EXPECT_TRUE(absl::StrContains(texts_[1], "203.0.113.2 . 443"));
  // Other ports of a known address are new elements.
  Allow({kA}, 300s, {80});
  ASSERT_EQ(texts_.size(), 3u);
  EXPECT_TRUE(absl::StrContains(texts_[2], "203.0.113.1 . 80 timeout"));
  EXPECT_FALSE(absl::StrContains(texts_[2], "203.0.113.1 . 443"));
}

TEST_F(FirewallMemoryTest, ExpiredEntriesAreOpenedAgain) {
  Allow({kA});
  now_ += 301s;  // the kernel dropped it
  EXPECT_EQ(Allow({kA}), 300s);
  EXPECT_EQ(fw_.resolved_transactions(), 2u);
}

TEST_F(FirewallMemoryTest, RemovingOrAddingTheSandboxForgetsWhatItOpened) {
  Allow({kA});
  (void)fw_.RemoveSandbox(SandboxTag("sb-1"));  // no namespace here: only the memory matters
  Allow({kA});
  EXPECT_EQ(fw_.resolved_transactions(), 2u) << "a new set is empty: open it again";
  Allow({kA});
  EXPECT_EQ(fw_.resolved_transactions(), 2u);
  FirewallSandbox sandbox;
  sandbox.sandbox_id = "sb-1";
  sandbox.host_ifname = HostIfname("sb-1");
  (void)fw_.AddSandbox(sandbox);
  Allow({kA});
  EXPECT_EQ(fw_.resolved_transactions(), 3u);
}

TEST_F(FirewallMemoryTest, AFailedTransactionIsNotRememberedAndAnswersZero) {
  fail_ = true;
  EXPECT_EQ(Allow({kA}), 0s);
  fail_ = false;
  EXPECT_EQ(Allow({kA}), 300s);
  EXPECT_EQ(fw_.resolved_transactions(), 2u);
}

TEST_F(FirewallMemoryTest, MemoryIsBoundedAndExpiredEntriesMakeRoom) {
  std::vector<uint32_t> many;
  for (uint32_t i = 0; i < kMaxResolvedElements - 1; ++i) many.push_back(0x0B000000 + i);
  EXPECT_EQ(Allow(many, 60s), 60s);
  EXPECT_EQ(Allow({kA}, 600s), 600s) << "the last free element";
  size_t before = fw_.resolved_transactions();
  EXPECT_EQ(Allow({kA + 1}), 0s) << "full: not opened (the resolver answers SERVFAIL)";
  EXPECT_EQ(fw_.resolved_transactions(), before) << "nothing was tried";
  now_ += 400s;  // kA still refreshable at the bound
  EXPECT_EQ(Allow({kA}, 600s), 600s);
  EXPECT_EQ(fw_.resolved_transactions(), before + 1);
  EXPECT_EQ(Allow({kA + 1}), 300s) << "the 60 s ones expired and were forgotten";
  EXPECT_EQ(fw_.resolved_transactions(), before + 2);
}

TEST_F(FirewallMemoryTest, TransactionsPerSandboxAreRateLimited) {
  uint32_t next = kA;
  int opened = 0;
  while (Allow({next++}) > 0s) ++opened;
  EXPECT_EQ(opened, static_cast<int>(Firewall::kResolvedBurst));
  EXPECT_EQ(fw_.resolved_transactions(), static_cast<size_t>(opened)) << "refused untried";
  EXPECT_EQ(Allow({kA}), 300s) << "what is open is still answered";
  EXPECT_EQ(fw_.AllowResolved("sb-2", {kA}, {443}, 300s), 300s) << "another sandbox's budget";
  now_ += 1s;
  opened = 0;
  while (Allow({next++}) > 0s) ++opened;
  EXPECT_EQ(opened, static_cast<int>(Firewall::kResolvedPerSecond));
}

}  // namespace
}  // namespace paseo::network
