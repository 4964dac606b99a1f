// HTTPS from a sandbox with network mode "sandbox" (issue 13): the test makes its own CA and a
// certificate for allowed.example (openssl CLI, in TEST_TMPDIR), serves TLS with it on port 443
// of every address of the test internet (testing/test_internet.h), and hands only the CA's
// certificate to the sandbox, through a read-only workspace. The sandbox runs the agent rootfs
// (PASEO_AGENT_ROOTFS=<out>/<version>, as testing/agent_rootfs_test; the suite fails without it)
// for its curl. Its profile allows the name allowed.example on port 443 and nothing else.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "privhelper/network/netns.h"
#include "testing/harness.h"
#include "testing/test_internet.h"

namespace paseo::testing {
namespace {

constexpr uid_t kTlsUid = 4747;
constexpr char kBody[] = "internet-443-tls";

Service* g_service = nullptr;

Identity Agent(const Service& svc) { return {kTlsUid, kTlsUid, {kTlsUid, svc.socket_gid()}}; }

std::string TmpDir() {
  const char* tmp = getenv("TEST_TMPDIR");
  return tmp != nullptr ? tmp : "/tmp";
}

void LayOut(const std::string& base) {
  ASSERT_EQ(mkdir((base + "/ws-tls").c_str(), 0755), 0);
  ASSERT_EQ(chown((base + "/ws-tls").c_str(), kTlsUid, kTlsUid), 0);
  std::string version = getenv("PASEO_AGENT_ROOTFS");
  version = version.substr(version.rfind('/') + 1);
  WriteText(base + "/etc/profiles/agent-net.json",
            absl::StrCat(R"({"name": "agent-net", "rootfsVersion": ")", version, R"(",
                "network": {"mode": "sandbox",
                            "allowNames": [{"name": "allowed.example", "ports": [443]}]}})"));
  WriteText(base + "/etc/deployments/tls.json",
            absl::StrCat(R"({"id": "tls", "allowedUids": [4747], "profiles": ["agent-net"],
                "runAs": {"uid": 4747, "gid": 4747},
                "workspaceRoots": [{"hostPath": ")", base, R"(/ws-tls"}]})"));
}

// The test's CA and a certificate it signed for allowed.example (and other.example, so that
// reaching other.example could only fail for want of a connection): files in `dir`.
bool MakeCertificates(const std::string& dir) {
  std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string script = absl::StrCat(
      "set -e; cd '", dir, "'; exec >openssl.log 2>&1\n",
      "openssl req -x509 ", ec, " -keyout ca.key -out ca.pem -days 2 -subj '/CN=paseo test CA'\n",
      "openssl req ", ec, " -keyout server.key -out server.csr -subj '/CN=allowed.example'\n",
      "printf 'subjectAltName=DNS:allowed.example,DNS:other.example\\n"
      "basicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > server.ext\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile server.ext -out server.pem\n");
  if (std::system(script.c_str()) == 0) return true;
  fprintf(stderr, "network_tls_test: openssl failed:\n%s\n", ReadFile(dir + "/openssl.log").c_str());
  return false;
}

// Answers every TLS connection on `listener` with a tiny HTTP response, forever.
void ServeTls(int listener, SSL_CTX* ctx) {
  std::thread([listener, ctx] {
    for (;;) {
      int c = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      timeval tv{5, 0};  // a client that stalls must not stall the server
      setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
      SSL* ssl = SSL_new(ctx);
      SSL_set_fd(ssl, c);
      if (SSL_accept(ssl) == 1) {
        char buf[2048];
        (void)SSL_read(ssl, buf, sizeof(buf));
        std::string body = std::string(kBody) + "\n";
        std::string reply = absl::StrCat("HTTP/1.0 200 OK\r\nContent-Length: ", body.size(),
                                         "\r\nConnection: close\r\n\r\n", body);
        (void)SSL_write(ssl, reply.data(), static_cast<int>(reply.size()));
        SSL_shutdown(ssl);
      }
      SSL_free(ssl);
      close(c);
    }
  }).detach();
}

// The internet (testing/test_internet.h) with the TLS server on port 443 of all its addresses,
// once per process.
absl::Status BuildTlsInternet() {
  static const absl::Status built = []() -> absl::Status {
    if (absl::Status s = BuildInternet(); !s.ok()) return s;
    std::string dir = TmpDir();
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == nullptr ||
        SSL_CTX_use_certificate_chain_file(ctx, (dir + "/server.pem").c_str()) != 1 ||
        SSL_CTX_use_PrivateKey_file(ctx, (dir + "/server.key").c_str(), SSL_FILETYPE_PEM) != 1)
      return absl::InternalError("SSL_CTX with the test's server certificate");
    return network::InNetnsFile(InternetPin(), [ctx] {
      int listener = ListenAny(443);
      if (listener < 0) return absl::InternalError("listen 443");
      ServeTls(listener, ctx);
      return absl::OkStatus();
    });
  }();
  return built;
}

// curl's output and exit code, from `curl -sS <args>` inside a sandbox.
struct Curl {
  std::string out;
  int rc = -1;
};

class NetworkTlsTest : public ::testing::Test {
 protected:
  Service& svc = *g_service;

  void SetUp() override {
    absl::Status internet = BuildTlsInternet();
    ASSERT_TRUE(internet.ok()) << internet;
    // Only the CA's certificate goes to the sandbox, never a key.
    std::string ws = svc.base() + "/ws-tls";
    WriteText(ws + "/ca.pem", ReadFile(TmpDir() + "/ca.pem"));
    ASSERT_EQ(chmod((ws + "/ca.pem").c_str(), 0644), 0);
    CliResult r = svc.Cli(Agent(svc), {"create", "--deployment", "tls", "--profile", "agent-net",
                                       "--workspace=" + ws + ":/workspace:ro"});
    ASSERT_EQ(r.exit_code, 0) << r.err << svc.Log();
    id_ = std::string(absl::StripAsciiWhitespace(r.out));
  }

  void TearDown() override {
    if (!id_.empty()) {
      EXPECT_EQ(svc.Cli(Agent(svc), {"rm", id_}).exit_code, 0);
    }
    EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  }

  Curl Run(const std::string& args) {
    CliResult r = svc.Cli(Agent(svc), {"exec", id_, "--", "bash", "-c",
                                       "curl -sS --connect-timeout 3 --max-time 10 " + args +
                                           " 2>&1; echo \"curl-rc=$?\""});
    Curl c;
    size_t at = r.out.rfind("curl-rc=");
    if (at == std::string::npos || !absl::SimpleAtoi(absl::StripAsciiWhitespace(
                                                         r.out.substr(at + 8)),
                                                     &c.rc))
      c.rc = -1;
    c.out = r.out.substr(0, at == std::string::npos ? r.out.size() : at) + r.err;
    return c;
  }

  std::string id_;
};

TEST_F(NetworkTlsTest, AllowedNameIsFetchedOverHttpsTrustingTheTestsCa) {
  Curl fetched = Run("--cacert /workspace/ca.pem https://allowed.example/");
  EXPECT_EQ(fetched.rc, 0) << fetched.out << svc.Log();
  EXPECT_EQ(fetched.out, std::string(kBody) + "\n");
  // The page is trusted through the test's CA only: without it, verification fails (60).
  Curl untrusted = Run("https://allowed.example/");
  EXPECT_EQ(untrusted.rc, 60) << untrusted.out;
  EXPECT_FALSE(absl::StrContains(untrusted.out, kBody));
  // The name opens its address on port 443 only: plain HTTP on 80 is served there, not reached.
  Curl plain = Run("http://allowed.example/");
  EXPECT_NE(plain.rc, 0) << plain.out;
  EXPECT_FALSE(absl::StrContains(plain.out, "internet-80")) << plain.out;
}

TEST_F(NetworkTlsTest, NameNotAllowedNeitherResolvesNorConnectsByAddress) {
  // The server is there: from the test's own namespace, other.example's address answers on 443.
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(443);
  sin.sin_addr.s_addr = htonl(kZone.at("other.example"));
  EXPECT_EQ(connect(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0);
  close(s);

  // Not resolved: curl's "Could not resolve host" (6).
  Curl named = Run("--cacert /workspace/ca.pem https://other.example/");
  EXPECT_EQ(named.rc, 6) << named.out;
  // Not reachable by address either, with the name pinned to it (the certificate would verify)
  // or by bare IP without verification.
  Curl pinned = Run("--cacert /workspace/ca.pem --resolve other.example:443:203.0.113.21 "
                    "https://other.example/");
  EXPECT_NE(pinned.rc, 0) << pinned.out;
  EXPECT_NE(pinned.rc, 6) << pinned.out;  // it failed to connect, not to resolve
  EXPECT_FALSE(absl::StrContains(pinned.out, kBody)) << pinned.out;
  Curl bare = Run("-k https://203.0.113.21/");
  EXPECT_NE(bare.rc, 0) << bare.out;
  EXPECT_FALSE(absl::StrContains(bare.out, kBody)) << bare.out;
  // Neither is allowed.example's address, before the sandbox has resolved the name.
  Curl early = Run("-k https://203.0.113.20/");
  EXPECT_NE(early.rc, 0) << early.out;
  EXPECT_FALSE(absl::StrContains(early.out, kBody)) << early.out;
  for (const auto& name : Asked()) EXPECT_NE(name, "other.example");
}

// Decision 58: one address, two names. Once allowed.example has resolved, its address used to
// be open to any name it serves (domain fronting's way in); through the egress proxy only the
// allowed server name gets through, whatever address the connection was made to.
TEST_F(NetworkTlsTest, AnotherNameAtTheAllowedNamesAddressIsRefusedBySni) {
  Curl fetched = Run("--cacert /workspace/ca.pem https://allowed.example/");
  ASSERT_EQ(fetched.rc, 0) << fetched.out << svc.Log();
  // other.example at allowed.example's address: the certificate would verify (it names both).
  Curl fronted = Run("--cacert /workspace/ca.pem --resolve other.example:443:203.0.113.20 "
                     "https://other.example/");
  EXPECT_NE(fronted.rc, 0) << fronted.out;
  EXPECT_FALSE(absl::StrContains(fronted.out, kBody)) << fronted.out;
  // allowed.example at other.example's address: the proxy dials the name, so it works.
  Curl moved = Run("--cacert /workspace/ca.pem --resolve allowed.example:443:203.0.113.21 "
                   "https://allowed.example/");
  EXPECT_EQ(moved.rc, 0) << moved.out << svc.Log();
  EXPECT_EQ(moved.out, std::string(kBody) + "\n");
  // The refusal is in the privhelper's log, with its reason.
  std::string log = svc.Log();
  EXPECT_TRUE(absl::StrContains(log, "\"name\":\"other.example\",\"port\":443,\"allowed\":false"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "no allowNames rule allows other.example on port 443")) << log;
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  std::string rootfs = paseo::testing::AgentRootfsFromEnv("network_tls_test");
  if (rootfs.empty()) return 1;
  if (!paseo::testing::MakeCertificates(paseo::testing::TmpDir())) return 1;
  paseo::testing::ServiceOptions options;
  options.extra_rootfs = rootfs;
  options.helper_json_extra =
      R"(, "network": {"pool": "10.99.0.0/24", "dnsUpstreams": ["203.0.113.53"]})";
  options.before_start = paseo::testing::LayOut;
  return paseo::testing::RunTestsWithOwnService(argc, argv, options,
                                                &paseo::testing::g_service);
}
