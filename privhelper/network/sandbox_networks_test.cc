// Real namespaces, veth pairs and nftables, as root of a user namespace of the test's own (no
// host change): what Create makes, what its firewall lets through to the host, and that Remove
// and CollectUnowned leave nothing.
#include "privhelper/network/sandbox_networks.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <capnp/message.h>

#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "privhelper/network/conntrack.h"
#include "privhelper/network/firewall_rules.h"
#include "privhelper/network/links.h"
#include "privhelper/network/netns.h"
#include "privhelper/network/userns_sandbox.h"

namespace paseo::network {
namespace {

// A TCP listener on addr:port in the calling thread's namespace.
int Listen(uint32_t addr, uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(addr);
  sin.sin_port = htons(port);
  if (bind(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) != 0 || listen(s, 4) != 0) {
    close(s);
    return -1;
  }
  return s;
}

// Whether a TCP connection to addr:port completes within 1.5 s (generous: the machine is shared).
bool Connects(uint32_t addr, uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(addr);
  sin.sin_port = htons(port);
  int rc = connect(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin));
  bool ok = rc == 0;
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{s, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    ok = poll(&p, 1, 1500) == 1 && getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
  }
  close(s);
  return ok;
}

TEST(SandboxNetworks, CreateFirewallRemoveAndCollect) {
  std::string dir = testing::TempDir("nets");
  ASSERT_FALSE(dir.empty());
  capnp::MallocMessageBuilder message;
  auto policy = message.initRoot<config::NetworkPolicy>();
  policy.setMode(config::NetworkMode::SANDBOX);
  auto rules = policy.initAllowCidrs(1);
  rules[0].setCidr("203.0.113.10/32");
  rules[0].initPorts(1).set(0, 80);
  int rc = testing::InUserNamespace([&] {
    int host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    CHECK_OR_FAIL(host >= 0);
    // Loopback up in our (the "host") namespace, as on a real host.
    int ctl = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq ifr{};
    std::strcpy(ifr.ifr_name, "lo");
    CHECK_OR_FAIL(ioctl(ctl, SIOCGIFFLAGS, &ifr) == 0);
    ifr.ifr_flags |= IFF_UP;
    CHECK_OR_FAIL(ioctl(ctl, SIOCSIFFLAGS, &ifr) == 0);
    close(ctl);
    SandboxNetworks nets(host, dir, *ParseCidr("10.88.0.0/24"), "");
    nets.set_serves_dns(true);  // as main() does once its resolver is up
    absl::Status started = nets.Start();
    if (!started.ok()) std::fprintf(stderr, "%s\n", started.ToString().c_str());
    CHECK_OR_FAIL(started.ok());
    auto link = nets.Create("sb-1", policy.asReader());
    if (!link.ok()) std::fprintf(stderr, "%s\n", link.status().ToString().c_str());
    CHECK_OR_FAIL(link.ok());
    CHECK_OR_FAIL(FormatIpv4(link->host_addr) == "10.88.0.1");
    CHECK_OR_FAIL(FormatIpv4(link->sandbox_addr) == "10.88.0.2");
    CHECK_OR_FAIL(IsNetns(link->netns_path));
    auto links = ListLinks(nets.host_ns_fd(), "psb-");
    CHECK_OR_FAIL(links.ok() && *links == std::vector<std::string>{HostIfname("sb-1")});
    auto tags = nets.firewall().SandboxTags();
    CHECK_OR_FAIL(tags.ok() && *tags == std::vector<std::string>{SandboxTag("sb-1")});
    // A second sandbox with the same id is refused and leaves the first intact.
    CHECK_OR_FAIL(!nets.Create("sb-1", policy.asReader()).ok());
    CHECK_OR_FAIL(IsNetns(link->netns_path));

    // From the sandbox's namespace (the kernel stack standing in for gVisor's): its resolver
    // port on the host end is reachable, any other host port is not.
    int dns = Listen(link->host_addr, 53);
    int other = Listen(link->host_addr, 8080);
    int loopback = Listen(INADDR_LOOPBACK, 8081);
    CHECK_OR_FAIL(dns >= 0 && other >= 0 && loopback >= 0);
    bool dns_ok = false, other_ok = true, loop_ok = true;
    CHECK_OR_FAIL(InNetnsFile(link->netns_path, [&] {
                    dns_ok = Connects(link->host_addr, 53);
                    other_ok = Connects(link->host_addr, 8080);
                    loop_ok = Connects(INADDR_LOOPBACK, 8081);
                    return absl::OkStatus();
                  }).ok());
    CHECK_OR_FAIL(dns_ok);
    CHECK_OR_FAIL(!other_ok);
    CHECK_OR_FAIL(!loop_ok);  // its own loopback: nothing listens there
    // Nothing from the host reaches into the sandbox.
    int inside = -1;
    CHECK_OR_FAIL(InNetnsFile(link->netns_path, [&] {
                    inside = Listen(link->sandbox_addr, 9000);
                    return absl::OkStatus();
                  }).ok());
    CHECK_OR_FAIL(inside >= 0);
    CHECK_OR_FAIL(!Connects(link->sandbox_addr, 9000));
    for (int fd : {dns, other, loopback, inside}) close(fd);

    nets.Remove(*link);
    CHECK_OR_FAIL(!IsNetns(link->netns_path));
    links = ListLinks(nets.host_ns_fd(), "psb-");
    CHECK_OR_FAIL(links.ok() && links->empty());
    tags = nets.firewall().SandboxTags();
    CHECK_OR_FAIL(tags.ok() && tags->empty());

    // Garbage collection: of two, only the owned one stays.
    auto a = nets.Create("sb-a", policy.asReader());
    auto b = nets.Create("sb-b", policy.asReader());
    CHECK_OR_FAIL(a.ok() && b.ok());
    nets.CollectUnowned({"sb-a"});
    CHECK_OR_FAIL(IsNetns(a->netns_path) && access(b->netns_path.c_str(), F_OK) != 0);
    links = ListLinks(nets.host_ns_fd(), "psb-");
    CHECK_OR_FAIL(links.ok() && *links == std::vector<std::string>{HostIfname("sb-a")});
    tags = nets.firewall().SandboxTags();
    CHECK_OR_FAIL(tags.ok() && *tags == std::vector<std::string>{SandboxTag("sb-a")});
    nets.CollectUnowned({});
    links = ListLinks(nets.host_ns_fd(), "psb-");
    CHECK_OR_FAIL(links.ok() && links->empty());
    nets.Stop();
    return true;
  });
  rmdir((dir + "/netns").c_str());
  rmdir(dir.c_str());
  if (rc == 77) GTEST_SKIP() << "no unprivileged user namespaces here";
  EXPECT_EQ(rc, 0);
}

// A UDP datagram from `from` (IP_TRANSPARENT: any source address, as a sandbox's own network
// stack may forge) to to:port; false if it could not be sent.
bool SendFrom(uint32_t from, uint32_t to, uint16_t port, const char* text) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(s, IPPROTO_IP, IP_TRANSPARENT, &one, sizeof(one));
  sockaddr_in sin{};
  sin.sin_family = AF_INET;
  sin.sin_addr.s_addr = htonl(from);
  bool ok = bind(s, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) == 0;
  sin.sin_addr.s_addr = htonl(to);
  sin.sin_port = htons(port);
  if (!ok) std::fprintf(stderr, "bind %s: %s\n", text, std::strerror(errno));
  ok = ok && sendto(s, text, std::strlen(text), 0, reinterpret_cast<sockaddr*>(&sin),
                    sizeof(sin)) == static_cast<ssize_t>(std::strlen(text));
  if (!ok) std::fprintf(stderr, "send %s: %s\n", text, std::strerror(errno));
  close(s);
  return ok;
}

// What arrives on `fd` within a short while, one string per datagram.
std::vector<std::string> Received(int fd) {
  std::vector<std::string> got;
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, 300) == 1) {
    char buf[64];
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.emplace_back(buf, n);
  }
  return got;
}

// A sandbox that forges its source address (another sandbox's, an address outside the pool)
// gets nothing through its link; its own address does.
TEST(SandboxNetworks, ALinkPassesOnlyItsSandboxsOwnSourceAddress) {
  std::string dir = testing::TempDir("nets-spoof");
  ASSERT_FALSE(dir.empty());
  capnp::MallocMessageBuilder message;
  auto policy = message.initRoot<config::NetworkPolicy>();
  policy.setMode(config::NetworkMode::SANDBOX);
  int rc = testing::InUserNamespace([&] {
    int host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    CHECK_OR_FAIL(host >= 0);
    SandboxNetworks nets(host, dir, *ParseCidr("10.88.0.0/24"), "");
    nets.set_serves_dns(true);  // as main() does once its resolver is up
    CHECK_OR_FAIL(nets.Start().ok());
    auto a = nets.Create("sb-a", policy.asReader());
    auto b = nets.Create("sb-b", policy.asReader());
    CHECK_OR_FAIL(a.ok() && b.ok());
    // Reverse-path filtering (off in a new namespace) would hide what the firewall does.
    // A named string: a temporary's c_str() in the list would dangle inside the loop.
    const std::string host_a = HostIfname("sb-a");
    for (const char* conf : {"all", "default", host_a.c_str()}) {
      std::string path = absl::StrCat("/proc/sys/net/ipv4/conf/", conf, "/rp_filter");
      int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
      if (fd >= 0) {
        (void)!write(fd, "0", 1);
        close(fd);
      }
    }
    int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in sin{};
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(a->host_addr);
    sin.sin_port = htons(53);
    int one = 1;
    setsockopt(udp, IPPROTO_IP, IP_FREEBIND, &one, sizeof(one));
    CHECK_OR_FAIL(bind(udp, reinterpret_cast<sockaddr*>(&sin), sizeof(sin)) == 0);
    // The link carries traffic once the kernel attaches its queue (up to a second on a busy
    // machine): its own address gets through first, then the forgeries go, then a marker.
    bool sent = false;
    std::vector<std::string> got;
    for (int i = 0; i < 10 && got.empty(); ++i) {
      CHECK_OR_FAIL(InNetnsFile(a->netns_path, [&] {
                      sent = SendFrom(a->sandbox_addr, a->host_addr, 53, "ready");
                      return absl::OkStatus();
                    }).ok());
      CHECK_OR_FAIL(sent);
      got = Received(udp);
    }
    CHECK_OR_FAIL(!got.empty());
    CHECK_OR_FAIL(InNetnsFile(a->netns_path, [&] {
                    sent = SendFrom(b->sandbox_addr, a->host_addr, 53, "as-b") &&
                           SendFrom(*ParseIpv4("192.0.2.9"), a->host_addr, 53, "outside") &&
                           SendFrom(a->sandbox_addr, a->host_addr, 53, "own");
                    return absl::OkStatus();
                  }).ok());
    CHECK_OR_FAIL(sent);
    got = Received(udp);
    for (const auto& g : got) std::fprintf(stderr, "received: %s\n", g.c_str());
    CHECK_OR_FAIL(got == std::vector<std::string>{"own"});
    close(udp);
    nets.Remove(*a);
    nets.Remove(*b);
    nets.Stop();
    return true;
  });
  rmdir((dir + "/netns").c_str());
  rmdir(dir.c_str());
  if (rc == 77) GTEST_SKIP() << "no unprivileged user namespaces here";
  EXPECT_EQ(rc, 0);
}

}  // namespace
}  // namespace paseo::network

namespace paseo::network {
namespace {

constexpr char kRoutes[] =
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n"
    "eth0\t00000000\t0102A8C0\t0003\t0\t0\t0\t00000000\t0\t0\t0\n"  // default via 192.168.2.1
    "eth0\t0002A8C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0\n"  // 192.168.2.0/24
    "psb-0123456789\t0400580A\t00000000\t0001\t0\t0\t0\tFCFFFFFF\t0\t0\t0\n";  // 10.88.0.4/30

// Runs `check` as root of a fresh user namespace (userns_sandbox.h) with a scratch run
// directory and a "sandbox" policy; skipped where there are no user namespaces.
void CheckInUserNamespace(
    const std::string& name,
    const std::function<bool(const std::string& dir, config::NetworkPolicy::Reader policy)>& check) {
  std::string dir = testing::TempDir(name);
  ASSERT_FALSE(dir.empty());
  capnp::MallocMessageBuilder message;
  auto policy = message.initRoot<config::NetworkPolicy>();
  policy.setMode(config::NetworkMode::SANDBOX);
  int rc = testing::InUserNamespace([&] { return check(dir, policy.asReader()); });
  rmdir((dir + "/netns").c_str());
  rmdir(dir.c_str());
  if (rc == 77) GTEST_SKIP() << "no unprivileged user namespaces here";
  EXPECT_EQ(rc, 0);
}

// The elements in a sandbox's allow set (real nft) that contain `needle`.
size_t CountInSet(const std::string& sandbox_id, const std::string& needle) {
  std::string listing;
  std::string set = absl::StrCat("inet ", kTable, " ", SandboxChain(sandbox_id), "_allow");
  if (!RunNft(absl::StrCat("list set ", set, "\n"), &listing).ok()) return 0;
  size_t n = 0;
  for (size_t at = listing.find(needle); at != std::string::npos; at = listing.find(needle, at + 1))
    ++n;
  return n;
}

// A sandbox resolving name after name (a wildcard rule) cannot grow the firewall without
// bound: its set of resolved addresses holds kMaxResolvedElements; more are refused.
TEST(SandboxNetworks, ResolvedAddressesPerSandboxAreBounded) {
  CheckInUserNamespace("nets-bound", [](const std::string& dir, config::NetworkPolicy::Reader policy) {
    int host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    CHECK_OR_FAIL(host >= 0);
    SandboxNetworks nets(host, dir, *ParseCidr("10.88.0.0/24"), "");
    nets.set_serves_dns(true);  // as main() does once its resolver is up
    CHECK_OR_FAIL(nets.Start().ok());
    auto now = std::chrono::steady_clock::now();
    nets.firewall().SetClockForTesting([&now] { return now; });
    auto link = nets.Create("sb-1", policy);
    CHECK_OR_FAIL(link.ok());
    auto count = [] { return CountInSet("sb-1", " . 443"); };
    using std::chrono::seconds;
    CHECK_OR_FAIL(nets.firewall().AllowResolved("sb-1", {0xcb000001}, {443}, seconds(600)) ==
                  seconds(600));
    CHECK_OR_FAIL(count() == 1);
    // Filled to the bound by one huge answer (in transactions of kResolvedPerTransaction).
    std::vector<uint32_t> fill;
    for (uint32_t i = 1; i < kMaxResolvedElements; ++i) fill.push_back(0xcc000000 + i);
    CHECK_OR_FAIL(nets.firewall().AllowResolved("sb-1", fill, {443}, seconds(600)) ==
                  seconds(600));
    size_t fill_transactions =
        (fill.size() + Firewall::kResolvedPerTransaction - 1) / Firewall::kResolvedPerTransaction;
    CHECK_OR_FAIL(nets.firewall().resolved_transactions() == 1 + fill_transactions);
    CHECK_OR_FAIL(count() == kMaxResolvedElements);
    // The next resolved address is refused (the firewall's memory knows it is full, and the
    // kernel's set would refuse it too), and refreshing one it holds still works.
    CHECK_OR_FAIL(nets.firewall().AllowResolved("sb-1", {0xcb000002}, {443}, seconds(600)) ==
                  seconds(0));
    CHECK_OR_FAIL(!RunNft(absl::StrCat("add element inet ", kTable, " ", SandboxChain("sb-1"),
                                       "_allow { 203.0.0.2 . 443 timeout 600s }\n"))
                       .ok());
    now += seconds(400);
    CHECK_OR_FAIL(nets.firewall().AllowResolved("sb-1", {0xcb000001}, {443}, seconds(900)) ==
                  seconds(900));
    CHECK_OR_FAIL(nets.firewall().resolved_transactions() == 2 + fill_transactions);
    CHECK_OR_FAIL(CountInSet("sb-1", "203.0.0.1 . 443 timeout 15m") == 1);
    size_t elements = count();
    if (elements != kMaxResolvedElements) std::fprintf(stderr, "elements: %zu\n", elements);
    CHECK_OR_FAIL(elements == kMaxResolvedElements);
    nets.Remove(*link);
    nets.Stop();
    return true;
  });
}

// One answer is one transaction; asking again costs none until the elements are half-way to
// expiry, then they are refreshed in the kernel's set; a removed sandbox's memory goes with it.
TEST(SandboxNetworks, RepeatedAnswersCostNoTransaction) {
  CheckInUserNamespace("nets-repeat", [](const std::string& dir, config::NetworkPolicy::Reader policy) {
    using std::chrono::seconds;
    int host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    CHECK_OR_FAIL(host >= 0);
    SandboxNetworks nets(host, dir, *ParseCidr("10.88.0.0/24"), "");
    CHECK_OR_FAIL(nets.Start().ok());
    auto now = std::chrono::steady_clock::now();
    Firewall& fw = nets.firewall();
    fw.SetClockForTesting([&now] { return now; });
    auto link = nets.Create("sb-1", policy);
    CHECK_OR_FAIL(link.ok());
    std::vector<uint32_t> answer = {0xcb007101, 0xcb007102, 0xcb007103};
    CHECK_OR_FAIL(fw.AllowResolved("sb-1", answer, {443}, seconds(300)) == seconds(300));
    CHECK_OR_FAIL(fw.resolved_transactions() == 1);
    CHECK_OR_FAIL(CountInSet("sb-1", " . 443 timeout 5m") == 3);
    for (int i = 0; i < 10; ++i) CHECK_OR_FAIL(fw.AllowResolved("sb-1", answer, {443}, seconds(300)) == seconds(300));
    CHECK_OR_FAIL(fw.resolved_transactions() == 1);
    now += seconds(200);
    CHECK_OR_FAIL(fw.AllowResolved("sb-1", answer, {443}, seconds(600)) == seconds(600));
    CHECK_OR_FAIL(fw.resolved_transactions() == 2);
    CHECK_OR_FAIL(CountInSet("sb-1", " . 443 timeout 10m") == 3);
    CHECK_OR_FAIL(CountInSet("sb-1", " . 443 timeout 5m") == 0);
    nets.Remove(*link);
    link = nets.Create("sb-1", policy);
    CHECK_OR_FAIL(link.ok());
    CHECK_OR_FAIL(fw.AllowResolved("sb-1", answer, {443}, seconds(600)) == seconds(600));
    CHECK_OR_FAIL(fw.resolved_transactions() == 3);
    CHECK_OR_FAIL(CountInSet("sb-1", " . 443 timeout 10m") == 3);
    nets.Remove(*link);
    nets.Stop();
    return true;
  });
}

void BringUpLoopbackHere() {
  int ctl = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr{};
  std::strcpy(ifr.ifr_name, "lo");
  if (ioctl(ctl, SIOCGIFFLAGS, &ifr) == 0) {
    ifr.ifr_flags |= IFF_UP;
    ioctl(ctl, SIOCSIFFLAGS, &ifr);
  }
  close(ctl);
}

// A removed sandbox's flows (its /30 on either side) leave the host's connection tracking, so
// a later sandbox given the block cannot continue them; other flows stay. After a crash, the
// next privhelper's garbage collection deletes those of every block no sandbox holds.
TEST(SandboxNetworks, RemoveAndCollectionFlushTheSandboxesConntrackEntries) {
  CheckInUserNamespace("nets-ct", [](const std::string& dir, config::NetworkPolicy::Reader policy) {
    int host = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    CHECK_OR_FAIL(host >= 0);
    BringUpLoopbackHere();
    Cidr pool = *ParseCidr("10.88.0.0/24");
    auto nets = std::make_unique<SandboxNetworks>(host, dir, pool, "");
    nets->set_serves_dns(true);  // as main() does once its resolver is up
    CHECK_OR_FAIL(nets->Start().ok());
    auto a = nets->Create("sb-a", policy);
    auto b = nets->Create("sb-b", policy);
    CHECK_OR_FAIL(a.ok() && b.ok());
    // Flows the firewall lets through (to each sandbox's resolver), and one of the host's own.
    int dns = Listen(a->host_addr, 53);
    CHECK_OR_FAIL(dns >= 0);
    auto count = [](uint32_t addr) {
      auto n = CountConntrack(InCidr(Cidr{addr, 32}));
      if (!n.ok()) std::fprintf(stderr, "%s\n", n.status().ToString().c_str());
      return n.ok() ? *n : 0;
    };
    // A new link's first packets can be dropped until the kernel attaches its queue (linkwatch
    // runs up to a second later on a busy machine), so each sandbox sends until its flow shows.
    for (const SandboxLink* link : {&*a, &*b}) {
      for (int i = 0; i < 30 && count(link->sandbox_addr) == 0; ++i) {
        if (i > 0) usleep(100'000);
        CHECK_OR_FAIL(InNetnsFile(link->netns_path, [&] {
                        return SendFrom(link->sandbox_addr, link->host_addr, 53, "x")
                                   ? absl::OkStatus()
                                   : absl::InternalError("sendto");
                      }).ok());
      }
    }
    bool tcp = false;  // a few tries: Connects waits half a second, and the machine is busy
    for (int i = 0; i < 5 && !tcp; ++i) {
      CHECK_OR_FAIL(InNetnsFile(a->netns_path, [&] {
                      tcp = Connects(a->host_addr, 53);
                      return absl::OkStatus();
                    }).ok());
    }
    CHECK_OR_FAIL(tcp);
    close(dns);
    CHECK_OR_FAIL(SendFrom(INADDR_LOOPBACK, INADDR_LOOPBACK, 9, "x"));
    CHECK_OR_FAIL(count(a->sandbox_addr) >= 2);  // UDP and TCP
    CHECK_OR_FAIL(count(b->sandbox_addr) >= 1);
    CHECK_OR_FAIL(count(INADDR_LOOPBACK) >= 1);

    nets->Remove(*a);
    CHECK_OR_FAIL(count(a->sandbox_addr) == 0);
    CHECK_OR_FAIL(count(a->host_addr) == 0);
    CHECK_OR_FAIL(count(b->sandbox_addr) >= 1);  // another sandbox's flows stay
    CHECK_OR_FAIL(count(INADDR_LOOPBACK) >= 1);

    // A crash leaves sb-b's network; the next privhelper owns no sandbox and collects it all.
    int host2 = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    CHECK_OR_FAIL(host2 >= 0);
    nets.reset();
    SandboxNetworks next(host2, dir, pool, "");
    next.set_serves_dns(true);
    CHECK_OR_FAIL(next.Start().ok());
    next.CollectUnowned({});
    CHECK_OR_FAIL(count(b->sandbox_addr) == 0);
    CHECK_OR_FAIL(count(INADDR_LOOPBACK) >= 1);
    next.Stop();
    return true;
  });
}

TEST(RouteOverlappingPool, AHostNetworkInsideOrAroundThePoolIsReported) {
  // The default route and the sandboxes' own links do not count.
  EXPECT_EQ(RouteOverlappingPool(kRoutes, *ParseCidr("10.88.0.0/16")), "");
  EXPECT_EQ(RouteOverlappingPool(kRoutes, *ParseCidr("192.168.0.0/16")),
            "192.168.2.0/24 via eth0");
  EXPECT_EQ(RouteOverlappingPool(kRoutes, *ParseCidr("192.168.2.128/25")),
            "192.168.2.0/24 via eth0");
  EXPECT_EQ(RouteOverlappingPool(kRoutes, *ParseCidr("192.168.3.0/24")), "");
  EXPECT_EQ(RouteOverlappingPool("", *ParseCidr("10.0.0.0/16")), "");
}

}  // namespace
}  // namespace paseo::network
