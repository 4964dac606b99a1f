// CpuPriority on kj's hand-advanced timer, its writes recorded: when a boost starts and ends.
// The real cgroup files are covered by testing/resource_limits_test.
#include "privhelper/cpu_priority.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace paseo {
namespace {

using Write = std::pair<std::string, uint64_t>;

class CpuPriorityTest : public ::testing::Test {
 protected:
  // Behind a pointer: kj's destructors may throw, gtest's fixture destructor may not.
  struct Loop {
    kj::EventLoop loop;
    kj::WaitScope scope{loop};
    kj::TimerImpl timer{kj::origin<kj::TimePoint>()};  // advanced by hand
  };
  std::unique_ptr<Loop> loop_ = std::make_unique<Loop>();
  kj::TimerImpl& timer_ = loop_->timer;
  std::vector<Write> writes_;
  absl::Status answer_ = absl::OkStatus();
  std::unique_ptr<CpuPriority> owned_ = std::make_unique<CpuPriority>(
      timer_, [this](const std::string& id, uint64_t shares) {
        writes_.push_back({id, shares});
        return answer_;
      });
  CpuPriority& priority_ = *owned_;

  void TearDown() override { owned_.reset(); }

  // Moves the clock and runs what became due.
  void Advance(kj::Duration d) {
    timer_.advanceTo(timer_.now() + d);
    loop_->scope.poll();
  }
};

constexpr uint64_t kBoost = CpuPriority::kBoostShares;
constexpr uint64_t kBase = CpuPriority::kBaseShares;

TEST_F(CpuPriorityTest, AStartBoostsItsSandboxForOneWindow) {
  static_assert(kBoost >= 4096 * kBase, "a boosted sandbox must outweigh four busy ones by far");
  priority_.Started("sb-a");
  EXPECT_EQ(writes_, (std::vector<Write>{{"sb-a", kBoost}}));
  EXPECT_TRUE(priority_.Boosted("sb-a"));
  Advance(CpuPriority::kWindow - 1 * kj::MILLISECONDS);
  EXPECT_EQ(writes_.size(), 1u) << "ended before its window";
  Advance(1 * kj::MILLISECONDS);
  EXPECT_EQ(writes_, (std::vector<Write>{{"sb-a", kBoost}, {"sb-a", kBase}}));
  EXPECT_FALSE(priority_.Boosted("sb-a"));
  Advance(10 * kj::SECONDS);
  EXPECT_EQ(writes_.size(), 2u);
}

TEST_F(CpuPriorityTest, EachStartExtendsTheBoostWithoutWritingAgain) {
  priority_.Started("sb-a");
  for (int i = 0; i < 5; ++i) {
    Advance(CpuPriority::kWindow / 2);
    priority_.Started("sb-a");
  }
  EXPECT_EQ(writes_, (std::vector<Write>{{"sb-a", kBoost}}));
  Advance(CpuPriority::kWindow - 1 * kj::MILLISECONDS);
  EXPECT_TRUE(priority_.Boosted("sb-a"));
  Advance(1 * kj::MILLISECONDS);
  EXPECT_EQ(writes_.back(), Write("sb-a", kBase));
  // And a start after the end boosts again.
  priority_.Started("sb-a");
  EXPECT_EQ(writes_.back(), Write("sb-a", kBoost));
}

TEST_F(CpuPriorityTest, SandboxesEndTheirOwnBoosts) {
  priority_.Started("sb-a");
  Advance(CpuPriority::kWindow / 2);
  priority_.Started("sb-b");
  Advance(CpuPriority::kWindow / 2);
  EXPECT_FALSE(priority_.Boosted("sb-a"));
  EXPECT_TRUE(priority_.Boosted("sb-b"));
  Advance(CpuPriority::kWindow / 2);
  EXPECT_FALSE(priority_.Boosted("sb-b"));
  EXPECT_EQ(writes_, (std::vector<Write>{{"sb-a", kBoost}, {"sb-b", kBoost}, {"sb-a", kBase},
                                         {"sb-b", kBase}}));
}

// A sandbox deleted while boosted: its cgroup is gone, the write fails, and nothing else changes.
TEST_F(CpuPriorityTest, AWeightThatCannotBeWrittenIsLeftAlone) {
  answer_ = absl::NotFoundError("gone");
  priority_.Started("sb-gone");
  Advance(CpuPriority::kWindow);
  EXPECT_FALSE(priority_.Boosted("sb-gone"));
  answer_ = absl::OkStatus();
  priority_.Started("sb-b");
  Advance(CpuPriority::kWindow);
  EXPECT_EQ(writes_.back(), Write("sb-b", kBase));
}

}  // namespace
}  // namespace paseo
