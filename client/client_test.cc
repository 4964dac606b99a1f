// client::Connection and ErrorText against a fake service on a real Unix socket: a round trip,
// a refusal's text without kj's prefixes, and readable errors for a socket that is missing,
// refuses, is too long or may not be opened. Runs as any user.
#include "client/client.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/fake_service.h"

namespace paseo::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// The exception `func` throws (the test fails if none).
template <typename Func>
kj::Exception ExceptionOf(Func&& func) {
  KJ_IF_MAYBE (e, kj::runCatchingExceptions(func)) {
    return kj::mv(*e);
  }
  ADD_FAILURE() << "no exception";
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__, kj::heapString("none"));
}

class ClientTest : public ::testing::Test {
 protected:
  // kj destructors may throw (noexcept(false)); a gtest fixture's may not.
  ~ClientTest() noexcept override {}

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  kj::WaitScope& ws_ = io_.waitScope;
  FakeService service_;
  SocketDir dir_;
  std::string socket_ = dir_.path() + "/supervisor.sock";
};

TEST_F(ClientTest, InfoRoundTrip) {
  service_.deployments = {"alpha", "beta"};
  UnixSocketServer server(io_, socket_, service_.NewSupervisor());
  Connection conn(io_, socket_);
  auto info = conn.supervisor().infoRequest().send().wait(ws_);
  EXPECT_EQ(std::string(info.getVersion().cStr()), "paseo-sandbox fake");
  EXPECT_EQ(info.getPeerUid(), 1000u);
  ASSERT_EQ(info.getDeployments().size(), 2u);
  EXPECT_EQ(std::string(info.getDeployments()[1].cStr()), "beta");
}

TEST_F(ClientTest, ARefusalReadsAsReasonAndMessage) {
  service_.refuse_create = absl::PermissionDeniedError("uid 1000 may not use deployment beta");
  UnixSocketServer server(io_, socket_, service_.NewSupervisor());
  Connection conn(io_, socket_);
  kj::Exception e = ExceptionOf([&] { conn.supervisor().createSandboxRequest().send().wait(ws_); });
  // What kj makes of it, and why ErrorText exists.
  EXPECT_THAT(e.getDescription().cStr(), HasSubstr("remote exception: "));
  EXPECT_EQ(ErrorText(e), "permission-denied: uid 1000 may not use deployment beta");
}

TEST_F(ClientTest, AnErrorOfAPipelinedCallKeepsItsReason) {
  UnixSocketServer server(io_, socket_, service_.NewSupervisor());
  Connection conn(io_, socket_);
  kj::Exception e = ExceptionOf([&] {
    auto get = conn.supervisor().getSandboxRequest();
    get.setId("sb-nope");
    get.send().getSandbox().deleteRequest().send().wait(ws_);
  });
  EXPECT_EQ(ErrorText(e), "not-found: no sandbox sb-nope");
}

TEST_F(ClientTest, MissingSocket) {
  kj::Exception e = ExceptionOf([&] { Connection conn(io_, socket_); });
  EXPECT_EQ(ErrorText(e),
            "cannot connect to " + socket_ +
                ": No such file or directory (is the paseo-sandbox service running?)");
}

TEST_F(ClientTest, SocketNobodyListensOn) {
  // What a crashed service leaves: the socket file, bound once, with no listener.
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, socket_.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  close(fd);
  kj::Exception e = ExceptionOf([&] { Connection conn(io_, socket_); });
  EXPECT_EQ(ErrorText(e), "cannot connect to " + socket_ +
                              ": Connection refused (is the paseo-sandbox service running?)");
}

TEST_F(ClientTest, SocketPathTooLong) {
  std::string path = "/" + std::string(200, 'x') + ".sock";
  kj::Exception e = ExceptionOf([&] { Connection conn(io_, path); });
  EXPECT_EQ(ErrorText(e), "cannot connect to " + path + ": a socket path has at most 107 bytes");
}

TEST_F(ClientTest, SocketWeMayNotOpen) {
  if (geteuid() == 0) GTEST_SKIP() << "root opens any socket";
  UnixSocketServer server(io_, socket_, service_.NewSupervisor());
  ASSERT_EQ(chmod(socket_.c_str(), 0), 0);
  kj::Exception e = ExceptionOf([&] { Connection conn(io_, socket_); });
  EXPECT_EQ(ErrorText(e), "cannot connect to " + socket_ +
                              ": Permission denied (is your user in the socket's group?)");
}

TEST_F(ClientTest, ServiceGoneMidConnection) {
  auto server = kj::heap<UnixSocketServer>(io_, socket_, service_.NewSupervisor());
  Connection conn(io_, socket_);
  conn.supervisor().infoRequest().send().wait(ws_);
  server = nullptr;  // stops listening; the accepted connection goes with the TwoPartyServer
  kj::Exception e = ExceptionOf([&] { conn.supervisor().infoRequest().send().wait(ws_); });
  EXPECT_EQ(e.getType(), kj::Exception::Type::DISCONNECTED) << ErrorText(e);
  EXPECT_THAT(ErrorText(e), Not(HasSubstr("remote exception")));
}

TEST(DefaultSocketPathTest, EnvironmentOrTheInstalledPath) {
  unsetenv("PASEO_SANDBOX_SOCKET");
  EXPECT_EQ(DefaultSocketPath(), "/run/paseo-sandbox/supervisor.sock");
  setenv("PASEO_SANDBOX_SOCKET", "", 1);
  EXPECT_EQ(DefaultSocketPath(), "/run/paseo-sandbox/supervisor.sock");
  setenv("PASEO_SANDBOX_SOCKET", "/tmp/x.sock", 1);
  EXPECT_EQ(DefaultSocketPath(), "/tmp/x.sock");
  unsetenv("PASEO_SANDBOX_SOCKET");
}

}  // namespace
}  // namespace paseo::client
