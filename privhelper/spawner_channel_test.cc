// SpawnerChannel against a scripted spawner (this test writes its frames): the demultiplexing
// into per-process pipes, and that anything the sandbox's side says out of turn takes the
// channel down with every running process reported ended.
#include "privhelper/spawner_channel.h"

#include <fcntl.h>
#include <unistd.h>

#include <kj/async-io.h>

#include "gtest/gtest.h"

namespace paseo {
namespace {

using spawner::Type;

class SpawnerChannelTest : public ::testing::Test {
 protected:
  // The kj objects live in a heap block: their destructors may throw, gtest's may not.
  struct Kj {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    kj::Own<SpawnerChannel> channel;
    kj::AutoCloseFd from_channel, to_channel;
  };

  SpawnerChannelTest()
      : kj_(new Kj),
        io_(kj_->io),
        channel_(kj_->channel),
        from_channel_(kj_->from_channel),
        to_channel_(kj_->to_channel) {
    int down[2], up[2];
    EXPECT_EQ(pipe2(down, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(up, O_CLOEXEC), 0);
    from_channel_ = kj::AutoCloseFd(down[0]);
    to_channel_ = kj::AutoCloseFd(up[1]);
    channel_ = kj::heap<SpawnerChannel>(*io_.lowLevelProvider, kj::AutoCloseFd(down[1]),
                                        kj::AutoCloseFd(up[0]),
                                        [this](std::string why) { down_reason_ = why; });
  }

  void Say(const std::string& frame) {
    ASSERT_EQ(write(to_channel_.get(), frame.data(), frame.size()),
              static_cast<ssize_t>(frame.size()));
    Turn();
  }
  void Turn() { io_.provider->getTimer().afterDelay(5 * kj::MILLISECONDS).wait(io_.waitScope); }

  SpawnerChannel::Started StartOne() {
    Say(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion));
    EXPECT_EQ(channel_->state(), SpawnerChannel::State::kUp);
    auto started = channel_->Start({false, "/", {"true"}, {}});
    EXPECT_TRUE(started.ok());
    Turn();
    return kj::mv(*started);
  }

  static std::string ReadAll(int fd) {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }

  void TearDown() override { delete kj_; }

  Kj* kj_;
  kj::AsyncIoContext& io_;
  kj::Own<SpawnerChannel>& channel_;
  kj::AutoCloseFd& from_channel_;
  kj::AutoCloseFd& to_channel_;
  std::string down_reason_;
};

TEST_F(SpawnerChannelTest, OutputAndExitReachTheProcessesPipes) {
  auto p = StartOne();
  Say(spawner::EncodeU32(Type::kStarted, p.id, 42));
  Say(spawner::Encode(Type::kOutput, p.id, std::string("\1hello")));
  Say(spawner::Encode(Type::kOutput, p.id, std::string("\2oops")));
  Say(spawner::Encode(Type::kEnd, p.id, std::string("\1")));
  Say(spawner::Encode(Type::kEnd, p.id, std::string("\2")));
  Say(spawner::EncodeU32(Type::kExit, p.id, 3 << 8));
  EXPECT_EQ(p.exit.wait(io_.waitScope), ProcessExit::Exited(3));
  EXPECT_EQ(ReadAll(p.stdout_r.get()), "hello");
  EXPECT_EQ(ReadAll(p.stderr_r.get()), "oops");
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kUp);
}

// After a started process, the scripted spawner sends `frames_of_id` (an expression of the
// process's `id`): the channel must go down for breaking the protocol, the process must end with
// the reason on its stderr, and nothing more starts through it.
#define EXPECT_VIOLATION(frames_of_id)                                                      \
  do {                                                                                      \
    auto p = StartOne();                                                                    \
    Say(spawner::EncodeU32(Type::kStarted, p.id, 42));                                      \
    Say([&](uint32_t id) { return frames_of_id; }(p.id));                                   \
    EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);                             \
    EXPECT_NE(down_reason_.find("broke the protocol"), std::string::npos) << down_reason_;  \
    EXPECT_EQ(p.exit.wait(io_.waitScope), ProcessExit::Unknown());                          \
    Turn();                                                                                 \
    EXPECT_NE(ReadAll(p.stderr_r.get()).find("spawner went down"), std::string::npos);      \
    EXPECT_FALSE(channel_->Start({false, "/", {"true"}, {}}).ok());                         \
  } while (false)

TEST_F(SpawnerChannelTest, AnIdItNeverIssuedIsAViolation) {
  EXPECT_VIOLATION(spawner::Encode(Type::kOutput, id + 7, std::string("\1x")));
}

TEST_F(SpawnerChannelTest, OutputBeyondItsCreditIsAViolation) {
  // Three full chunks in one read: more than the 32 KiB window before any is written back.
  std::string chunk = std::string("\1") + std::string(spawner::kMaxOutputChunk, 'x');
  EXPECT_VIOLATION(spawner::Encode(Type::kOutput, id, chunk) +
                   spawner::Encode(Type::kOutput, id, chunk) +
                   spawner::Encode(Type::kOutput, id, chunk));
}

TEST_F(SpawnerChannelTest, AStoppedStatusIsNoExit) {
  EXPECT_VIOLATION(spawner::EncodeU32(Type::kExit, id, 0x137f));  // WIFSTOPPED
}

TEST_F(SpawnerChannelTest, AFrameLongerThanAllowedIsAViolation) {
  // The header alone: it announces more than a frame may carry.
  EXPECT_VIOLATION(spawner::Encode(Type::kOutput, id, std::string(70000, '\1'))
                       .substr(0, spawner::kHeaderBytes));
}

TEST_F(SpawnerChannelTest, StartedTwiceIsAViolation) {
  EXPECT_VIOLATION(spawner::EncodeU32(Type::kStarted, id, 43));
}

TEST_F(SpawnerChannelTest, NothingStartsBeforeHelloAndAWrongVersionIsRefused) {
  EXPECT_FALSE(channel_->Start({false, "/", {"true"}, {}}).ok());
  Say(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion + 1));
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);
  EXPECT_NE(down_reason_.find("protocol version"), std::string::npos) << down_reason_;
}

TEST_F(SpawnerChannelTest, ItsEndEndsItsProcesses) {
  auto p = StartOne();
  Say(spawner::EncodeU32(Type::kStarted, p.id, 42));
  to_channel_ = nullptr;
  Turn();
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);
  EXPECT_EQ(p.exit.wait(io_.waitScope), ProcessExit::Unknown());
  EXPECT_EQ(down_reason_, "it ended");
}

// A spawner that stops reading its channel (stopped, or something else writes it and never
// reads) cannot make the privhelper queue without bound: past kMaxOutboxBytes it goes down.
TEST_F(SpawnerChannelTest, ASpawnerThatStopsReadingIsBounded) {
  StartOne();  // nothing ever reads from_channel_ here
  std::string big(200 * 1024, 'a');
  size_t starts = 0;
  while (channel_->state() == SpawnerChannel::State::kUp && starts < 64) {
    auto started = channel_->Start({false, "/", {"echo", big}, {}});
    if (started.ok()) ++starts;
    Turn();
  }
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);
  EXPECT_NE(down_reason_.find("stopped reading"), std::string::npos) << down_reason_;
  EXPECT_LE(starts * big.size(), SpawnerChannel::kMaxOutboxBytes + 2 * big.size() + (64 << 10))
      << starts << " starts queued";
}

// The broker released an ended process whose in-sandbox pipes something still holds open (a
// daemon it left): its host pipes close at once, and output that still arrives for it is dropped
// and credited, not a violation.
TEST_F(SpawnerChannelTest, AReleasedProcessLetsGoOfItsPipes) {
  auto p = StartOne();
  Say(spawner::EncodeU32(Type::kStarted, p.id, 42));
  Say(spawner::EncodeU32(Type::kExit, p.id, 0));
  EXPECT_EQ(p.exit.wait(io_.waitScope), ProcessExit::Exited(0));
  channel_->Release(p.id);
  Turn();
  EXPECT_EQ(ReadAll(p.stdout_r.get()), "");  // end-of-file: the privhelper holds no write end
  EXPECT_EQ(ReadAll(p.stderr_r.get()), "");
  Say(spawner::Encode(Type::kOutput, p.id, std::string("\1late")));
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kUp) << down_reason_;
  // A running process is not released.
  auto q = channel_->Start({false, "/", {"true"}, {}});
  ASSERT_TRUE(q.ok());
  Turn();
  Say(spawner::EncodeU32(Type::kStarted, q->id, 43));
  channel_->Release(q->id);
  Say(spawner::Encode(Type::kOutput, q->id, std::string("\1still")));
  Say(spawner::Encode(Type::kEnd, q->id, std::string("\1")));
  Say(spawner::Encode(Type::kEnd, q->id, std::string("\2")));
  Say(spawner::EncodeU32(Type::kExit, q->id, 0));
  EXPECT_EQ(q->exit.wait(io_.waitScope), ProcessExit::Exited(0));
  EXPECT_EQ(ReadAll(q->stdout_r.get()), "still");
}

}  // namespace
}  // namespace paseo
