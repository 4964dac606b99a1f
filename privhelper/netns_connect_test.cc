// Root test of the connect-from-inside-a-namespace path behind Sandbox.connect: the test puts
// itself in a network namespace of its own (its "host"), makes a second one (the "sandbox") with
// an address and a listener, and connects through NetnsPortConnector. Needs CAP_SYS_ADMIN and
// CAP_NET_ADMIN; sends traffic only inside the namespaces it made.
#include "privhelper/netns_connect.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <kj/async-io.h>

#include "common/rpc_errors.h"

namespace paseo {
namespace {

constexpr uint32_t kSandboxAddr = 0x0a580006;  // 10.88.0.6

ino_t ThreadNetns() {
  struct stat st;
  EXPECT_EQ(stat("/proc/thread-self/ns/net", &st), 0);
  return st.st_ino;
}

void SetUpInterface(const char* name, uint32_t addr) {
  kj::AutoCloseFd s(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  ASSERT_GE(s.get(), 0);
  ifreq up = {};
  std::strcpy(up.ifr_name, "lo");
  ASSERT_EQ(ioctl(s.get(), SIOCGIFFLAGS, &up), 0) << strerror(errno);
  up.ifr_flags |= IFF_UP;
  ASSERT_EQ(ioctl(s.get(), SIOCSIFFLAGS, &up), 0) << strerror(errno);
  if (addr == 0) return;
  ifreq a = {};
  std::strcpy(a.ifr_name, name);
  auto* sin = reinterpret_cast<sockaddr_in*>(&a.ifr_addr);
  sin->sin_family = AF_INET;
  sin->sin_addr.s_addr = htonl(addr);
  ASSERT_EQ(ioctl(s.get(), SIOCSIFADDR, &a), 0) << strerror(errno);
}

kj::AutoCloseFd Listen(uint32_t addr, uint16_t port, int backlog) {
  kj::AutoCloseFd l(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in at = {};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  at.sin_addr.s_addr = htonl(addr);
  EXPECT_EQ(bind(l.get(), reinterpret_cast<sockaddr*>(&at), sizeof(at)), 0) << strerror(errno);
  EXPECT_EQ(listen(l.get(), backlog), 0);
  return l;
}

class NetnsConnectTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The test's own "host" namespace: nothing it does touches the machine's network.
    ASSERT_EQ(unshare(CLONE_NEWNET), 0) << strerror(errno);
    SetUpInterface("lo", 0);
  }

  ~NetnsConnectTest() noexcept override {}
  NetnsConnectTest() : io_(kj::setupAsyncIo()) {
    // The "sandbox": a namespace made on a thread that ends at once; the namespace lives on in
    // the fd pinned here and in the listeners made in it.
    std::thread maker([this] {
      if (unshare(CLONE_NEWNET) != 0) return;
      SetUpInterface("lo:1", kSandboxAddr);
      listener_ = Listen(kSandboxAddr, 8080, 16);
      full_ = Listen(kSandboxAddr, 8082, 0);
      netns_ = kj::AutoCloseFd(open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
    });
    maker.join();
    EXPECT_GE(netns_.get(), 0) << "could not make the sandbox namespace";
    netns_path_ = "/proc/self/fd/" + std::to_string(netns_.get());
  }

  absl::Status Failure(kj::Promise<kj::AutoCloseFd> p) {
    kj::Maybe<kj::Exception> e = kj::runCatchingExceptions([&] { p.wait(io_.waitScope); });
    KJ_IF_MAYBE(ex, e) { return StatusFromException(*ex); }
    return absl::OkStatus();
  }

  kj::AsyncIoContext io_;
  kj::AutoCloseFd netns_, listener_, full_;
  std::string netns_path_;
};

TEST_F(NetnsConnectTest, ConnectsInsideTheNamespaceAndTheCallerStaysOutside) {
  ino_t before = ThreadNetns();
  NetnsPortConnector connector(io_.unixEventPort, io_.provider->getTimer());
  kj::AutoCloseFd fd = connector.Connect(netns_path_, kSandboxAddr, 8080).wait(io_.waitScope);
  EXPECT_EQ(ThreadNetns(), before) << "the calling thread changed namespace";

  kj::AutoCloseFd accepted(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  ASSERT_GE(accepted.get(), 0);
  ASSERT_EQ(write(fd.get(), "ping", 4), 4);
  char buf[8] = {};
  ASSERT_EQ(read(accepted.get(), buf, sizeof(buf)), 4);
  EXPECT_STREQ(buf, "ping");
  ASSERT_EQ(write(accepted.get(), "pong", 4), 4);
  int flags = fcntl(fd.get(), F_GETFL);
  fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK);
  std::memset(buf, 0, sizeof(buf));
  ASSERT_EQ(read(fd.get(), buf, sizeof(buf)), 4);
  EXPECT_STREQ(buf, "pong");
  EXPECT_NE(fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, 0) << "the socket must be close-on-exec";

  // The same address and port from the caller's namespace: nothing there.
  kj::AutoCloseFd outside(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in to = {};
  to.sin_family = AF_INET;
  to.sin_port = htons(8080);
  to.sin_addr.s_addr = htonl(kSandboxAddr);
  EXPECT_NE(connect(outside.get(), reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
}

// The mark lets the connection into the sandbox's link; the connected socket no longer carries
// it, so reconnecting it (AF_UNSPEC, then elsewhere) is not let in.
TEST_F(NetnsConnectTest, TheConnectedSocketNoLongerCarriesTheMark) {
  constexpr uint32_t kMark = 0x70736231;
  NetnsPortConnector connector(io_.unixEventPort, io_.provider->getTimer(), kj::SECONDS, kMark);
  kj::AutoCloseFd fd = connector.Connect(netns_path_, kSandboxAddr, 8080).wait(io_.waitScope);
  uint32_t mark = 1;
  socklen_t len = sizeof(mark);
  ASSERT_EQ(getsockopt(fd.get(), SOL_SOCKET, SO_MARK, &mark, &len), 0) << strerror(errno);
  EXPECT_EQ(mark, 0u);
  kj::AutoCloseFd accepted(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  EXPECT_GE(accepted.get(), 0) << "the marked connect itself did not arrive";
}

TEST_F(NetnsConnectTest, NothingListeningIsUnavailable) {
  NetnsPortConnector connector(io_.unixEventPort, io_.provider->getTimer());
  absl::Status st = Failure(connector.Connect(netns_path_, kSandboxAddr, 8081));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(std::string(st.message()).find("nothing listening on port 8081"), std::string::npos)
      << st;
}

// A listener whose accept queue is full drops the SYN: the connect would hang for minutes
// without the bound.
TEST_F(NetnsConnectTest, AnUnansweredConnectEndsAtThePatience) {
  NetnsPortConnector connector(io_.unixEventPort, io_.provider->getTimer(),
                               300 * kj::MILLISECONDS);
  std::vector<kj::AutoCloseFd> held;
  absl::Status last = absl::OkStatus();
  auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 6 && last.ok(); ++i) {
    auto p = connector.Connect(netns_path_, kSandboxAddr, 8082);
    kj::Maybe<kj::Exception> e =
        kj::runCatchingExceptions([&] { held.push_back(p.wait(io_.waitScope)); });
    KJ_IF_MAYBE(ex, e) { last = StatusFromException(*ex); }
  }
  EXPECT_EQ(last.code(), absl::StatusCode::kUnavailable) << last;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_F(NetnsConnectTest, AMissingNamespaceIsInternalNotPermissionDenied) {
  NetnsPortConnector connector(io_.unixEventPort, io_.provider->getTimer());
  absl::Status st = Failure(connector.Connect("/nonexistent/netns", kSandboxAddr, 8080));
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal) << st;
}

}  // namespace
}  // namespace paseo
