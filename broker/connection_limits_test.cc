// Connection limits on in-memory streams: real capnp messages pass and their charge is given
// back; oversized, unfinished and slow messages are refused at the connection that sent them;
// waiting calls are bounded per connection and per uid.
#include "broker/connection_limits.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

#include <capnp/message.h>
#include <kj/io.h>
#include <capnp/serialize-async.h>
#include <capnp/schema.capnp.h>

namespace paseo {
namespace {

class MeteredStreamTest : public ::testing::Test {
 protected:
  ~MeteredStreamTest() noexcept override {}

  struct Conn {
    kj::Own<kj::AsyncIoStream> client;
    kj::Own<MeteredStream> server;
  };
  Conn Open(bool allowed, uid_t uid, kj::Duration deadline = 10 * kj::SECONDS) {
    auto pipe = kj::newCapabilityPipe();
    return {kj::mv(pipe.ends[0]),
            kj::heap<MeteredStream>(kj::mv(pipe.ends[1]), budget_, allowed, uid,
                                    io_.provider->getTimer(), deadline)};
  }
  // A raw segment table announcing one segment of `words` words, plus `extra` body bytes.
  static std::string Header(uint32_t words, size_t extra) {
    std::string h(8 + extra, 'x');
    uint32_t count = 0;
    memcpy(&h[0], &count, 4);
    memcpy(&h[4], &words, 4);
    return h;
  }
  std::string Error(kj::Promise<void> p) {
    auto e = kj::runCatchingExceptions([&] { p.wait(io_.waitScope); });
    KJ_IF_MAYBE(ex, e) { return ex->getDescription().cStr(); }
    return "(no error)";
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  ReceiveBudget budget_{{1 << 20, 512 << 10, 256 << 10, 4}, {64 << 10, 40 << 10, 32 << 10, 2}};
};

// Over a real Unix socketpair, as a client connection is: an fd the client sends with its bytes
// never reaches the broker (the kernel closes it), and an fd the broker sends arrives.
class MeteredSocketTest : public MeteredStreamTest {
 protected:
  ~MeteredSocketTest() noexcept override {}
  MeteredSocketTest() {
    int sv[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    client_ = kj::AutoCloseFd(sv[0]);
    server_ = kj::heap<MeteredStream>(
        io_.lowLevelProvider->wrapUnixSocketFd(sv[1], kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP),
        budget_, true, 1000, io_.provider->getTimer());
  }
  kj::AutoCloseFd client_;
  kj::Own<MeteredStream> server_;
};

TEST_F(MeteredSocketTest, AnFdAClientSendsIsClosedNotReceived) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  kj::AutoCloseFd pipe_r(p[0]);
  // One capnp frame's first word (an empty segment table is enough to read) with the pipe's
  // write end attached.
  char word[8] = {};
  iovec iov = {word, sizeof(word)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &p[1], sizeof(int));
  ASSERT_EQ(sendmsg(client_.get(), &msg, 0), 8);
  close(p[1]);  // the only copy left, if any, is the one in flight

  kj::AutoCloseFd fds[1];
  char buf[8];
  auto got = server_->tryReadWithFds(buf, 8, 8, fds, 1).wait(io_.waitScope);
  EXPECT_EQ(got.byteCount, 8u);
  EXPECT_EQ(got.capCount, 0u);
  EXPECT_EQ(fds[0].get(), -1);
  // Every write end is closed: the pipe reads end-of-file at once.
  char b;
  EXPECT_EQ(read(pipe_r.get(), &b, 1), 0) << "a copy of the client's fd is still open";
}

TEST_F(MeteredSocketTest, AnFdTheBrokerSendsArrives) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  kj::AutoCloseFd pipe_r(p[0]), pipe_w(p[1]);
  kj::byte data[4] = {'d', 'a', 't', 'a'};
  int fds[1] = {pipe_w.get()};
  server_->writeWithFds(data, nullptr, fds).wait(io_.waitScope);
  char buf[4];
  iovec iov = {buf, sizeof(buf)};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ASSERT_EQ(recvmsg(client_.get(), &msg, MSG_CMSG_CLOEXEC), 4);
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  ASSERT_NE(c, nullptr);
  int received;
  std::memcpy(&received, CMSG_DATA(c), sizeof(int));
  kj::AutoCloseFd got(received);
  ASSERT_EQ(write(got.get(), "x", 1), 1);
  char b;
  EXPECT_EQ(read(pipe_r.get(), &b, 1), 1);
}

TEST_F(MeteredStreamTest, RealMessagesPassAndGiveTheirChargeBack) {
  Conn c = Open(true, 1000);
  for (int i = 0; i < 3; ++i) {
    // A small first segment forces several segments (and a padded table).
    capnp::MallocMessageBuilder message(1, capnp::AllocationStrategy::FIXED_SIZE);
    auto node = message.initRoot<capnp::schema::Node>();
    node.setDisplayName(std::string(1000 * (i + 1), 'n'));
    node.initNestedNodes(3 + i);
    // An in-memory pipe has no buffer: the write completes as the read consumes it.
    auto write = capnp::writeMessage(*c.client, message);
    auto read = capnp::readMessage(*c.server).wait(io_.waitScope);
    write.wait(io_.waitScope);
    EXPECT_EQ(read->getRoot<capnp::schema::Node>().getDisplayName().size(), 1000u * (i + 1));
    EXPECT_EQ(c.server->charged(), 0u);
    EXPECT_EQ(budget_.used(true), 0u);
  }
}

TEST_F(MeteredStreamTest, AMessageOverTheConnectionsSizeIsRefusedBeforeCapnpAllocatesIt) {
  Conn c = Open(false, 2000);
  std::string h = Header(1 << 16, 0);  // 512 KiB announced
  auto write = c.client->write(h.data(), 8);
  std::string buf(64, '\0');
  auto error = Error(c.server->tryRead(buf.data(), 8, 8).ignoreResult());
  EXPECT_EQ(error.rfind("invalid-argument: a message of ", 0), 0u) << error;
  EXPECT_EQ(budget_.used(false), 0u);
  EXPECT_EQ(Error(c.server->tryRead(buf.data(), 1, 1).ignoreResult()), error) << "stays refused";
}

TEST_F(MeteredStreamTest, UnfinishedMessagesAreBoundedPerUidAndPoolAndReleasedOnClose) {
  std::string buf(64 << 10, '\0');
  // Each connection announces 24 KiB and sends a little of it.
  std::string h = Header(3 << 10, 100);
  std::vector<kj::Promise<void>> writes;
  auto start = [&](Conn& c) {
    writes.push_back(c.client->write(h.data(), h.size()));
    return c.server->tryRead(buf.data(), h.size(), h.size());
  };
  Conn a = Open(false, 2000), b = Open(false, 2000), other = Open(false, 2001);
  EXPECT_EQ(start(a).wait(io_.waitScope), 108u);
  EXPECT_EQ(budget_.used(false), (3u << 13) + 8);
  // uid 2000 may hold 40 KiB of unfinished messages: the second is refused, its connection ends.
  auto refused = Error(start(b).ignoreResult());
  EXPECT_EQ(refused.rfind("unavailable: too many unfinished messages", 0), 0u) << refused;
  // Another uid still has room in the pool; the allowed pool is untouched.
  EXPECT_EQ(start(other).wait(io_.waitScope), 108u);
  EXPECT_EQ(budget_.used(true), 0u);
  a.server = nullptr;
  other.server = nullptr;
  EXPECT_EQ(budget_.used(false), 0u) << "closing a connection releases its charge";
}

TEST_F(MeteredStreamTest, AMessageMustArriveWithinItsDeadline) {
  Conn c = Open(true, 1000, 50 * kj::MILLISECONDS);
  std::string buf(64, '\0');
  auto h = Header(16, 8);
  auto write = c.client->write(h.data(), h.size());
  EXPECT_EQ(c.server->tryRead(buf.data(), 16, 64).wait(io_.waitScope), 16u);
  EXPECT_GT(budget_.used(true), 0u);
  auto error = Error(c.server->tryRead(buf.data(), 1, 64).ignoreResult());
  EXPECT_EQ(error, "unavailable: a message took too long to arrive");
  c.server = nullptr;
  EXPECT_EQ(budget_.used(true), 0u);
}

TEST_F(MeteredStreamTest, AnIdleConnectionHasNoDeadline) {
  Conn c = Open(true, 1000, 20 * kj::MILLISECONDS);
  std::string buf(64, '\0');
  auto read = c.server->tryRead(buf.data(), 1, 64);
  io_.provider->getTimer().afterDelay(100 * kj::MILLISECONDS).wait(io_.waitScope);
  auto h = Header(0, 0);
  auto write = c.client->write(h.data(), h.size());
  EXPECT_EQ(read.wait(io_.waitScope), 8u) << "waiting between messages is fine";
  EXPECT_EQ(budget_.used(true), 0u) << "an empty message ends with its table";
}

TEST_F(MeteredStreamTest, TooManySegmentsAreRefused) {
  Conn c = Open(true, 1000);
  std::string h(8, '\0');
  uint32_t count = 600;
  memcpy(&h[0], &count, 4);
  auto write = c.client->write(h.data(), h.size());
  std::string buf(8, '\0');
  EXPECT_EQ(Error(c.server->tryRead(buf.data(), 8, 8).ignoreResult()),
            "invalid-argument: a message with too many segments");
}

TEST(CallLimiterTest, WaitingCallsAreBoundedPerConnectionAndUid) {
  CallLimiter limiter(3, 5);
  auto first = limiter.Open(1000), second = limiter.Open(1000), stranger = limiter.Open(2000);
  std::vector<kj::Own<CallLimiter::Ticket>> held;
  for (int i = 0; i < 3; ++i) held.push_back(*first->Acquire());
  auto refused = first->Acquire();
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  held.push_back(*second->Acquire());
  held.push_back(*second->Acquire());
  EXPECT_FALSE(second->Acquire().ok()) << "uid 1000 has 5 waiting";
  EXPECT_TRUE(stranger->Acquire().ok()) << "another uid is not affected";
  EXPECT_EQ(limiter.waiting(1000), 5u);
  held.clear();
  EXPECT_EQ(limiter.waiting(1000), 0u);
  EXPECT_EQ(first->waiting(), 0u);
  EXPECT_TRUE(first->Acquire().ok());
}

}  // namespace
}  // namespace paseo
