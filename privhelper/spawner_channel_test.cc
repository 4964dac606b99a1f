// SpawnerChannel against a scripted spawner (this test writes its frames): the demultiplexing
// into per-process pipes, and that anything the sandbox's side says out of turn takes the
// channel down with every running process reported ended.
#include "privhelper/spawner_channel.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <string_view>

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
    MakeChannel({});
  }

  // A channel over new pipes, the test playing the spawner's end.
  void MakeChannel(SpawnerChannel::Options options) {
    channel_ = nullptr;
    int down[2], up[2];
    EXPECT_EQ(pipe2(down, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(up, O_CLOEXEC), 0);
    // Room for output frames from the scripted spawner where the kernel grants it (it may not:
    // an unprivileged user past fs.pipe-user-pages-soft keeps 64 KiB pipes). Write() does not
    // depend on it.
    fcntl(up[1], F_SETPIPE_SZ, 1 << 20);
    EXPECT_EQ(fcntl(up[1], F_SETFL, O_NONBLOCK), 0);
    from_channel_ = kj::AutoCloseFd(down[0]);
    to_channel_ = kj::AutoCloseFd(up[1]);
    channel_ = kj::heap<SpawnerChannel>(*io_.lowLevelProvider, kj::AutoCloseFd(down[1]),
                                        kj::AutoCloseFd(up[0]),
                                        [this](std::string why) { down_reason_ = why; },
                                        kj::mv(options));
  }

  // Every frame the channel sent the (scripted) spawner since the last call.
  std::vector<spawner::Frame> TakeDown() {
    fcntl(from_channel_.get(), F_SETFL, O_NONBLOCK);
    char buf[65536];
    ssize_t n;
    while ((n = read(from_channel_.get(), buf, sizeof(buf))) > 0)
      down_frames_.Feed(std::string_view(buf, static_cast<size_t>(n)));
    std::vector<spawner::Frame> frames;
    bool error = false;
    while (auto frame = down_frames_.Next(&error)) frames.push_back(*frame);
    EXPECT_FALSE(error);
    return frames;
  }

  // A new spawner's hello: its version and its (empty) list of held processes.
  void SayHello() {
    Say(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion) +
        spawner::Encode(Type::kHeldEnd, 0, ""));
  }

  void Say(const std::string& frame) {
    Write(frame);
    Turn();
  }
  // Writes all of `bytes` towards the channel, turning it whenever its pipe is full (for at
  // most 4000 turns: a channel that stopped reading fails the test instead of hanging it).
  void Write(std::string_view bytes) {
    for (int turns = 0; !bytes.empty(); ++turns) {
      ASSERT_LT(turns, 4000) << "the channel stopped reading";
      ssize_t n = write(to_channel_.get(), bytes.data(), bytes.size());
      if (n < 0 && errno == EAGAIN) {
        Turn();
        continue;
      }
      ASSERT_GT(n, 0) << strerror(errno);
      bytes.remove_prefix(static_cast<size_t>(n));
    }
  }
  // A turn of the channel: everything ready is handled. The timer alone is not enough: its
  // clock is the loop's last poll, so on a slow machine (qemu-user) the delay can be over at
  // once and the wait return before the channel has read what was written.
  void Turn() {
    io_.provider->getTimer().afterDelay(5 * kj::MILLISECONDS).wait(io_.waitScope);
    io_.waitScope.poll();
  }

  SpawnerChannel::Started StartOne() {
    SayHello();
    EXPECT_EQ(channel_->state(), SpawnerChannel::State::kUp);
    auto started = channel_->Start({false, "/", {"true"}, {}, "/bin", false, ""});
    EXPECT_TRUE(started.ok());
    Turn();
    return kj::mv(*started);
  }

  // Sends `bytes` of output for process `id` on stdout, in chunks of at most kMaxOutputChunk,
  // as a spawner far from the privhelper would: all of it before the channel reads any (as far
  // as the channel's pipe holds), then a turn of the channel. The last chunk says the spawner
  // is out of credit when `starved`.
  void SendOutput(uint32_t id, size_t bytes, bool starved = true) {
    while (bytes > 0) {
      size_t n = std::min(bytes, spawner::kMaxOutputChunk);
      char stream = static_cast<char>(spawner::kStdout | (starved && n == bytes ? spawner::kStarved : 0));
      std::string frame = spawner::Encode(Type::kOutput, id, std::string(1, stream) + std::string(n, 'o'));
      Write(frame);
      bytes -= n;
    }
    Turn();
  }

  // The stdout credit the channel has granted each process since the last call, read from the
  // frames it sent the (scripted) spawner.
  std::map<uint32_t, size_t> TakeGrants() {
    fcntl(from_channel_.get(), F_SETFL, O_NONBLOCK);
    char buf[65536];
    ssize_t n;
    while ((n = read(from_channel_.get(), buf, sizeof(buf))) > 0)
      down_frames_.Feed(std::string_view(buf, static_cast<size_t>(n)));
    std::map<uint32_t, size_t> grants;
    bool error = false;
    while (auto frame = down_frames_.Next(&error)) {
      if (frame->type != Type::kGrant || frame->payload[0] != spawner::kStdout) continue;
      const auto* b = reinterpret_cast<const uint8_t*>(frame->payload.data()) + 1;
      grants[frame->id] += uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
    }
    EXPECT_FALSE(error);
    return grants;
  }

  // Reads a process's stdout and stderr to their end-of-file as the broker would, turning the
  // channel meanwhile: what the privhelper still queues for one pipe is written only as it is
  // read (and the exit is reported after it), and pipes may be as small as 8 KiB. False if
  // they did not end.
  bool ReadToEnd(SpawnerChannel::Started& p, std::string* out, std::string* err) {
    std::pair<int, std::string*> open[] = {{p.stdout_r.get(), out}, {p.stderr_r.get(), err}};
    for (auto& [fd, into] : open) fcntl(fd, F_SETFL, O_NONBLOCK);
    for (int turns = 0; turns < 4000; ++turns) {
      bool ended = true;
      for (auto& [fd, into] : open) {
        if (fd < 0) continue;
        char buf[65536];
        ssize_t n;
        while ((n = read(fd, buf, sizeof(buf))) > 0) into->append(buf, static_cast<size_t>(n));
        if (n == 0) fd = -1;
        else ended = false;
      }
      if (ended) return true;
      Turn();
    }
    return false;
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
  spawner::FrameReader down_frames_{spawner::kMaxDownPayload};
};

TEST_F(SpawnerChannelTest, OutputAndExitReachTheProcessesPipes) {
  auto p = StartOne();
  Say(spawner::EncodeU32(Type::kStarted, p.id, 42));
  Say(spawner::Encode(Type::kOutput, p.id, std::string("\1hello")));
  Say(spawner::Encode(Type::kOutput, p.id, std::string("\2oops")));
  Say(spawner::Encode(Type::kEnd, p.id, std::string("\1")));
  Say(spawner::Encode(Type::kEnd, p.id, std::string("\2")));
  Say(spawner::EncodeU32(Type::kExit, p.id, 3 << 8));
  std::string out, err;
  ASSERT_TRUE(ReadToEnd(p, &out, &err));
  EXPECT_EQ(p.exit.wait(io_.waitScope), ProcessExit::Exited(3));
  EXPECT_EQ(out, "hello");
  EXPECT_EQ(err, "oops");
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
    std::string out, err;                                                                   \
    ASSERT_TRUE(ReadToEnd(p, &out, &err));                                                  \
    EXPECT_EQ(p.exit.wait(io_.waitScope), ProcessExit::Unknown());                          \
    EXPECT_NE(err.find("spawner went down"), std::string::npos) << err;                     \
    EXPECT_FALSE(channel_->Start({false, "/", {"true"}, {}, "/bin", false, ""}).ok());                         \
  } while (false)

TEST_F(SpawnerChannelTest, AnIdItNeverIssuedIsAViolation) {
  EXPECT_VIOLATION(spawner::Encode(Type::kOutput, id + 7, std::string("\1x")));
}

TEST_F(SpawnerChannelTest, OutputBeyondItsCreditIsAViolation) {
  // Two chunks in one read: one byte more than a stream starts with, before any is written back.
  std::string chunk = std::string("\1") + std::string(spawner::kInitialOutputWindow / 2, 'x');
  EXPECT_VIOLATION(spawner::Encode(Type::kOutput, id, chunk) +
                   spawner::Encode(Type::kOutput, id, chunk + "x"));
}

TEST_F(SpawnerChannelTest, AStoppedStatusIsNoExit) {
  EXPECT_VIOLATION(spawner::EncodeU32(Type::kExit, id, 0x137f));  // WIFSTOPPED
}

TEST_F(SpawnerChannelTest, AFrameLongerThanAllowedIsAViolation) {
  // The header alone: it announces more than a frame may carry.
  EXPECT_VIOLATION(spawner::Encode(Type::kOutput, id, std::string(spawner::kMaxUpPayload + 1, '\1'))
                       .substr(0, spawner::kHeaderBytes));
}

TEST_F(SpawnerChannelTest, StartedTwiceIsAViolation) {
  EXPECT_VIOLATION(spawner::EncodeU32(Type::kStarted, id, 43));
}

TEST_F(SpawnerChannelTest, NothingStartsBeforeHelloAndAWrongVersionIsRefused) {
  EXPECT_FALSE(channel_->Start({false, "/", {"true"}, {}, "/bin", false, ""}).ok());
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
    auto started = channel_->Start({false, "/", {"echo", big}, {}, "/bin", false, ""});
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
  auto q = channel_->Start({false, "/", {"true"}, {}, "/bin", false, ""});
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

// A stream whose reader keeps up is granted ever more credit, up to kMaxOutputWindow: one
// window per round trip is all a stream can move, and 32 KiB per round trip through gVisor was
// 0.02 of a runsc exec's throughput.
TEST_F(SpawnerChannelTest, AStreamItsReaderKeepsUpWithGetsAWiderWindow) {
  auto p = StartOne();
  Say(spawner::EncodeU32(Type::kStarted, p.id, 42));
  TakeGrants();
  size_t credit = spawner::kInitialOutputWindow;
  size_t widest = credit, sent = 0, received = 0;
  for (int round = 0; round < 14; ++round) {
    // The spawner sends all its credit before any grant reaches it (a round trip through
    // gVisor is long); the reader keeps up.
    // For the first rounds it does not say it ran out: its window stays as it was.
    bool starved = round >= 3;
    SendOutput(p.id, credit, starved);
    sent += credit;
    credit = 0;
    char buf[65536];
    for (int turns = 0; received < sent && turns < 1000; ++turns) {
      int avail = 0;
      while (ioctl(p.stdout_r.get(), FIONREAD, &avail) == 0 && avail > 0) {
        ssize_t n = read(p.stdout_r.get(), buf, sizeof(buf));
        ASSERT_GT(n, 0);
        received += static_cast<size_t>(n);
      }
      Turn();
    }
    ASSERT_EQ(received, sent);
    credit += TakeGrants()[p.id];
    if (!starved) {
      ASSERT_EQ(credit, spawner::kInitialOutputWindow);
    }
    widest = std::max(widest, credit);
    ASSERT_LE(credit, spawner::kMaxOutputWindow);
  }
  EXPECT_EQ(widest, spawner::kMaxOutputWindow);
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kUp) << down_reason_;
  EXPECT_LE(channel_->extra_credit(), SpawnerChannel::kMaxExtraCredit);
}

// Nobody reads many busy streams: whatever the spawner is allowed to send lands in the broker's
// pipes or in the privhelper, and the privhelper's part stays within the initial window per
// stream plus the channel's budget for wider windows.
TEST_F(SpawnerChannelTest, StuckStreamsHoldNoMoreThanTheBudget) {
  StartOne();
  std::vector<SpawnerChannel::Started> procs;
  std::map<uint32_t, size_t> credit;
  constexpr int kProcs = 24;
  for (int i = 0; i < kProcs; ++i) {
    auto started = channel_->Start({false, "/", {"true"}, {}, "/bin", false, ""});
    ASSERT_TRUE(started.ok());
    Turn();
    Say(spawner::EncodeU32(Type::kStarted, started->id, 100 + i));
    credit[started->id] = spawner::kInitialOutputWindow;
    procs.push_back(kj::mv(*started));
  }
  TakeGrants();
  std::map<uint32_t, size_t> sent;
  for (bool more = true; more;) {
    more = false;
    for (auto& [id, c] : credit) {
      if (c == 0) continue;
      SendOutput(id, c);
      sent[id] += c;
      c = 0;
    }
    for (auto& [id, g] : TakeGrants()) {
      credit[id] += g;
      more = true;
    }
  }
  size_t held = 0;
  for (auto& p : procs) {
    int in_pipe = 0;
    ASSERT_EQ(ioctl(p.stdout_r.get(), FIONREAD, &in_pipe), 0);
    held += sent[p.id] - static_cast<size_t>(in_pipe);
  }
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kUp) << down_reason_;
  EXPECT_LE(channel_->extra_credit(), SpawnerChannel::kMaxExtraCredit);
  EXPECT_LE(held, kProcs * size_t{spawner::kInitialOutputWindow} + SpawnerChannel::kMaxExtraCredit);
  // Once drained (what the privhelper held follows as the pipes are read), every stream is
  // granted credit again.
  for (int i = 0; i < 50; ++i) {
    for (auto& p : procs) {
      char buf[65536];
      int avail = 0;
      while (ioctl(p.stdout_r.get(), FIONREAD, &avail) == 0 && avail > 0)
        ASSERT_GT(read(p.stdout_r.get(), buf, sizeof(buf)), 0);
    }
    Turn();
  }
  EXPECT_EQ(TakeGrants().size(), static_cast<size_t>(kProcs));
}

// The spawner could not enter the process's working directory (its user may not search it;
// runsc exec's sentry sets it all the same): the process is handed over, with its own ends of
// its pipes, and its exit is the one the taker reports. Any other failure is reported as one.
TEST_F(SpawnerChannelTest, AWorkingDirectoryItCannotEnterIsHandedOver) {
  StartOne();
  int handed_out = -1;
  auto taker = kj::newPromiseAndFulfiller<ProcessExit>();
  auto p = channel_->Start(
      {false, "/locked", {"true"}, {}, "/bin", false, ""},
      SpawnerChannel::ChdirRefused(
          [&](int, int out, int) -> absl::StatusOr<kj::Promise<ProcessExit>> {
            handed_out = dup(out);
            return kj::mv(taker.promise);
          }));
  ASSERT_TRUE(p.ok());
  Turn();
  std::string failed = spawner::EncodeU32(Type::kFailed, p->id, EACCES).substr(spawner::kHeaderBytes);
  failed.push_back('\1');  // stage: chdir
  Say(spawner::Encode(Type::kFailed, p->id, failed));
  ASSERT_GE(handed_out, 0);
  ASSERT_EQ(write(handed_out, "from the taker", 14), 14);
  close(handed_out);
  taker.fulfiller->fulfill(ProcessExit::Exited(7));
  EXPECT_EQ(p->exit.wait(io_.waitScope), ProcessExit::Exited(7));
  Turn();
  EXPECT_EQ(ReadAll(p->stdout_r.get()), "from the taker");  // and end-of-file: nobody else writes
  EXPECT_EQ(ReadAll(p->stderr_r.get()), "");
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kUp);

  // Not found is no reason to hand over: it fails as runsc exec would.
  auto q = channel_->Start({false, "/gone", {"true"}, {}, "/bin", false, ""},
                           SpawnerChannel::ChdirRefused(
                               [&](int, int, int) -> absl::StatusOr<kj::Promise<ProcessExit>> {
                                 ADD_FAILURE() << "handed over";
                                 return absl::InternalError("no");
                               }));
  ASSERT_TRUE(q.ok());
  Turn();
  std::string gone = spawner::EncodeU32(Type::kFailed, q->id, ENOENT).substr(spawner::kHeaderBytes);
  gone.push_back('\1');
  Say(spawner::Encode(Type::kFailed, q->id, gone));
  EXPECT_EQ(q->exit.wait(io_.waitScope), ProcessExit::Unknown());
  EXPECT_NE(ReadAll(q->stderr_r.get()).find("working directory"), std::string::npos);
}

}  // namespace
}  // namespace paseo

namespace paseo {
namespace {

// ---------------------------------------------------------------- reattach

const std::string kKey(spawner::kKeyBytes, 'k');

spawner::HeldProcess HeldOne(const std::string& name, uint64_t out_base, uint64_t out_end) {
  spawner::HeldProcess h;
  h.pid = 50;
  h.out_base = out_base;
  h.out_end = out_end;
  h.name = name;
  return h;
}

TEST_F(SpawnerChannelTest, AFirstChannelGivesItsKeyAfterHello) {
  MakeChannel({kKey, false, nullptr});
  EXPECT_TRUE(TakeDown().empty()) << "nothing before the spawner's hello";
  SayHello();
  auto frames = TakeDown();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].type, Type::kKey);
  EXPECT_EQ(frames[0].payload, kKey);
}

TEST_F(SpawnerChannelTest, AReattachProvesItselfAndContinuesEachHeldProcessWhereItIsAsked) {
  MakeChannel({kKey, true, &io_.provider->getTimer()});
  auto first = TakeDown();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].type, Type::kAttach) << "the key goes first, before anything is heard";
  EXPECT_EQ(first[0].payload, kKey);
  Say(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion) +
      spawner::EncodeHeld(7, HeldOne("p-seven", 1000, 1500)) +
      spawner::Encode(Type::kHeldEnd, 0, ""));
  ASSERT_EQ(channel_->state(), SpawnerChannel::State::kUp);
  std::vector<SpawnerChannel::Held> held = channel_->TakeHeld();
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].id, 7u);
  EXPECT_EQ(held[0].name, "p-seven");
  // The broker's log ends at 1200: the spawner continues there.
  auto resumed = channel_->Resume(7, 1200, 0);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  auto asked = TakeDown();
  ASSERT_EQ(asked.size(), 1u);
  EXPECT_EQ(asked[0].type, Type::kResume);
  EXPECT_EQ(spawner::DecodeOffsets(asked[0].payload), (std::pair<uint64_t, uint64_t>{1200, 0}));
  EXPECT_FALSE(channel_->Resume(7, 1200, 0).ok()) << "one resume per process";
  Say(spawner::EncodeOffsets(Type::kResumed, 7, 1200, 0));
  SpawnerChannel::Resumed r = resumed->wait(io_.waitScope);
  EXPECT_EQ(r.stdout_start, 1200u);
  EXPECT_EQ(r.stderr_start, 0u);
  Say(spawner::Encode(Type::kOutput, 7, std::string("\1rest")));
  char buf[16];
  fcntl(r.stdout_r.get(), F_SETFL, O_NONBLOCK);
  EXPECT_EQ(read(r.stdout_r.get(), buf, sizeof(buf)), 4) << "the bytes from 1200 on";
  // What the broker took is said back once the pipe is quiet: everything up to 1204 is in its
  // log, so the spawner may forget it.
  for (int i = 0; i < 80; ++i) Turn();  // past kAckDelay
  bool logged = false;
  for (const auto& f : TakeDown()) {
    auto g = f.type == Type::kGrant ? spawner::DecodeGrant(f.payload) : std::nullopt;
    if (g && g->stream == spawner::kStdout) logged = logged || g->logged == 1204;
  }
  EXPECT_TRUE(logged) << "a grant says the broker's log holds everything up to 1204";
  Say(spawner::Encode(Type::kEnd, 7, std::string("\1")) +
      spawner::Encode(Type::kEnd, 7, std::string("\2")) + spawner::EncodeU32(Type::kExit, 7, 5 << 8));
  SpawnerChannel::Started as_started{7, kj::mv(r.stdin_w), kj::mv(r.stdout_r), kj::mv(r.stderr_r),
                                     kj::mv(held[0].exit)};
  std::string out, err;
  ASSERT_TRUE(ReadToEnd(as_started, &out, &err));
  EXPECT_EQ(out, "");
  EXPECT_EQ(as_started.exit.wait(io_.waitScope), ProcessExit::Exited(5));
  // New processes get ids after the held ones.
  auto next = channel_->Start({false, "/", {"true"}, {}, "/bin", false, "p-new"});
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->id, 7u);
}

TEST_F(SpawnerChannelTest, AResumeAnsweredLaterIsAGapAndEarlierIsAViolation) {
  MakeChannel({kKey, true, nullptr});
  Say(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion) +
      spawner::EncodeHeld(3, HeldOne("p-a", 5000, 6000)) +
      spawner::EncodeHeld(4, HeldOne("p-b", 0, 10)) + spawner::Encode(Type::kHeldEnd, 0, ""));
  auto held = channel_->TakeHeld();
  ASSERT_EQ(held.size(), 2u);
  auto later = channel_->Resume(3, 100, 0);
  ASSERT_TRUE(later.ok());
  Say(spawner::EncodeOffsets(Type::kResumed, 3, 5000, 0));
  EXPECT_EQ(later->wait(io_.waitScope).stdout_start, 5000u) << "the spawner kept from 5000 on";
  auto earlier = channel_->Resume(4, 10, 0);
  ASSERT_TRUE(earlier.ok());
  Say(spawner::EncodeOffsets(Type::kResumed, 4, 2, 0));  // would repeat 8 bytes
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);
  EXPECT_NE(down_reason_.find("before the one asked"), std::string::npos) << down_reason_;
  EXPECT_EQ(held[1].exit.wait(io_.waitScope), ProcessExit::Unknown());
}

// The broker starts only once every held process is resumed: a spawner that never answers a
// resume fails its channel after the patience, and its processes end, instead of keeping the
// whole service from serving.
TEST_F(SpawnerChannelTest, AResumeNeverAnsweredFailsTheChannelAfterThePatience) {
  SpawnerChannel::Options options{kKey, true, &io_.provider->getTimer()};
  options.resume_patience = 200 * kj::MILLISECONDS;
  MakeChannel(options);
  Say(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion) +
      spawner::EncodeHeld(3, HeldOne("p-a", 0, 10)) + spawner::EncodeHeld(4, HeldOne("p-b", 0, 0)) +
      spawner::Encode(Type::kHeldEnd, 0, ""));
  auto held = channel_->TakeHeld();
  ASSERT_EQ(held.size(), 2u);
  auto resumed = channel_->Resume(3, 10, 0);
  ASSERT_TRUE(resumed.ok()) << resumed.status();
  auto started = std::chrono::steady_clock::now();
  // Bounded, as every wait here: a deadline that never fires fails, it does not hang.
  auto& timer = io_.provider->getTimer();
  auto outcome = kj::runCatchingExceptions(
      [&] { timer.timeoutAfter(10 * kj::SECONDS, kj::mv(*resumed)).wait(io_.waitScope); });
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  KJ_IF_MAYBE (e, outcome) {
    EXPECT_EQ(e->getType(), kj::Exception::Type::DISCONNECTED);
  } else {
    ADD_FAILURE() << "a resume the spawner never answered succeeded";
  }
  EXPECT_GE(waited, 0.15) << "not before the patience";
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);
  EXPECT_NE(down_reason_.find("did not answer the resume of process 3"), std::string::npos)
      << down_reason_;
  for (auto& h : held)
    EXPECT_EQ(timer.timeoutAfter(10 * kj::SECONDS, kj::mv(h.exit)).wait(io_.waitScope),
              ProcessExit::Unknown());
  auto other = channel_->Resume(4, 0, 0);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kUnavailable) << "the others fail at once";
  EXPECT_NE(other.status().message().find("did not answer the resume of process 3"),
            std::string::npos) << other.status();
}

// An answered resume is not failed later by its deadline.
TEST_F(SpawnerChannelTest, AnAnsweredResumeOutlivesItsDeadline) {
  SpawnerChannel::Options options{kKey, true, &io_.provider->getTimer()};
  options.resume_patience = 100 * kj::MILLISECONDS;
  MakeChannel(options);
  Say(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion) +
      spawner::EncodeHeld(3, HeldOne("p-a", 0, 10)) + spawner::Encode(Type::kHeldEnd, 0, ""));
  auto held = channel_->TakeHeld();
  auto resumed = channel_->Resume(3, 10, 0);
  ASSERT_TRUE(resumed.ok());
  Say(spawner::EncodeOffsets(Type::kResumed, 3, 10, 0));
  EXPECT_EQ(io_.provider->getTimer()
                .timeoutAfter(10 * kj::SECONDS, kj::mv(*resumed))
                .wait(io_.waitScope)
                .stdout_start,
            10u);
  io_.provider->getTimer().afterDelay(300 * kj::MILLISECONDS).wait(io_.waitScope);
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kUp) << down_reason_;
}

TEST_F(SpawnerChannelTest, WhatAReattachedSpawnerSaysIsCheckedStrictly) {
  struct Case {
    const char* what;
    std::string frames;
  };
  std::string hello = spawner::EncodeU32(Type::kHello, 0, spawner::kVersion);
  std::string end = spawner::Encode(Type::kHeldEnd, 0, "");
  spawner::HeldProcess too_much = HeldOne("p-a", 0, spawner::kMaxRetainedBytes + 1);
  spawner::HeldProcess merged_err = HeldOne("p-a", 0, 1);
  merged_err.merged = true;
  merged_err.err_end = 5;
  std::vector<Case> cases = {
      {"a name that is no id", hello + spawner::EncodeHeld(3, HeldOne("../x", 0, 0)) + end},
      {"a name twice", hello + spawner::EncodeHeld(3, HeldOne("p-a", 0, 0)) +
                           spawner::EncodeHeld(4, HeldOne("p-a", 0, 0)) + end},
      {"an id twice", hello + spawner::EncodeHeld(3, HeldOne("p-a", 0, 0)) +
                          spawner::EncodeHeld(3, HeldOne("p-b", 0, 0)) + end},
      {"more kept than a spawner keeps", hello + spawner::EncodeHeld(3, too_much) + end},
      {"a terminal with a stderr", hello + spawner::EncodeHeld(3, merged_err) + end},
      {"output before resume", hello + spawner::EncodeHeld(3, HeldOne("p-a", 0, 9)) + end +
                                   spawner::Encode(Type::kOutput, 3, std::string("\1x"))},
      {"an exit before resume", hello + spawner::EncodeHeld(3, HeldOne("p-a", 0, 9)) + end +
                                    spawner::EncodeU32(Type::kExit, 3, 0)},
      {"a list after the list", hello + end + spawner::EncodeHeld(3, HeldOne("p-a", 0, 0))},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    down_reason_.clear();
    MakeChannel({kKey, true, nullptr});
    Say(c.frames);
    EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);
    EXPECT_NE(down_reason_.find("broke the protocol"), std::string::npos) << down_reason_;
  }
  // A first channel never holds anything.
  down_reason_.clear();
  MakeChannel({kKey, false, nullptr});
  Say(hello + spawner::EncodeHeld(3, HeldOne("p-a", 0, 0)) + end);
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);
}

TEST_F(SpawnerChannelTest, ASpawnerOfAnotherVersionIsToldToDropItsProcesses) {
  MakeChannel({kKey, true, nullptr});
  TakeDown();
  Say(spawner::EncodeU32(Type::kHello, 0, spawner::kVersion + 1));
  EXPECT_EQ(channel_->state(), SpawnerChannel::State::kDown);
  EXPECT_NE(down_reason_.find("speaks spawner protocol version"), std::string::npos) << down_reason_;
  auto frames = TakeDown();
  ASSERT_FALSE(frames.empty());
  EXPECT_EQ(frames.back().type, Type::kDropAll) << "its processes end; the sandbox stays";
}

TEST_F(SpawnerChannelTest, AReleasedProcessIsForgottenByTheSpawnerToo) {
  MakeChannel({kKey, false, nullptr});
  auto p = StartOne();
  Say(spawner::EncodeU32(Type::kStarted, p.id, 42));
  Say(spawner::Encode(Type::kEnd, p.id, std::string("\1")) +
      spawner::Encode(Type::kEnd, p.id, std::string("\2")) + spawner::EncodeU32(Type::kExit, p.id, 0));
  std::string out, err;
  ASSERT_TRUE(ReadToEnd(p, &out, &err));
  p.exit.wait(io_.waitScope);
  TakeDown();
  channel_->Release(p.id);
  auto frames = TakeDown();
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].type, Type::kRelease);
  EXPECT_EQ(frames[0].id, p.id);
}

}  // namespace
}  // namespace paseo
