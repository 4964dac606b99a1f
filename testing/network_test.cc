// Network mode "sandbox" end to end, against a small "internet" the test builds
// (testing/test_internet.h): a namespace joined to the test's own (the privhelper's host) by a
// veth, holding an HTTP responder on 203.0.113.10 ports 80 and 8080 and the cloud metadata
// address 169.254.169.254:80, and a DNS server; the test's namespace routes them there. The sandbox profile allows 203.0.113.10/32 port 80 only.
// Also: what is always unreachable (the host, its loopback, metadata, other sandboxes, inbound),
// mode "none" (loopback only), and crashes of the privhelper during setup and delete.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "privhelper/network/firewall.h"
#include "privhelper/network/sandbox_network.h"
#include "testing/harness.h"
#include "testing/test_internet.h"

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
                                 {"name": "*.wild.example", "ports": [80]},
                                 {"name": "host.example", "ports": [8082]}],
                  "inboundPorts": [9000]}})");
    WriteText(base + "/etc/deployments/net.json",
              absl::StrCat(R"({"id": "net", "allowedUids": [4646], "profiles": ["net", "default"],
                  "runAs": {"uid": 4646, "gid": 4646},
                  "workspaceRoots": [{"hostPath": ")", base, R"(/ws-net"}]})"));
  };
  return options;
}

// The body of an HTTP GET from inside `sandbox` to host:port (busybox nc, 3 s: Debian's static
// busybox wget crashes), naming `name` as its Host if given, or "FAILED" (no connection, or
// no answer).
std::string Fetch(const Service& svc, const std::string& sandbox, const std::string& host,
                  int port, const std::string& name = "") {
  std::string head = name.empty() ? "GET / HTTP/1.0\\r\\n\\r\\n"
                                  : absl::StrCat("GET / HTTP/1.0\\r\\nHost: ", name, "\\r\\n\\r\\n");
  auto r = svc.Cli(Net(svc), {"exec", sandbox, "--", "sh", "-c",
                              absl::StrCat("printf '", head, "' | nc -w 3 ", host, " ", port,
                                           " 2>/dev/null || echo FAILED")});
  std::string out(absl::StripTrailingAsciiWhitespace(r.out));
  // The egress proxy accepts a connection before it reads the name: a refusal there is a
  // connection closed with nothing said.
  if (out.empty()) return "FAILED";
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
  ASSERT_TRUE(BuildInternet().ok()) << BuildInternet();
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
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

// Names: the supervisor's resolver answers only allowed names (exact, or strictly below a
// "*." suffix), asks the upstream nothing else, and each answer opens that address on the
// rule's ports for the sandbox that asked, only.
// Decision 58: an allowNames rule is a name, not an address. The sandbox's TCP to a rule's
// port goes through the egress proxy, which reads the request's Host, allows only the rules'
// names and dials the name itself: another name at the same address (a CDN's), a request
// naming nothing, and other ports stay closed; the resolver answers names without opening
// their addresses.
TEST(NetworkTest, AllowedNamesAreCheckedByNameNotByAddress) {
  Service& svc = *g_service;
  ASSERT_TRUE(BuildInternet().ok()) << BuildInternet();
  std::string a = CreateNetSandbox(svc);
  auto lookup = [&](const std::string& sandbox, const std::string& name) {
    return svc.Cli(Net(svc), {"exec", sandbox, "--", "sh", "-c", "nslookup " + name + " 2>&1"}).out;
  };
  std::string allowed = lookup(a, "allowed.example");
  EXPECT_TRUE(absl::StrContains(allowed, "203.0.113.20")) << allowed << svc.Log();
  EXPECT_EQ(Fetch(svc, a, "203.0.113.20", 80, "allowed.example"), "internet-80") << svc.Log();
  // Its port only: 8080 is not redirected and not open.
  EXPECT_EQ(Fetch(svc, a, "203.0.113.20", 8080, "allowed.example"), "FAILED");
  // The address it resolved to does not open it for anything else: no Host, another name, or
  // bytes that are not HTTP.
  EXPECT_EQ(Fetch(svc, a, "203.0.113.20", 80), "FAILED");
  EXPECT_EQ(Fetch(svc, a, "203.0.113.20", 80, "other.example"), "FAILED");
  auto raw = svc.Cli(Net(svc), {"exec", a, "--", "sh", "-c",
                                "printf 'SSH-2.0-x\\r\\n' | nc -w 3 203.0.113.20 80 || echo FAILED"});
  EXPECT_TRUE(absl::StrContains(raw.out, "FAILED") || raw.out.empty()) << raw.out;
  // A name not on the list: no answer, never asked upstream, and no Host opens it anywhere.
  std::string other = lookup(a, "other.example");
  EXPECT_FALSE(absl::StrContains(other, "203.0.113.21")) << other;
  EXPECT_EQ(Fetch(svc, a, "203.0.113.21", 80, "other.example"), "FAILED");
  // The proxy dials the name, not the address asked for: allowed.example through any address.
  EXPECT_EQ(Fetch(svc, a, "203.0.113.21", 80, "allowed.example"), "internet-80");
  // An allowed name that resolves to the host: the proxy dials from the host, and the firewall
  // keeps its user off the host's own addresses as it keeps sandboxes off them.
  EXPECT_EQ(Fetch(svc, a, "203.0.113.20", 8082, "host.example"), "FAILED") << svc.Log();
  EXPECT_TRUE(absl::StrContains(svc.Log(), "could not connect to 192.0.2.1:8082")) << svc.Log();
  // "*.wild.example": a name below it, not the apex.
  EXPECT_EQ(Fetch(svc, a, "203.0.113.22", 80, "x.wild.example"), "internet-80");
  EXPECT_EQ(Fetch(svc, a, "203.0.113.23", 80, "wild.example"), "FAILED");
  for (const auto& name : Asked()) {
    EXPECT_NE(name, "other.example");
    EXPECT_NE(name, "wild.example");
  }
  EXPECT_FALSE(Asked().empty());
  // Nothing a name resolved to is in the sandbox's allow set (only address rules pass the
  // firewall directly).
  std::string tag = network::SandboxTag(a);
  std::string set = Nft();
  size_t at = set.find("set sb_" + tag + "_allow");
  ASSERT_NE(at, std::string::npos) << set;
  EXPECT_FALSE(absl::StrContains(set.substr(at, set.find('}', at) - at), "203.0.113.20")) << set;
  EXPECT_EQ(svc.Cli(Net(svc), {"rm", a}).exit_code, 0);
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

// stats counts a networked sandbox's link: what it fetched came in, its request went out.
TEST(NetworkTest, StatsCountTheBytesOfASandboxsLink) {
  Service& svc = *g_service;
  ASSERT_TRUE(BuildInternet().ok()) << BuildInternet();
  std::string id = CreateNetSandbox(svc);
  ASSERT_FALSE(id.empty());
  // {"inBytes":N,"outBytes":M} of `id` in `stats --json`, or {-1, -1}.
  auto counters = [&]() -> std::pair<int64_t, int64_t> {
    auto r = svc.Cli(Net(svc), {"--json", "stats", "--interval", "0.2", id});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    size_t at = r.out.find("\"network\":{\"inBytes\":");
    if (at == std::string::npos) return {-1, -1};
    int64_t in = -1, out = -1;
    if (std::sscanf(r.out.c_str() + at, "\"network\":{\"inBytes\":%ld,\"outBytes\":%ld", &in,
                    &out) != 2)
      return {-1, -1};
    return {in, out};
  };
  auto before = counters();
  ASSERT_GE(before.first, 0) << "a networked sandbox has link counters";
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Fetch(svc, id, "203.0.113.10", 80), "internet-80");
  auto after = counters();
  // Five TCP exchanges: several hundred bytes each way at the least.
  EXPECT_GT(after.first, before.first + 500) << before.first << " -> " << after.first;
  EXPECT_GT(after.second, before.second + 500) << before.second << " -> " << after.second;
  EXPECT_EQ(svc.Cli(Net(svc), {"rm", id}).exit_code, 0);
}

// The proxy runs as the egress user, the one the firewall keeps off the host's addresses
// (regression: the privhelper kept getpwnam's static answer, which a later passwd lookup inside
// libnftables overwrote, and the proxy ran as /etc/passwd's last user, unrestricted).
TEST(NetworkTest, TheEgressProxyRunsAsTheUserTheFirewallRestricts) {
  Service& svc = *g_service;
  passwd* pw = getpwnam("paseo-sandbox-egress");
  ASSERT_NE(pw, nullptr);
  const uid_t want = pw->pw_uid;
  std::vector<pid_t> proxies;
  for (pid_t p : PidsMatching("paseo-sandbox-egress"))
    if (absl::StrContains(Cmdline(p), svc.base())) proxies.push_back(p);
  ASSERT_EQ(proxies.size(), 1u) << svc.Log();
  std::string status = ReadFile("/proc/" + std::to_string(proxies[0]) + "/status");
  EXPECT_TRUE(absl::StrContains(status, absl::StrCat("Uid:\t", want, "\t", want, "\t", want, "\t", want)))
      << status;
  std::string listing = Nft();
  EXPECT_TRUE(absl::StrContains(listing, absl::StrCat("meta skuid ", want, " jump egress_out"))) << listing;
}

TEST(NetworkTest, ModeNoneHasOnlyLoopback) {
  Service& svc = *g_service;
  auto r = svc.Cli(Net(svc), {"run", "--deployment", "net", "--profile", "default", "--", "sh",
                              "-c", "cat /proc/net/dev"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "lo:")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "eth")) << r.out;
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
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
  ASSERT_TRUE(BuildInternet().ok()) << BuildInternet();
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
  // Its resolver and its egress proxy are served again.
  auto looked = svc.Cli(Net(svc), {"exec", id, "--", "sh", "-c", "nslookup x.wild.example 2>&1"});
  EXPECT_TRUE(absl::StrContains(looked.out, "203.0.113.22")) << looked.out << svc.Log();
  EXPECT_EQ(Fetch(svc, id, "203.0.113.22", 80, "x.wild.example"), "internet-80") << Nft() << svc.Log();
  EXPECT_EQ(svc.Cli(Net(svc), {"rm", id}).exit_code, 0);
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  svc.Stop();
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  svc.RemoveWorkArea();
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  return paseo::testing::RunTestsWithOwnService(argc, argv, paseo::testing::NetworkOptions(),
                                                &paseo::testing::g_service);
}
