// Secrets that never enter the sandbox (decision 59), on real runsc and the real egress proxy.
// The test internet (testing/test_internet.h) runs the fake model API
// (testing/fake-model-api/server.mjs) on port 443 of every address, with a certificate from the
// test's own CA for api.anthropic.com and api.openai.com; the proxy trusts that CA
// (helper.json network.egressTrustedCa), the sandbox never sees it except where a test gives it
// on purpose. The deployment registers the secret "anthropic" (a root-owned 0600 file) for
// api.anthropic.com's x-api-key; the profile asks for it, with a placeholder file in the home.
// What the fake API received is read from its log (the x-api-key and Authorization headers of
// every request) and from its dump of each request body.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "testing/harness.h"
#include "testing/test_internet.h"
#include "testing/util.h"

namespace paseo::testing {
namespace {

constexpr uid_t kUid = 4646;
// The real value: only the fake API may ever see it.
constexpr char kValue[] = "sk-ant-api03-REAL-VALUE-only-the-api-sees-7f3a9c";

Service* g_service = nullptr;
std::string g_model_log;   // the fake API's log (JSON lines)
std::string g_model_dump;  // its dump of request bodies

Identity Agent(const Service& svc) { return {kUid, kUid, {kUid, svc.socket_gid()}}; }

void Die(const std::string& what) {
  fprintf(stderr, "secrets_test: %s\n", what.c_str());
  exit(1);
}

// The test's CA and the API's certificate (openssl CLI), in base/test-ca (world-readable: the
// proxy's user reads ca.pem).
void MakeCertificates(const std::string& dir) {
  std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  std::string script = absl::StrCat(
      "set -e; mkdir -p '", dir, "'; cd '", dir, "'; exec >openssl.log 2>&1\n",
      "openssl req -x509 ", ec, " -keyout ca.key -out ca.pem -days 2 -subj '/CN=secrets test CA' ",
      "-addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign\n",
      "openssl req ", ec, " -keyout server.key -out server.csr -subj '/CN=api.anthropic.com'\n",
      "printf 'subjectAltName=DNS:api.anthropic.com,DNS:api.openai.com\\n"
      "basicConstraints=CA:FALSE\\nextendedKeyUsage=serverAuth\\n' > server.ext\n",
      "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
      "-extfile server.ext -out server.pem\n",
      "chmod 0644 ca.pem server.pem\n");
  if (std::system(script.c_str()) != 0) Die("openssl failed: " + ReadFile(dir + "/openssl.log"));
}

void LayOut(const std::string& base) {
  MakeCertificates(base + "/test-ca");
  std::string helper = ReadFile(base + "/etc/helper.json");
  size_t at = helper.find("@TRUSTED_CA@");
  if (at == std::string::npos) Die("helper.json has no @TRUSTED_CA@");
  helper.replace(at, 12, base + "/test-ca/ca.pem");
  WriteText(base + "/etc/helper.json", helper);
  // The secrets: root's, in a directory only root may write.
  for (const char* d : {"/secrets", "/ws-secrets"}) mkdir((base + d).c_str(), 0755);
  chmod((base + "/secrets").c_str(), 0700);
  WriteText(base + "/secrets/anthropic", absl::StrCat(kValue, "\n"));
  chmod((base + "/secrets/anthropic").c_str(), 0600);
  WriteText(base + "/secrets/loose", absl::StrCat(kValue, "\n"));
  chmod((base + "/secrets/loose").c_str(), 0644);  // readable by anyone: refused
  if (chown((base + "/ws-secrets").c_str(), kUid, kUid) != 0) Die("chown ws-secrets");
  // The test's CA, for a test that reaches api.openai.com directly (not a secret's host).
  WriteText(base + "/ws-secrets/test-ca.pem", ReadFile(base + "/test-ca/ca.pem"));
  std::string version = getenv("PASEO_AGENT_ROOTFS");
  version = version.substr(version.rfind('/') + 1);
  WriteText(base + "/etc/profiles/agent-secrets.json",
            absl::StrCat(R"({"name": "agent-secrets", "rootfsVersion": ")", version, R"(",
                "network": {"mode": "sandbox",
                            "allowNames": [{"name": "api.anthropic.com", "ports": [443]},
                                           {"name": "api.openai.com", "ports": [443]}]},
                "secrets": [{"name": "anthropic", "file": "/home/agent/.config/anthropic-key"}]})"));
  auto deployment = [&](const std::string& id, const std::string& file) {
    return absl::StrCat(R"({"id": ")", id, R"(", "allowedUids": [4646], "profiles": ["agent-secrets"],
                "runAs": {"uid": 4646, "gid": 4646},
                "workspaceRoots": [{"hostPath": ")", base, R"(/ws-secrets"}],
                "secrets": [{"name": "anthropic", "path": ")", base, "/secrets/", file,
                        R"(", "hosts": ["api.anthropic.com"], "header": "x-api-key",
                        "envVar": "ANTHROPIC_API_KEY"}]})");
  };
  WriteText(base + "/etc/deployments/secrets.json", deployment("secrets", "anthropic"));
  WriteText(base + "/etc/deployments/loose.json", deployment("loose", "loose"));
}

// The fake model API in the test internet, answering every request with `script`'s text.
pid_t StartModelApi(const std::string& base) {
  WriteText(base + "/model-script.json", R"({"steps": [{"text": "DONE: answered with the injected key"}]})");
  g_model_log = base + "/model.jsonl";
  g_model_dump = base + "/model-dump";
  std::string out_path = base + "/model-server.out";
  int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) Die("open " + out_path);
  std::string pin = InternetPin();
  pid_t pid = SpawnStdio(
      {Capture("command -v node"), Runfile("testing/fake-model-api/server.mjs"), "--cert",
       base + "/test-ca/server.pem", "--key", base + "/test-ca/server.key", "--port", "443",
       "--host", "0.0.0.0", "--script", base + "/model-script.json", "--log", g_model_log,
       "--dump", g_model_dump},
      STDIN_FILENO, out, STDERR_FILENO, {"PATH=/usr/bin:/bin"}, [pin] {
        int fd = open(pin.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) return errno;
        return 0;
      });
  close(out);
  for (int i = 0; i < 200; ++i) {
    if (ReadFile(out_path).find("listening") != std::string::npos) return pid;
    usleep(50000);
  }
  Die("the fake model API did not start: " + ReadFile(out_path));
  return -1;
}

// The test internet and the fake API in it, for the whole suite (after the service exists: its
// first service unshares this process's namespaces); the API's process ends with the suite.
class ModelApi : public ::testing::Environment {
 public:
  void SetUp() override {
    absl::Status internet = BuildInternet();
    if (!internet.ok()) Die("the test internet: " + std::string(internet.message()));
    pid_ = StartModelApi(g_service->base());
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      WaitPid(pid_);
    }
  }

 private:
  pid_t pid_ = -1;
};

// The request lines of the fake API's log from `from` (a byte offset) on.
std::vector<std::string> RequestsSince(size_t from) {
  std::string log = ReadFile(g_model_log);
  std::vector<std::string> out;
  if (from > log.size()) return out;
  for (absl::string_view line : absl::StrSplit(absl::string_view(log).substr(from), '\n'))
    if (absl::StrContains(line, "\"dir\":\"request\"")) out.emplace_back(line);
  return out;
}

class SecretsTest : public ::testing::Test {
 protected:
  Service& svc = *g_service;

  void SetUp() override {
    CliResult r = svc.Cli(Agent(svc), {"create", "--deployment", "secrets", "--profile", "agent-secrets",
                                       "--workspace=" + svc.base() + "/ws-secrets:/workspace"});
    ASSERT_EQ(r.exit_code, 0) << r.err << svc.Log();
    id_ = std::string(absl::StripAsciiWhitespace(r.out));
  }

  void TearDown() override {
    if (!id_.empty()) {
      EXPECT_EQ(svc.Cli(Agent(svc), {"rm", id_}).exit_code, 0);
    }
    EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  }

  CliResult Sh(const std::string& script) {
    return svc.Cli(Agent(svc), {"exec", id_, "--", "bash", "-c", script});
  }

  std::string Placeholder() {
    return std::string(absl::StripAsciiWhitespace(Sh("printf %s \"$ANTHROPIC_API_KEY\"").out));
  }

  std::string id_;
};

TEST_F(SecretsTest, TheSandboxHoldsOnlyAPlaceholder) {
  std::string placeholder = Placeholder();
  EXPECT_TRUE(absl::StartsWith(placeholder, "paseo-secret-anthropic-")) << placeholder;
  // The file the profile asked for holds the same placeholder, read-only.
  CliResult file = Sh("cat /home/agent/.config/anthropic-key; echo x > /home/agent/.config/anthropic-key && echo WROTE");
  EXPECT_EQ(file.out, placeholder + "\n") << file.err;
  // Nowhere the sandbox can read: every process's environment, its files (rootfs, home, /tmp,
  // the workspace), its own /proc.
  CliResult search = Sh(absl::StrCat(
      "sleep 30 & cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c ANTHROPIC_API_KEY=; ",
      "grep -rlsF '", kValue, "' /etc /home /tmp /workspace /usr/local /proc/self/environ; ",
      "cat /proc/*/environ 2>/dev/null | grep -caF '", kValue, "'; kill %1"));
  EXPECT_FALSE(absl::StrContains(search.out, kValue)) << search.out;
  std::vector<std::string> lines = absl::StrSplit(absl::StripAsciiWhitespace(search.out), '\n');
  ASSERT_GE(lines.size(), 2u) << search.out;
  EXPECT_NE(lines.front(), "0") << "the search saw the placeholder in some environment";
  EXPECT_EQ(lines.back(), "0") << search.out;
  // The sandbox's CA is trusted inside it, by the system bundle and by NODE_EXTRA_CA_CERTS; no
  // key is there.
  CliResult trust = Sh(
      "printf '%s\\n' \"$NODE_EXTRA_CA_CERTS\"; grep -c 'BEGIN CERTIFICATE' \"$NODE_EXTRA_CA_CERTS\"; "
      "grep -c 'paseo-sandbox egress CA' /etc/ssl/certs/ca-certificates.crt; "
      "grep -rlsF 'PRIVATE KEY' /etc/ssl | head -1");
  EXPECT_EQ(trust.out, "/etc/ssl/certs/paseo-sandbox-egress-ca.pem\n1\n1\n") << trust.err;
  // Nor does the host side keep the value anywhere the sandbox's files live, or log it.
  std::string bundle = svc.bundles() + "/" + id_;
  EXPECT_NE(std::system(absl::StrCat("grep -rqsF '", kValue, "' '", bundle, "/upper' '", bundle,
                                     "/sandbox.json' '", bundle, "/config.json'")
                            .c_str()),
            0);
  EXPECT_FALSE(absl::StrContains(svc.Log(), kValue));
}

TEST_F(SecretsTest, TheApiGetsTheValueInTheBoundHeaderOnly) {
  std::string placeholder = Placeholder();
  size_t from = ReadFile(g_model_log).size();
  // To the secret's host: curl trusts the sandbox's CA through the system bundle.
  CliResult bound = Sh(absl::StrCat(
      "curl -sS --max-time 20 -o /dev/null -w '%{http_code}\\n' https://api.anthropic.com/v1/ping",
      " -H \"x-api-key: $ANTHROPIC_API_KEY\" -H \"Authorization: Bearer $ANTHROPIC_API_KEY\"",
      " -H 'Content-Type: application/json' --data \"{\\\"key\\\": \\\"$ANTHROPIC_API_KEY\\\"}\""));
  EXPECT_EQ(bound.exit_code, 0) << bound.out << bound.err << svc.Log();
  // To another allowed host, not the secret's: not terminated (curl trusts the test's CA only
  // here), and it gets the placeholder.
  CliResult other = Sh(
      "curl -sS --max-time 20 -o /dev/null -w '%{http_code}\\n' --cacert /workspace/test-ca.pem "
      "https://api.openai.com/v1/ping -H \"x-api-key: $ANTHROPIC_API_KEY\"");
  EXPECT_EQ(other.exit_code, 0) << other.out << other.err << svc.Log();
  std::vector<std::string> requests = RequestsSince(from);
  ASSERT_EQ(requests.size(), 2u) << ReadFile(g_model_log);
  EXPECT_TRUE(absl::StrContains(requests[0], absl::StrCat("\"apiKey\":\"", kValue, "\"")))
      << requests[0];
  EXPECT_TRUE(absl::StrContains(requests[0], absl::StrCat("\"authorization\":\"Bearer ", placeholder, "\"")))
      << "another header keeps the placeholder: " << requests[0];
  EXPECT_TRUE(absl::StrContains(requests[1], absl::StrCat("\"apiKey\":\"", placeholder, "\"")))
      << requests[1];
  EXPECT_FALSE(absl::StrContains(requests[1], kValue));
  // The body went as it was sent.
  std::string dumped = Capture(absl::StrCat("cat '", g_model_dump, "'/*_v1_ping.json 2>/dev/null || true"));
  EXPECT_TRUE(absl::StrContains(dumped, placeholder)) << dumped;
  EXPECT_FALSE(absl::StrContains(dumped, kValue));
  // One audit line per connection, with the secret's name and never its value.
  std::string log = svc.Log();
  EXPECT_TRUE(absl::StrContains(log, "\"name\":\"api.anthropic.com\",\"port\":443,\"allowed\":true"))
      << log;
  EXPECT_TRUE(absl::StrContains(log, "\"secrets\":[\"anthropic\"]")) << log;
  EXPECT_FALSE(absl::StrContains(log, kValue));
}

TEST_F(SecretsTest, APlaceholderFromAnotherSandboxIsNotReplaced) {
  std::string mine = Placeholder();
  CliResult r = svc.Cli(Agent(svc), {"create", "--deployment", "secrets", "--profile", "agent-secrets",
                                     "--workspace=" + svc.base() + "/ws-secrets:/workspace"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string other = std::string(absl::StripAsciiWhitespace(r.out));
  CliResult theirs = svc.Cli(Agent(svc), {"exec", other, "--", "bash", "-c", "printf %s \"$ANTHROPIC_API_KEY\""});
  EXPECT_NE(theirs.out, mine) << "each sandbox has its own placeholder";
  size_t from = ReadFile(g_model_log).size();
  // This sandbox sends the other's placeholder: it is not this sandbox's, so it goes unchanged.
  CliResult sent = Sh(absl::StrCat("curl -sS --max-time 20 -o /dev/null https://api.anthropic.com/v1/ping "
                                   "-H 'x-api-key: ", theirs.out, "'"));
  EXPECT_EQ(sent.exit_code, 0) << sent.err;
  std::vector<std::string> requests = RequestsSince(from);
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_TRUE(absl::StrContains(requests[0], absl::StrCat("\"apiKey\":\"", theirs.out, "\""))) << requests[0];
  EXPECT_EQ(svc.Cli(Agent(svc), {"rm", other}).exit_code, 0);
}

TEST_F(SecretsTest, ClaudeCompletesARequestWithItsKeyInjected) {
  size_t from = ReadFile(g_model_log).size();
  // Only what Paseo would pass: the key comes from the sandbox's environment (the placeholder),
  // the CA from NODE_EXTRA_CA_CERTS the sandbox sets.
  CliResult r = svc.Cli(Agent(svc),
                        {"exec", id_, "--env", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "--env",
                         "DISABLE_TELEMETRY=1", "--env", "DISABLE_AUTOUPDATER=1", "--", "claude",
                         "-p", "Say something.", "--output-format", "json"},
                        std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err << svc.Log();
  EXPECT_TRUE(absl::StrContains(r.out, "DONE: answered with the injected key")) << r.out << r.err;
  std::vector<std::string> requests = RequestsSince(from);
  size_t model = 0;
  for (const std::string& q : requests) {
    EXPECT_FALSE(absl::StrContains(q, "paseo-secret-")) << "a placeholder reached the API: " << q;
    if (absl::StrContains(q, "\"path\":\"/v1/messages\"")) {
      ++model;
      EXPECT_TRUE(absl::StrContains(q, absl::StrCat("\"apiKey\":\"", kValue, "\""))) << q;
    }
  }
  EXPECT_GE(model, 1u) << ReadFile(g_model_log);
  EXPECT_FALSE(absl::StrContains(r.out + r.err, kValue));
}

// The proxy restarted (its CA key died with it): the privhelper writes the new CA into the
// sandbox's trust files (bound from the bundle, rewritten in place), and a process started
// afterwards gets through with the value again, although one before it read the old trust.
TEST_F(SecretsTest, AfterTheProxyRestartsANewProcessTrustsItsNewCa) {
  std::string before = Sh("cat /etc/ssl/certs/paseo-sandbox-egress-ca.pem").out;
  CliResult first = Sh("curl -sS --max-time 20 -o /dev/null https://api.anthropic.com/v1/ping");
  EXPECT_EQ(first.exit_code, 0) << first.err;
  std::vector<pid_t> proxies = PidsMatching(svc.base() + "/bin/paseo-sandbox-egress");
  ASSERT_EQ(proxies.size(), 1u);
  ASSERT_EQ(kill(proxies[0], SIGKILL), 0);
  std::vector<pid_t> after;
  for (int i = 0; i < 100; ++i) {
    after = PidsMatching(svc.base() + "/bin/paseo-sandbox-egress");
    if (after.size() == 1 && after[0] != proxies[0] &&
        absl::StrContains(svc.Log(), "got a new egress CA from the restarted proxy"))
      break;
    usleep(100000);
  }
  ASSERT_TRUE(absl::StrContains(svc.Log(), "got a new egress CA from the restarted proxy")) << svc.Log();
  std::string now = Sh("cat /etc/ssl/certs/paseo-sandbox-egress-ca.pem").out;
  EXPECT_NE(now, before) << "the sandbox sees the new CA";
  size_t from = ReadFile(g_model_log).size();
  CliResult bound = Sh(
      "curl -sS --max-time 20 -o /dev/null -w '%{http_code}\\n' https://api.anthropic.com/v1/ping"
      " -H \"x-api-key: $ANTHROPIC_API_KEY\"");
  EXPECT_EQ(bound.exit_code, 0) << bound.out << bound.err;
  std::vector<std::string> requests = RequestsSince(from);
  ASSERT_EQ(requests.size(), 1u) << ReadFile(g_model_log);
  EXPECT_TRUE(absl::StrContains(requests[0], absl::StrCat("\"apiKey\":\"", kValue, "\""))) << requests[0];
}

TEST(SecretsCreateTest, ASecretFileOthersMayReadRefusesTheCreateAndLeavesNothing) {
  Service& svc = *g_service;
  CliResult r = svc.Cli(Agent(svc), {"create", "--deployment", "loose", "--profile", "agent-secrets",
                                     "--workspace=" + svc.base() + "/ws-secrets:/workspace"});
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "secrets/loose")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "no group or other permission")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err + svc.Log(), kValue));
  EXPECT_EQ(ListDir(svc.bundles()), std::vector<std::string>{});
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  std::string rootfs = paseo::testing::AgentRootfsFromEnv("secrets_test");
  if (rootfs.empty()) return 1;
  ::testing::AddGlobalTestEnvironment(new paseo::testing::ModelApi());
  paseo::testing::ServiceOptions options;
  options.extra_rootfs = rootfs;
  options.helper_json_extra =
      R"(, "network": {"pool": "10.96.0.0/24", "dnsUpstreams": ["203.0.113.53"], "egressTrustedCa": "@TRUSTED_CA@"})";
  options.before_start = paseo::testing::LayOut;
  return paseo::testing::RunTestsWithOwnService(argc, argv, options, &paseo::testing::g_service);
}
