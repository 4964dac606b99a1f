#include "broker/port_relay.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <kj/async-io.h>

#include "gtest/gtest.h"

namespace paseo {
namespace {

// Blocking helpers for the test's own ends (the relay runs on the test's event loop).
bool WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = write(fd, data.data() + done, data.size() - done);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

std::string ReadToEnd(int fd) {
  std::string out;
  char buf[65536];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, static_cast<size_t>(n));
  return out;
}

class PortRelaysTest : public ::testing::Test {
 protected:
  // A "TCP connection" for the relay: any connected stream socket; `far` is the sandbox's side.
  kj::AutoCloseFd Connection(kj::AutoCloseFd& far) {
    int pair[2];
    EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
    far = kj::AutoCloseFd(pair[1]);
    return kj::AutoCloseFd(pair[0]);
  }

  // Runs `work` on a thread (blocking I/O on the test's ends) while the loop turns.
  void WhileRelaying(std::function<void()> work) {
    std::atomic<bool> done = false;
    std::thread t([&] {
      work();
      done = true;
    });
    while (!done) {
      io_.waitScope.poll();
      usleep(200);
    }
    t.join();
    io_.waitScope.poll();
  }

  // Behind a pointer: kj's destructors may throw, gtest's fixture destructor may not.
  struct Loop {
    kj::AsyncIoContext io = kj::setupAsyncIo();
    PortRelays relays{*io.lowLevelProvider};
  };
  std::unique_ptr<Loop> loop_ = std::make_unique<Loop>();
  kj::AsyncIoContext& io_ = loop_->io;
  PortRelays& relays_ = loop_->relays;
};

TEST_F(PortRelaysTest, BytesFlowBothWaysAndAHalfClosePassesThrough) {
  kj::AutoCloseFd far;
  auto client = relays_.Start("sb-1", Connection(far));
  ASSERT_TRUE(client.ok()) << client.status();
  EXPECT_EQ(relays_.Open("sb-1"), 1u);
  std::string request(3 * PortRelays::kChunk + 17, 'q');
  std::string response(5 * PortRelays::kChunk + 3, 'r');
  std::string got_request, got_response;
  WhileRelaying([&] {
    // Both directions at once, several chunks each: neither waits for the other.
    std::thread server([&] {
      got_request = ReadToEnd(far.get());  // ends with the client's shutdown(SHUT_WR)
      EXPECT_TRUE(WriteAll(far.get(), response));
      far = nullptr;
    });
    EXPECT_TRUE(WriteAll(client->get(), request));
    shutdown(client->get(), SHUT_WR);
    got_response = ReadToEnd(client->get());
    server.join();
  });
  EXPECT_EQ(got_request, request);
  EXPECT_EQ(got_response, response);
  EXPECT_EQ(relays_.Open("sb-1"), 0u);
}

// The client gets a Unix socket: it cannot be turned into a connection to anywhere else (a TCP
// socket from the host's namespace could be disconnected and reconnected to the host's
// loopback services).
TEST_F(PortRelaysTest, TheClientsEndCannotBeReconnectedElsewhere) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(local);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&local), &len), 0);

  kj::AutoCloseFd far;
  auto client = relays_.Start("sb-1", Connection(far));
  ASSERT_TRUE(client.ok());
  int domain = 0;
  socklen_t dlen = sizeof(domain);
  ASSERT_EQ(getsockopt(client->get(), SOL_SOCKET, SO_DOMAIN, &domain, &dlen), 0);
  EXPECT_EQ(domain, AF_UNIX);
  sockaddr unspec{};
  unspec.sa_family = AF_UNSPEC;
  (void)connect(client->get(), &unspec, sizeof(unspec));
  EXPECT_NE(connect(client->get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  // Still the same connection.
  std::string got;
  WhileRelaying([&] {
    EXPECT_TRUE(WriteAll(client->get(), "still here"));
    shutdown(client->get(), SHUT_WR);
    got = ReadToEnd(far.get());
  });
  EXPECT_EQ(got, "still here");
  close(listener);
}

TEST_F(PortRelaysTest, DeletingTheSandboxEndsItsRelaysOnly) {
  kj::AutoCloseFd far1, far2;
  auto one = relays_.Start("sb-1", Connection(far1));
  auto other = relays_.Start("sb-2", Connection(far2));
  ASSERT_TRUE(one.ok() && other.ok());
  relays_.EndSandbox("sb-1");
  io_.waitScope.poll();
  EXPECT_EQ(relays_.Open("sb-1"), 0u);
  EXPECT_EQ(relays_.Open("sb-2"), 1u);
  std::string client_saw, sandbox_saw, relayed;
  WhileRelaying([&] {
    client_saw = ReadToEnd(one->get());   // EOF at once
    sandbox_saw = ReadToEnd(far1.get());  // EOF at once
    EXPECT_TRUE(WriteAll(other->get(), "ok"));
    shutdown(other->get(), SHUT_WR);
    relayed = ReadToEnd(far2.get());
  });
  EXPECT_EQ(client_saw, "");
  EXPECT_EQ(sandbox_saw, "");
  EXPECT_EQ(relayed, "ok");
}

TEST_F(PortRelaysTest, ASandboxHasABoundedNumberOfRelays) {
  std::vector<kj::AutoCloseFd> fars(PortRelays::kMaxPerSandbox + 1), clients;
  for (size_t i = 0; i < PortRelays::kMaxPerSandbox; ++i) {
    auto c = relays_.Start("sb-1", Connection(fars[i]));
    ASSERT_TRUE(c.ok()) << i;
    clients.push_back(kj::mv(*c));
  }
  auto refused = relays_.Start("sb-1", Connection(fars.back()));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  kj::AutoCloseFd far;
  EXPECT_TRUE(relays_.Start("sb-2", Connection(far)).ok());
  // One ends (its sandbox side closes): room for one more.
  fars[0] = nullptr;
  WhileRelaying([&] { EXPECT_EQ(ReadToEnd(clients[0].get()), ""); });
  clients[0] = nullptr;
  WhileRelaying([] { usleep(20000); });
  EXPECT_EQ(relays_.Open("sb-1"), PortRelays::kMaxPerSandbox - 1);
  EXPECT_TRUE(relays_.Start("sb-1", Connection(fars.back())).ok());
}

// A client that vanishes mid-transfer ends the relay; the sandbox's side sees the end.
TEST_F(PortRelaysTest, AClientThatGoesAwayEndsTheRelay) {
  kj::AutoCloseFd far;
  auto client = relays_.Start("sb-1", Connection(far));
  ASSERT_TRUE(client.ok());
  *client = nullptr;
  std::string sandbox_saw;
  WhileRelaying([&] { sandbox_saw = ReadToEnd(far.get()); });
  EXPECT_EQ(sandbox_saw, "");
  WhileRelaying([&] {
    // Writing into a relay whose client is gone: it ends (EPIPE on its side) and closes ours.
    std::string big(4 * PortRelays::kChunk, 'x');
    signal(SIGPIPE, SIG_IGN);
    (void)WriteAll(far.get(), big);
    usleep(20000);
  });
  EXPECT_EQ(relays_.Open("sb-1"), 0u);
}

}  // namespace
}  // namespace paseo
