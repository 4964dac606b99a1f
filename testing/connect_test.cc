// Sandbox.connect on the real privhelper, broker and runsc. AWAITS THE NETWORK SETUP (issue 13,
// netcore): it needs a sandbox with network mode "sandbox", whose namespace and address the
// privhelper records (SandboxHost's netns_path / sandbox_addr); without it every connect is
// failed-precondition "sandbox has no network".
//
// A server inside a sandbox whose profile allows inbound port 8080 (busybox nc) is reached
// through the API and through the CLI; a port the profile does not list is refused; a client of
// another deployment cannot reach the sandbox at all; and nothing listens in the service's own
// network namespace (the harness's), so no host port was opened for it.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <kj/async-io.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "common/rpc_errors.h"
#include "gtest/gtest.h"
#include "testing/await.h"
#include "testing/harness.h"
#include "testing/util.h"

namespace paseo::testing {
namespace {

constexpr char kGreeting[] = "hello from inside\n";

Identity Net(const Service& svc) { return {4545, 4242, {4242, svc.socket_gid()}}; }
Identity Beta(const Service& svc) { return {4343, 4343, {4343, svc.socket_gid()}}; }

// Listening TCP sockets (IPv4 and IPv6) of this process's network namespace on `port`.
std::vector<std::string> HostListeners(uint16_t port) {
  char hex[8];
  snprintf(hex, sizeof(hex), ":%04X", port);
  std::vector<std::string> found;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    for (absl::string_view line : absl::StrSplit(ReadFile(table), '\n')) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() > 3 && absl::EndsWith(f[1], hex) && f[3] == "0A")
        found.emplace_back(line);
    }
  }
  return found;
}

class ConnectTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServiceOptions options;
    options.before_start = [](const std::string& base) {
      WriteText(base + "/etc/profiles/networked.json",
                R"({"name": "networked", "network": {"mode": "sandbox", "inboundPorts": [8080]}})");
      WriteText(base + "/etc/deployments/net.json",
                R"({"id": "net", "allowedUids": [0, 4545], "workspaceRoots": [{"hostPath": ")" +
                    base + R"(/ws-io"}], "runAs": {"uid": 4242, "gid": 4242},
                    "profiles": ["networked"]})");
    };
    svc_ = new Service(options);
  }
  static void TearDownTestSuite() {
    svc_->Stop();
    EXPECT_EQ(svc_->Leaks(), std::vector<std::string>{});
    svc_->RemoveWorkArea();
    delete svc_;
  }
  Service& svc() { return *svc_; }

  // A networked sandbox running a server on 8080 that greets every connection.
  api::Sandbox::Client ServingSandbox(client::Connection& conn, std::string* id) {
    auto req = conn.supervisor().createSandboxRequest();
    auto spec = req.initSpec();
    spec.setDeploymentId("net");
    spec.setProfile("networked");
    auto res = Await(req.send(), "createSandbox");
    *id = res.getInfo().getId();
    api::Sandbox::Client sandbox = res.getSandbox();
    auto start = sandbox.startProcessRequest();
    std::vector<std::string> argv = {"nc", "-ll", "-p", "8080", "-e", "echo", "-n", kGreeting};
    auto a = start.initSpec().initArgv(static_cast<unsigned>(argv.size()));
    for (size_t i = 0; i < argv.size(); ++i) a.set(static_cast<unsigned>(i), argv[i]);
    Await(start.send(), "startProcess");
    return sandbox;
  }

  // Connects, retrying while the server is still starting (unavailable) for up to 10 s.
  kj::AutoCloseFd ConnectWhenListening(api::Sandbox::Client& sandbox, uint16_t port) {
    for (int i = 0;; ++i) {
      kj::AutoCloseFd fd;
      auto e = kj::runCatchingExceptions(
          [&] { fd = Await(client::Connect(sandbox, port), "connect"); });
      KJ_IF_MAYBE(ex, e) {
        std::string why = client::ErrorText(*ex);
        if (absl::StartsWith(why, "unavailable:") && i < 100) {
          usleep(100000);
          continue;
        }
        ADD_FAILURE() << "connect " << port << ": " << why;
        return fd;
      }
      return fd;
    }
  }

  static void Delete(api::Sandbox::Client& sandbox) {
    auto del = sandbox.deleteRequest();
    del.setForce(true);  // the server still runs
    Await(del.send(), "delete");
  }

  static Service* svc_;
};

Service* ConnectTest::svc_ = nullptr;

// Until end of file (the socket arrives non-blocking, as the privhelper made it).
std::string ReadAll(int fd) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::string out;
  char buf[256];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
  return out;
}

TEST_F(ConnectTest, TheApiHandsTheClientAConnectionToTheSandboxsPort) {
  client::Connection conn(Io(), svc().socket());
  std::string id;
  auto sandbox = ServingSandbox(conn, &id);
  kj::AutoCloseFd fd = ConnectWhenListening(sandbox, 8080);
  ASSERT_GE(fd.get(), 0);
  EXPECT_EQ(ReadAll(fd.get()), kGreeting);
  // Nothing listens in the service's own namespace: the connection never was a host port.
  EXPECT_EQ(HostListeners(8080), std::vector<std::string>{});

  auto refused = kj::runCatchingExceptions([&] { Await(client::Connect(sandbox, 8081), "c"); });
  KJ_IF_MAYBE(e, refused) {
    EXPECT_TRUE(absl::StartsWith(client::ErrorText(*e), "permission-denied:"))
        << client::ErrorText(*e);
  } else {
    ADD_FAILURE() << "port 8081 is not in inboundPorts but was connected";
  }
  Delete(sandbox);
}

// Adversarial: the handed-out socket is a relayed Unix socket. It cannot be disconnected and
// connected again to a host service (a loopback listener of the test's own), nor to another
// port of the sandbox.
TEST_F(ConnectTest, TheHandedSocketCannotBeReconnectedElsewhere) {
  kj::AutoCloseFd host_service(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in local{};
  local.sin_family = AF_INET;
  local.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(local);
  ASSERT_EQ(bind(host_service.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  ASSERT_EQ(listen(host_service.get(), 4), 0);
  ASSERT_EQ(getsockname(host_service.get(), reinterpret_cast<sockaddr*>(&local), &len), 0);

  client::Connection conn(Io(), svc().socket());
  std::string id;
  auto sandbox = ServingSandbox(conn, &id);
  kj::AutoCloseFd fd = ConnectWhenListening(sandbox, 8080);
  ASSERT_GE(fd.get(), 0);
  int domain = 0;
  socklen_t dlen = sizeof(domain);
  ASSERT_EQ(getsockopt(fd.get(), SOL_SOCKET, SO_DOMAIN, &domain, &dlen), 0);
  EXPECT_EQ(domain, AF_UNIX);
  sockaddr unspec{};
  unspec.sa_family = AF_UNSPEC;
  (void)connect(fd.get(), &unspec, sizeof(unspec));
  EXPECT_NE(connect(fd.get(), reinterpret_cast<sockaddr*>(&local), sizeof(local)), 0);
  sockaddr_in other_port{};
  other_port.sin_family = AF_INET;
  other_port.sin_port = htons(22);
  EXPECT_NE(connect(fd.get(), reinterpret_cast<sockaddr*>(&other_port), sizeof(other_port)), 0);
  pollfd p{host_service.get(), POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 200), 0) << "the host service was reached";
  // The connection it was is intact.
  EXPECT_EQ(ReadAll(fd.get()), kGreeting);
  Delete(sandbox);
}

TEST_F(ConnectTest, TheCliRelaysAndOthersCannotReachTheSandbox) {
  client::Connection conn(Io(), svc().socket());
  std::string id;
  auto sandbox = ServingSandbox(conn, &id);
  ConnectWhenListening(sandbox, 8080);  // the server is up

  CliResult mine = svc().Cli(Net(svc()), {"connect", id, "8080"});
  EXPECT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out, kGreeting);

  CliResult unlisted = svc().Cli(Net(svc()), {"connect", id, "22"});
  EXPECT_EQ(unlisted.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unlisted.err, "permission-denied:")) << unlisted.err;

  // A client of another deployment does not even see the sandbox.
  CliResult stranger = svc().Cli(Beta(svc()), {"connect", id, "8080"});
  EXPECT_EQ(stranger.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(stranger.err, "not-found:")) << stranger.err;
  EXPECT_EQ(stranger.out, "");
  EXPECT_EQ(HostListeners(8080), std::vector<std::string>{});
  Delete(sandbox);
}

}  // namespace
}  // namespace paseo::testing
