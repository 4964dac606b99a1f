// The input queue on a real pipe: order, the bound on what is queued, close and drop.
#include "broker/process_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

namespace paseo {
namespace {

class InputQueueTest : public ::testing::Test {
 protected:
  ~InputQueueTest() noexcept override {
    // Queued writes to a pipe nobody reads hold the queue; dropping it cancels them.
    queue_->Drop();
  }
  InputQueueTest() : io_(kj::setupAsyncIo()) {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    read_end_ = kj::AutoCloseFd(fds[0]);
    queue_->Attach(io_.lowLevelProvider->wrapOutputFd(
        fds[1], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP));
  }
  std::string ReadSome(size_t max) {
    std::string buf(max, '\0');
    ssize_t n = read(read_end_.get(), buf.data(), max);
    buf.resize(n < 0 ? 0 : static_cast<size_t>(n));
    return buf;
  }

  kj::AsyncIoContext io_;
  kj::AutoCloseFd read_end_;
  kj::Own<InputQueue> queue_ = kj::refcounted<InputQueue>();
};

TEST_F(InputQueueTest, WritesArriveWholeAndInOrder) {
  auto a = queue_->Write({"ab", "c"}, "closed");
  auto b = queue_->Write({"de"}, "closed");
  ASSERT_TRUE(a.ok() && b.ok());
  a->wait(io_.waitScope);
  b->wait(io_.waitScope);
  EXPECT_EQ(ReadSome(16), "abcde");
  EXPECT_EQ(queue_->queued(), 0u);
}

TEST_F(InputQueueTest, WhatIsQueuedIsBoundedAndEveryCallCosts) {
  std::string big(InputQueue::kMaxQueuedBytes / 4, 'x');
  std::vector<kj::Promise<void>> pending;
  size_t accepted = 0;
  for (int i = 0; i < 8; ++i) {
    auto w = queue_->Write({big}, "closed");
    if (!w.ok()) {
      EXPECT_EQ(w.status().code(), absl::StatusCode::kUnavailable);
      break;
    }
    ++accepted;
    pending.push_back(kj::mv(*w));
  }
  EXPECT_EQ(accepted, 3u) << "the fourth would pass the bound with its per-call cost";
  EXPECT_LE(queue_->queued(), InputQueue::kMaxQueuedBytes);
  // Empty calls cost something too: a client cannot queue them without limit.
  size_t empties = 0;
  while (queue_->Write({}, "closed").ok() && empties < 1 << 20) ++empties;
  EXPECT_LT(empties, InputQueue::kMaxQueuedBytes / InputQueue::kQueuedCallBytes + 1);
}

TEST_F(InputQueueTest, CloseRefusesLaterWritesAndEndsAfterEarlierOnes) {
  auto early = queue_->Write({"last"}, "closed");
  ASSERT_TRUE(early.ok());
  auto closed = queue_->Close();
  EXPECT_FALSE(queue_->open());
  auto late = queue_->Write({"x"}, "input is closed");
  EXPECT_EQ(late.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(late.status().message(), "input is closed");
  early->wait(io_.waitScope);
  closed.wait(io_.waitScope);
  EXPECT_EQ(ReadSome(16), "last");
  EXPECT_EQ(ReadSome(16), "") << "end-of-file once the queue let go of the pipe";
}

TEST_F(InputQueueTest, AWriteToAProcessThatStoppedReadingFails) {
  read_end_ = nullptr;
  auto w = queue_->Write({"x"}, "closed");
  ASSERT_TRUE(w.ok());
  auto error = kj::runCatchingExceptions([&] { w->wait(io_.waitScope); });
  KJ_IF_MAYBE(e, error) {
    EXPECT_STREQ(e->getDescription().cStr(),
                 "failed-precondition: the process no longer reads its input");
  } else {
    ADD_FAILURE() << "no error";
  }
}

TEST(ProcessRecordTest, SetExitWakesWaitersOnceAndReleasesInput) {
  auto io = kj::setupAsyncIo();
  auto p = kj::refcounted<ProcessRecord>();
  auto waiting = p->WhenEnded();
  p->SetExit(ProcessExit::Signaled(9));
  p->SetExit(ProcessExit::Exited(0));  // the first end is the one that counts
  waiting.wait(io.waitScope);
  EXPECT_EQ(p->exit, ProcessExit::Signaled(9));
  EXPECT_FALSE(p->input->open());
  p->WhenEnded().wait(io.waitScope);
}

}  // namespace
}  // namespace paseo
