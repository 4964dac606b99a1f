// Network mode "sandbox" end to end, against a small "internet" the test builds: a namespace
// joined to the test's own (the privhelper's host) by a veth, holding an HTTP responder on
// 203.0.113.10 ports 80 and 8080 and the cloud metadata address 169.254.169.254:80; the test's
// namespace routes both there. The sandbox profile allows 203.0.113.10/32 port 80 only.
// Also: what is always unreachable (the host, its loopback, metadata, other sandboxes, inbound),
// mode "none" (loopback only), and crashes of the privhelper during setup and delete.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <cstdio>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "absl/types/span.h"
#include "privhelper/network/dns_message.h"
#include "privhelper/network/firewall.h"
#include "privhelper/network/links.h"
#include "privhelper/network/netns.h"
#include "privhelper/network/sandbox_network.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

constexpr uid_t kNetUid = 4646;
constexpr char kPool[] = "10.99.0.0/24";

Identity Net(const Service& svc) { return {kNetUid, kNetUid, {kNetUid, svc.socket_gid()}}; }

ServiceOptions NetworkOptions() {
  ServiceOptions options;
  options.helper_json_extra = absl::StrCat(R"(, "network": {"pool": ")", kPool,
                                           R"(", "dnsUpstreams": ["203.0.113.53"]})");
  options.before_start = [](const std::string& base) {
    mkdir((base + "/ws-net").c_str(), 0755);
    chown((base + "/ws-net").c_str(), kNetUid, kNetUid);
    WriteText(base + "/etc/profiles/net.json",
              R"({"name": "net", "network": {"mode": "sandbox",
                  "allowCidrs": [{"cidr": "203.0.113.10/32", "ports": [80]}],
                  "allowNames": [{"name": "allowed.example", "ports": [80]},
                                 {"name": "*.wild.example", "ports": [80]}],
                  "inboundPorts": [9000]}})");
    WriteText(base + "/etc/deployments/net.json",
              absl::StrCat(R"({"id": "net", "allowedUids": [4646], "profiles": ["net", "default"],
                  "runAs": {"uid": 4646, "gid": 4646},
                  "workspaceRoots": [{"hostPath": ")", base, R"(/ws-net"}]})"));
  };
  return options;
}

// Runs `argv` (an `ip` command of the test's, never the privhelper's) in the network namespace
// pinned at `pin` (empty: ours), joined with setns; returns its exit code.
int RunIn(const std::string& pin, const std::vector<std::string>& argv) {
  pid_t pid = fork();
  if (pid == 0) {
    if (!pin.empty()) {
      int fd = open(pin.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(126);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// Answers every connection with a tiny HTTP response naming `tag`, forever.
void Serve(int listener, std::string tag) {
  std::thread([listener, tag] {
    for (;;) {
      int c = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      char buf[2048];
      (void)!read(c, buf, sizeof(buf));
      std::string body = tag + "\n";
      std::string reply = absl::StrCat("HTTP/1.0 200 OK\r\nContent-Length: ", body.size(),
                                       "\r\nConnection: close\r\n\r\n", body);
      (void)!write(c, reply.data(), reply.size());
      close(c);
    }
  }).detach();
}

// The internet's DNS server (UDP 53 on 203.0.113.53): a few names, NXDOMAIN for the rest; it
// records every name it was asked.
const std::map<std::string, uint32_t> kZone = {
    {"allowed.example", 0xcb007114},  // 203.0.113.20
    {"other.example", 0xcb007115},    // 203.0.113.21
    {"x.wild.example", 0xcb007116},   // 203.0.113.22
    {"wild.example", 0xcb007117},     // 203.0.113.23
};
std::mutex g_asked_mu;
std::vector<std::string> g_asked;

std::vector<std::string> Asked() {
  std::lock_guard<std::mutex> lock(g_asked_mu);
  return g_asked;
}

void ServeDns(int udp) {
  std::thread([udp] {
    for (;;) {
      uint8_t buf[1500];
      sockaddr_in from{};
      socklen_t len = sizeof(from);
      ssize_t n = recvfrom(udp, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n <= 0) continue;
      auto query = network::dns::ParseQuery(absl::MakeConstSpan(buf, static_cast<size_t>(n)));
      if (!query.ok()) continue;
      std::string name = network::dns::Dotted(query->question.name);
      {
        std::lock_guard<std::mutex> lock(g_asked_mu);
        g_asked.push_back(name);
      }
      auto it = kZone.find(name);
      std::vector<network::dns::Record> answers;
      if (it != kZone.end() && query->question.type == 1) {
        network::dns::Record a;
        a.name = query->question.name;
        a.type = 1;
        a.klass = 1;
        a.ttl = 300;
        a.addr = it->second;
        answers.push_back(a);
      }
      auto reply = network::dns::BuildResponse(*query, it == kZone.end() ? 3 : 0, answers, 1232);
      sendto(udp, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
    }
  }).detach();
}

// A listener on 0.0.0.0:port in the calling thread's namespace.
int ListenAny(uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(port);
  if (bind(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0 || listen(s, 16) != 0) return -1;
  return s;
}

// The "internet", once per process: its namespace, the veth to it (192.0.2.1 here, 192.0.2.2
// there), its addresses and servers, our routes to it, and a server on every host address.
void BuildInternet(const Service& svc) {
  static bool built = false;
  if (built) return;
  built = true;
  const char* tmp = getenv("TEST_TMPDIR");
  std::string pin = std::string(tmp != nullptr ? tmp : "/tmp") + "/internet-netns";
  ASSERT_TRUE(network::CreateNetns(pin).ok());
  int host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
  network::SandboxLink uplink{"internet", pin, "pnet-up", 0xc0000201, 0xc0000202};
  absl::Status linked = network::CreateLink(host, uplink);
  ASSERT_TRUE(linked.ok()) << linked;
  close(host);
  ASSERT_EQ(RunIn(pin, {"ip", "addr", "add", "203.0.113.10/32", "dev", "lo"}), 0);
  ASSERT_EQ(RunIn(pin, {"ip", "addr", "add", "169.254.169.254/32", "dev", "lo"}), 0);
  for (const char* a : {"203.0.113.20/32", "203.0.113.21/32", "203.0.113.22/32",
                        "203.0.113.23/32", "203.0.113.53/32"})
    ASSERT_EQ(RunIn(pin, {"ip", "addr", "add", a, "dev", "lo"}), 0) << a;
  ASSERT_EQ(RunIn("", {"ip", "route", "add", "203.0.113.0/24", "via", "192.0.2.2"}), 0);
  ASSERT_EQ(RunIn("", {"ip", "route", "add", "169.254.169.254/32", "via", "192.0.2.2"}), 0);
  ASSERT_TRUE(network::InNetnsFile(pin, [] {
                int p80 = ListenAny(80), p8080 = ListenAny(8080);
                if (p80 < 0 || p8080 < 0) return absl::InternalError("listen");
                Serve(p80, "internet-80");
                Serve(p8080, "internet-8080");
                int dns = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
                sockaddr_in at{};
                at.sin_family = AF_INET;
                at.sin_port = htons(53);
                at.sin_addr.s_addr = htonl(0xcb007135);  // 203.0.113.53
                if (bind(dns, reinterpret_cast<sockaddr*>(&at), sizeof(at)) != 0)
                  return absl::InternalError("bind dns");
                ServeDns(dns);
                return absl::OkStatus();
              }).ok());
  // The host itself: every address of this namespace (its loopback, the uplink 192.0.2.1, each
  // sandbox link's host end) on port 8082.
  RunIn("", {"ip", "link", "set", "lo", "up"});
  int host_port = ListenAny(8082);
  ASSERT_GE(host_port, 0);
  Serve(host_port, "host-8082");
}

// The body of an HTTP GET from inside `sandbox` to host:port (busybox nc, 3 s: Debian's static
// busybox wget crashes), or "FAILED".
std::string Fetch(const Service& svc, const std::string& sandbox, const std::string& host,
                  int port) {
  auto r = svc.Cli(Net(svc), {"exec", sandbox, "--", "sh", "-c",
                              absl::StrCat("printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 3 ", host,
                                           " ", port, " 2>/dev/null || echo FAILED")});
  std::string out(absl::StripTrailingAsciiWhitespace(r.out));
  size_t body = out.find("\r\n\r\n");
  return body == std::string::npos ? out : out.substr(body + 4);
}

std::string CreateNetSandbox(const Service& svc, const std::string& profile = "net") {
  auto r = svc.Cli(Net(svc), {"create", "--deployment", "net", "--profile", profile});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return std::string(absl::StripTrailingAsciiWhitespace(r.out));
}

// The address `ps --json` shows for `id`.
std::string AddressOf(const Service& svc, const std::string& id) {
  auto ps = svc.Cli(Net(svc), {"--json", "ps"});
  size_t at = ps.out.find("\"id\":\"" + id + "\"");
  if (at == std::string::npos) return "";
  size_t a = ps.out.find("\"address\":\"", at);
  if (a == std::string::npos) return "";
  a += 11;
  return ps.out.substr(a, ps.out.find('"', a) - a);
}

std::string Nft() {
  std::string listing;
  (void)network::RunNft("list ruleset\n", &listing);
  return listing;
}

Service* g_service = nullptr;

TEST(NetworkTest, EgressOnlyWhereThePolicyAllows) {
  Service& svc = *g_service;
  BuildInternet(svc);
  std::string a = CreateNetSandbox(svc);
  std::string b = CreateNetSandbox(svc);
  ASSERT_FALSE(a.empty());
  std::string a_addr = AddressOf(svc, a), b_addr = AddressOf(svc, b);
  ASSERT_TRUE(absl::StartsWith(a_addr, "10.99.0.")) << a_addr;
  ASSERT_TRUE(absl::StartsWith(b_addr, "10.99.0.")) << b_addr;
  uint32_t a_host = *network::ParseIpv4(a_addr) - 1;
  std::string host_end = network::FormatIpv4(a_host);

  // Its link, its address and its resolver.
  auto ifs = svc.Cli(Net(svc), {"exec", a, "--", "sh", "-c", "cat /proc/net/dev; cat /etc/resolv.conf"});
  EXPECT_TRUE(absl::StrContains(ifs.out, "eth0")) << ifs.out << svc.Log();
  EXPECT_TRUE(absl::StrContains(ifs.out, "nameserver " + host_end + "\n")) << ifs.out;

  // Allowed: 203.0.113.10:80. Not: another port of it.
  EXPECT_EQ(Fetch(svc, a, "203.0.113.10", 80), "internet-80")
      << svc.Cli(Net(svc), {"exec", a, "--", "sh", "-c", "ifconfig -a; ip route"}).out << Nft();
  EXPECT_EQ(Fetch(svc, a, "203.0.113.10", 8080), "FAILED");
  // Cloud metadata, the host (its loopback as the sandbox sees it is the sandbox's own; its
  // host end; its uplink address): never.
  EXPECT_EQ(Fetch(svc, a, "169.254.169.254", 80), "FAILED");
  EXPECT_EQ(Fetch(svc, a, "127.0.0.1", 8082), "FAILED");
  EXPECT_EQ(Fetch(svc, a, host_end, 8082), "FAILED");
  EXPECT_EQ(Fetch(svc, a, "192.0.2.1", 8082), "FAILED");

  // Another sandbox: B listens on 9000 (checked from inside B), A cannot reach it, and neither
  // can the host.
  auto listen = svc.Cli(Net(svc), {"exec", b, "--", "sh", "-c",
                                   "nc -ll -p 9000 -e echo from-b </dev/null >/dev/null 2>&1 &"});
  EXPECT_EQ(listen.exit_code, 0) << listen.err;
  std::string inside;
  for (int i = 0; i < 30 && inside != "from-b"; ++i) {
    auto r = svc.Cli(Net(svc), {"exec", b, "--", "sh", "-c", "nc -w 2 127.0.0.1 9000 </dev/null"});
    inside = std::string(absl::StripTrailingAsciiWhitespace(r.out));
    if (inside != "from-b") usleep(200000);
  }
  ASSERT_EQ(inside, "from-b");
  auto across = svc.Cli(Net(svc), {"exec", a, "--", "sh", "-c",
                                   "nc -w 3 " + b_addr + " 9000 </dev/null || echo FAILED"});
  EXPECT_EQ(std::string(absl::StripTrailingAsciiWhitespace(across.out)), "FAILED");
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{3, 0};
  setsockopt(s, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_port = htons(9000);
  sin.sin_addr.s_addr = htonl(*network::ParseIpv4(b_addr));
  EXPECT_NE(connect(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)), 0)
      << "a connection from the host into a sandbox succeeded";
  close(s);

  for (const auto& id : {a, b}) EXPECT_EQ(svc.Cli(Net(svc), {"rm", id}).exit_code, 0);
  EXPECT_EQ(svc.Leaks(), std::vector<std::string>{});
}

// Names: the supervisor's resolver answers only allowed names (exact, or strictly below a
// "*." suffix), asks the upstream nothing else, and each answer opens that address on the
// rule's ports for the sandbox that asked, only.
TEST(NetworkTest, AllowedNamesResolveAndOpenOnlyTheirAddresses) {
  Service& svc = *g_service;
  BuildInternet(svc);
  std::string a = CreateNetSandbox(svc);
  std::string b = CreateNetSandbox(svc);
  auto lookup = [&](const std::string& sandbox, const std::string& name) {
    return svc.Cli(Net(svc), {"exec", sandbox, "--", "sh", "-c", "nslookup " + name + " 2>&1"}).out;
  };
  // Not resolved yet: its address is closed.
  EXPECT_EQ(Fetch(svc, a, "203.0.113.20", 80), "FAILED");
  std::string allowed = lookup(a, "allowed.example");
  EXPECT_TRUE(absl::StrContains(allowed, "203.0.113.20")) << allowed << svc.Log();
  EXPECT_EQ(Fetch(svc, a, "203.0.113.20", 80), "internet-80") << Nft();
  EXPECT_EQ(Fetch(svc, a, "203.0.113.20", 8080), "FAILED");
  // Opened for the sandbox that asked, not for another.
  EXPECT_EQ(Fetch(svc, b, "203.0.113.20", 80), "FAILED");
  // A name not on the list: no answer, never asked upstream, its address closed by IP too.
  std::string other = lookup(a, "other.example");
  EXPECT_FALSE(absl::StrContains(other, "203.0.113.21")) << other;
  EXPECT_EQ(Fetch(svc, a, "203.0.113.21", 80), "FAILED");
  // "*.wild.example": a name below it, not the apex.
  EXPECT_TRUE(absl::StrContains(lookup(a, "x.wild.example"), "203.0.113.22"));
  EXPECT_EQ(Fetch(svc, a, "203.0.113.22", 80), "internet-80");
  EXPECT_FALSE(absl::StrContains(lookup(a, "wild.example"), "203.0.113.23"));
  EXPECT_EQ(Fetch(svc, a, "203.0.113.23", 80), "FAILED");
  for (const auto& name : Asked()) {
    EXPECT_NE(name, "other.example");
    EXPECT_NE(name, "wild.example");
  }
  EXPECT_FALSE(Asked().empty());
  for (const auto& id : {a, b}) EXPECT_EQ(svc.Cli(Net(svc), {"rm", id}).exit_code, 0);
  EXPECT_EQ(svc.Leaks(), std::vector<std::string>{});
}

TEST(NetworkTest, ModeNoneHasOnlyLoopback) {
  Service& svc = *g_service;
  auto r = svc.Cli(Net(svc), {"run", "--deployment", "net", "--profile", "default", "--", "sh",
                              "-c", "cat /proc/net/dev"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "lo:")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "eth")) << r.out;
  EXPECT_EQ(svc.Leaks(), std::vector<std::string>{});
}

// SIGKILL of the privhelper while a sandbox's network is being set up, then while one is being
// deleted: after a restart nothing of either is left.
TEST(NetworkTest, CrashDuringSetupOrDeleteLeavesNothing) {
  Service& svc = *g_service;
  std::atomic<bool> done{false};
  std::thread creating([&] {
    svc.Cli(Net(svc), {"create", "--deployment", "net", "--profile", "net"},
            std::chrono::seconds(20));
    done = true;
  });
  // As soon as a namespace pin appears, setup is under way.
  std::string netns_dir = svc.base() + "/run/netns";
  for (int i = 0; i < 2000 && ListDir(netns_dir).empty() && !done; ++i) usleep(1000);
  svc.Crash();
  creating.join();
  svc.Restart();
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});

  std::string id = CreateNetSandbox(svc);
  ASSERT_FALSE(id.empty());
  std::thread deleting([&] { svc.Cli(Net(svc), {"rm", id}, std::chrono::seconds(20)); });
  usleep(300000);  // runsc's delete takes about 2 s: the crash lands in it
  svc.Crash();
  deleting.join();
  svc.Restart();
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

// A restart with onRestart "keep": the adopted sandbox keeps its address and its policy (its
// chains are rebuilt from its record), and its delete then removes everything. Last: its own
// privhelper shares this process's network namespace (and so the table) with the suite's.
TEST(NetworkTest, ZzKeepPolicyKeepsAnAdoptedSandboxsNetwork) {
  ServiceOptions options = NetworkOptions();
  options.helper_json_extra += R"(, "onRestart": "keep")";
  Service svc(options);
  BuildInternet(svc);
  std::string id = CreateNetSandbox(svc);
  ASSERT_FALSE(id.empty());
  std::string address = AddressOf(svc, id);
  EXPECT_EQ(Fetch(svc, id, "203.0.113.10", 80), "internet-80");
  svc.Crash();
  svc.Restart();
  EXPECT_EQ(AddressOf(svc, id), address);
  EXPECT_EQ(Fetch(svc, id, "203.0.113.10", 80), "internet-80") << Nft();
  EXPECT_EQ(Fetch(svc, id, "203.0.113.10", 8080), "FAILED");
  EXPECT_EQ(Fetch(svc, id, "169.254.169.254", 80), "FAILED");
  // Its resolver is served again, and what it resolves opens for it.
  auto looked = svc.Cli(Net(svc), {"exec", id, "--", "sh", "-c", "nslookup x.wild.example 2>&1"});
  EXPECT_TRUE(absl::StrContains(looked.out, "203.0.113.22")) << looked.out << svc.Log();
  EXPECT_EQ(Fetch(svc, id, "203.0.113.22", 80), "internet-80") << Nft();
  EXPECT_EQ(svc.Cli(Net(svc), {"rm", id}).exit_code, 0);
  EXPECT_EQ(svc.Leaks(), std::vector<std::string>{});
  svc.Stop();
  EXPECT_EQ(svc.Leaks(), std::vector<std::string>{});
  svc.RemoveWorkArea();
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  return paseo::testing::RunTestsWithOwnService(argc, argv, paseo::testing::NetworkOptions(),
                                                &paseo::testing::g_service);
}
