// The DNS forwarder end to end over loopback, without root: a fake upstream server (its own
// thread, blocking sockets) on 127.0.0.1, the forwarder for one "sandbox" on 127.0.0.2 serving
// queries from 127.0.0.3, and a fake firewall sink. The client side pumps the forwarder's kj
// loop while it waits, as the privhelper's loop would run.
#include "privhelper/network/dns_resolver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <thread>

#include "gtest/gtest.h"

namespace paseo::network {
namespace {

using Bytes = std::vector<uint8_t>;
using namespace std::chrono_literals;

constexpr uint32_t kLoopback = 0x7F000001;
constexpr uint32_t kHostEnd = 0x7F000002;
constexpr uint32_t kSandbox = 0x7F000003;
constexpr uint32_t kStranger = 0x7F000004;
constexpr uint32_t kGood = 0xC000020A;   // 192.0.2.10
constexpr uint32_t kEvil = 0x06060606;

sockaddr_in Ipv4(uint32_t addr, uint16_t port) {
  return sockaddr_in{AF_INET, htons(port), {htonl(addr)}, {}};
}

int Socket(int type, uint32_t addr, uint16_t port = 0) {
  int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  sockaddr_in sa = Ipv4(addr, port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

uint16_t PortOf(int fd) {
  sockaddr_in sa = {};
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  return ntohs(sa.sin_port);
}

// A port free for both UDP and TCP on `addr`.
uint16_t FreePort(uint32_t addr) {
  while (true) {
    int udp = Socket(SOCK_DGRAM, addr);
    uint16_t port = PortOf(udp);
    int tcp = Socket(SOCK_STREAM, addr, port);
    close(udp);
    if (tcp >= 0) {
      close(tcp);
      return port;
    }
  }
}

dns::Question Q(const std::string& name, uint16_t type = dns::kTypeA) {
  return dns::Question{*dns::NameFromDotted(name), type, dns::kClassIn};
}

struct SinkCall {
  std::string sandbox;
  std::vector<uint32_t> addrs;
  std::vector<uint16_t> ports;
  std::chrono::seconds ttl;
  bool answer_already_sent;
};

class FakeSink final : public ResolvedAddressSink {
 public:
  std::chrono::seconds AllowResolved(const std::string& sandbox_id,
                                     const std::vector<uint32_t>& addrs,
                                     const std::vector<uint16_t>& ports,
                                     std::chrono::seconds ttl) override {
    // Loopback delivers a datagram during sendto, so a readable client socket here would mean
    // the answer went out before the firewall heard of the address.
    pollfd p = {watched_fd, POLLIN, 0};
    bool sent = watched_fd >= 0 && poll(&p, 1, 0) == 1;
    calls.push_back(SinkCall{sandbox_id, addrs, ports, ttl, sent});
    return open_for ? *open_for : ttl;
  }
  std::vector<SinkCall> calls;
  std::optional<std::chrono::seconds> open_for;  // what it answers; unset: the whole TTL
  int watched_fd = -1;
};

// What the fake upstream does for a name.
struct Behavior {
  std::vector<uint32_t> addrs = {};
  uint32_t ttl = 300;
  std::string cname = "";      // answer with name CNAME cname, then cname's A records
  bool extra_unrelated = false;  // and an A record for an unrelated name
  bool silent = false;
  bool truncate_udp = false;   // TC over UDP; the answer only over TCP
  bool spoof_first = false;    // wrong source and wrong id replies before the real one
  uint8_t rcode = dns::kNoError;
};

// A DNS server on 127.0.0.1 (UDP and TCP on one port) in its own thread.
class FakeUpstream {
 public:
  FakeUpstream() {
    while (true) {
      udp_ = Socket(SOCK_DGRAM, kLoopback);
      port_ = PortOf(udp_);
      tcp_ = Socket(SOCK_STREAM, kLoopback, port_);
      if (tcp_ >= 0) break;
      close(udp_);
    }
    listen(tcp_, 8);
    spoofer_ = Socket(SOCK_DGRAM, kLoopback);
    thread_ = std::thread([this] { Run(); });
  }
  ~FakeUpstream() {
    stop_ = true;
    thread_.join();
    close(udp_);
    close(tcp_);
    close(spoofer_);
  }
  DnsUpstream upstream() const { return {kLoopback, port_}; }
  void Set(const std::string& name, Behavior b) {
    std::lock_guard<std::mutex> lock(mu_);
    behaviors_[name] = std::move(b);
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_;
  }
  int tcp_queries() {
    std::lock_guard<std::mutex> lock(mu_);
    return tcp_queries_;
  }

 private:
  void Run() {
    while (!stop_) {
      pollfd fds[2] = {{udp_, POLLIN, 0}, {tcp_, POLLIN, 0}};
      if (poll(fds, 2, 20) <= 0) continue;
      if (fds[0].revents & POLLIN) ServeUdp();
      if (fds[1].revents & POLLIN) ServeTcp();
    }
  }

  std::optional<Bytes> Answer(const Bytes& message, bool tcp, bool& silent, bool& spoof) {
    auto q = dns::ParseQuery(message);
    if (!q.ok()) return std::nullopt;
    std::lock_guard<std::mutex> lock(mu_);
    std::string name = dns::Dotted(q->question.name);
    seen_.push_back(name);
    if (tcp) ++tcp_queries_;
    Behavior b = behaviors_.count(name) ? behaviors_[name] : Behavior{.rcode = dns::kNxDomain};
    silent = b.silent;
    spoof = b.spoof_first && !tcp;
    std::vector<dns::Record> answers;
    dns::Name owner = q->question.name;
    if (!b.cname.empty()) {
      dns::Name target = *dns::NameFromDotted(b.cname);
      answers.push_back(dns::Record{owner, dns::kTypeCname, dns::kClassIn, b.ttl, 0, target});
      owner = target;
    }
    if (b.extra_unrelated)
      answers.push_back(dns::Record{*dns::NameFromDotted("unrelated.test"), dns::kTypeA,
                                    dns::kClassIn, b.ttl, kEvil, {}});
    for (uint32_t addr : b.addrs)
      answers.push_back(dns::Record{owner, dns::kTypeA, dns::kClassIn, b.ttl, addr, {}});
    size_t max = (b.truncate_udp && !tcp) ? 0 : dns::kMaxMessage;
    return dns::BuildResponse(*q, b.rcode, answers, max);
  }

  void ServeUdp() {
    Bytes buffer(65536);
    sockaddr_in from = {};
    socklen_t len = sizeof(from);
    ssize_t n = recvfrom(udp_, buffer.data(), buffer.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
    if (n <= 0) return;
    buffer.resize(n);
    bool silent = false, spoof = false;
    auto answer = Answer(buffer, false, silent, spoof);
    if (!answer || silent) return;
    auto send_from = [&](int fd, const Bytes& m) {
      sendto(fd, m.data(), m.size(), 0, reinterpret_cast<sockaddr*>(&from), sizeof(from));
    };
    if (spoof) {
      // The right id from the wrong port, then the wrong id from the right one, both saying
      // kEvil; then the real answer.
      auto q = dns::ParseQuery(buffer);
      std::vector<dns::Record> evil = {
          dns::Record{q->question.name, dns::kTypeA, dns::kClassIn, 300, kEvil, {}}};
      send_from(spoofer_, dns::BuildResponse(*q, dns::kNoError, evil, 512));
      dns::Query wrong_id = *q;
      wrong_id.id ^= 0x5A5A;
      send_from(udp_, dns::BuildResponse(wrong_id, dns::kNoError, evil, 512));
    }
    send_from(udp_, *answer);
  }

  void ServeTcp() {
    int conn = accept4(tcp_, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return;
    timeval tv = {1, 0};
    setsockopt(conn, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    uint8_t len[2];
    if (recv(conn, len, 2, MSG_WAITALL) == 2) {
      Bytes message(len[0] << 8 | len[1]);
      if (recv(conn, message.data(), message.size(), MSG_WAITALL) == static_cast<ssize_t>(message.size())) {
        bool silent = false, spoof = false;
        auto answer = Answer(message, true, silent, spoof);
        if (answer && !silent) {
          Bytes framed = {static_cast<uint8_t>(answer->size() >> 8), static_cast<uint8_t>(answer->size())};
          framed.insert(framed.end(), answer->begin(), answer->end());
          send(conn, framed.data(), framed.size(), MSG_NOSIGNAL);
        }
      }
    }
    close(conn);
  }

  int udp_ = -1, tcp_ = -1, spoofer_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::map<std::string, Behavior> behaviors_;
  std::vector<std::string> seen_;
  int tcp_queries_ = 0;
  std::thread thread_;
};

class DnsResolverTest : public ::testing::Test {
 protected:
  DnsResolverTest() {
    options_.listen_port = port_;
    options_.upstream_timeout = 600 * kj::MILLISECONDS;
    options_.tcp_idle_timeout = 300 * kj::MILLISECONDS;
    options_.max_in_flight = 8;
    options_.max_tcp_connections = 3;
    upstream_.Set("api.example.com", {.addrs = {kGood, kGood + 1}, .ttl = 5});
    upstream_.Set("long.example.com", {.addrs = {kGood}, .ttl = 10'000'000});
    upstream_.Set("a.b.example.com", {.addrs = {kGood}, .ttl = 60});
    upstream_.Set("slow.example.com", {.addrs = {kGood}, .ttl = 60, .silent = true});
  }
  ~DnsResolverTest() noexcept override {}

  DnsResolver& Resolver(std::vector<DnsUpstream> ups = {}) {
    if (ups.empty()) ups = {upstream_.upstream()};
    resolver_ = std::make_unique<DnsResolver>(io_.unixEventPort, *io_.lowLevelProvider, ups,
                                              sink_, options_);
    absl::Status added = resolver_->AddSandbox("sb-1", kHostEnd, kSandbox, rules_);
    EXPECT_TRUE(added.ok()) << added;
    return *resolver_;
  }

  // Runs the forwarder's loop for a little while.
  void Pump(kj::Duration d = 2 * kj::MILLISECONDS) {
    io_.provider->getTimer().afterDelay(d).wait(io_.waitScope);
  }

  // Pumps until `fd` is readable or `timeout`; whether it is.
  bool PumpUntilReadable(int fd, std::chrono::milliseconds timeout = 3000ms) {
    auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      pollfd p = {fd, POLLIN, 0};
      if (poll(&p, 1, 0) == 1) return true;
      Pump();
    }
    return false;
  }

  int Client(uint32_t from = kSandbox) {
    int fd = Socket(SOCK_DGRAM, from);
    sink_.watched_fd = fd;
    return fd;
  }

  void Send(int fd, const Bytes& m) {
    sockaddr_in to = Ipv4(kHostEnd, port_);
    sendto(fd, m.data(), m.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof(to));
  }

  std::optional<Bytes> Receive(int fd, std::chrono::milliseconds timeout = 3000ms) {
    if (!PumpUntilReadable(fd, timeout)) return std::nullopt;
    Bytes buffer(65536);
    ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
    if (n < 0) return std::nullopt;
    buffer.resize(n);
    return buffer;
  }

  // One UDP query from the sandbox's address; the parsed answer, if any.
  std::optional<dns::Response> Ask(const dns::Question& q, uint32_t from = kSandbox) {
    int fd = Client(from);
    uint16_t id = next_id_++;
    Send(fd, dns::BuildQuery(id, q, 0));
    auto reply = Receive(fd, from == kSandbox ? 3000ms : 300ms);
    close(fd);
    sink_.watched_fd = -1;
    if (!reply) return std::nullopt;
    auto r = dns::ParseResponse(*reply, id, q);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return std::nullopt;
    return *r;
  }

  // A TCP connection from the sandbox's address.
  int TcpClient() {
    int fd = Socket(SOCK_STREAM, kSandbox);
    sockaddr_in to = Ipv4(kHostEnd, port_);
    // Loopback completes the handshake into the listen backlog without the loop's accept.
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)), 0);
    return fd;
  }

  void SendTcp(int fd, const Bytes& m) {
    Bytes framed = {static_cast<uint8_t>(m.size() >> 8), static_cast<uint8_t>(m.size())};
    framed.insert(framed.end(), m.begin(), m.end());
    send(fd, framed.data(), framed.size(), MSG_NOSIGNAL);
  }

  // A whole framed reply, or nullopt on EOF/timeout.
  std::optional<Bytes> ReceiveTcp(int fd) {
    Bytes got;
    auto until = std::chrono::steady_clock::now() + 3000ms;
    while (std::chrono::steady_clock::now() < until) {
      uint8_t buffer[4096];
      ssize_t n = recv(fd, buffer, sizeof(buffer), MSG_DONTWAIT);
      if (n == 0) return std::nullopt;
      if (n > 0) got.insert(got.end(), buffer, buffer + n);
      if (got.size() >= 2 && got.size() >= 2u + (got[0] << 8 | got[1]))
        return Bytes(got.begin() + 2, got.end());
      if (n < 0 && errno != EAGAIN) return std::nullopt;
      Pump();
    }
    return std::nullopt;
  }

  bool Seen(const std::string& name) {
    auto seen = upstream_.seen();
    return std::find(seen.begin(), seen.end(), name) != seen.end();
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  FakeUpstream upstream_;
  FakeSink sink_;
  uint16_t port_ = FreePort(kHostEnd);
  DnsResolverOptions options_;
  std::vector<AllowedName> rules_ = {{"api.example.com", {443}},
                                     {"long.example.com", {}},
                                     {"*.example.com", {80, 443}},
                                     {"www.example.net", {}},
                                     {"rebind.example.net", {}}};
  std::unique_ptr<DnsResolver> resolver_;
  uint16_t next_id_ = 100;
};

TEST(FindNameRuleTest, ExactWildcardAndCase) {
  std::vector<AllowedName> rules = {{"api.example.com", {443}}, {"*.svc.example", {}}};
  auto find = [&](const std::string& n) { return FindNameRule(rules, *dns::NameFromDotted(n)); };
  EXPECT_EQ(find("api.example.com"), &rules[0]);
  EXPECT_EQ(find("API.Example.COM."), &rules[0]);
  EXPECT_EQ(find("x.api.example.com"), nullptr) << "an exact rule covers no subdomain";
  EXPECT_EQ(find("example.com"), nullptr);
  EXPECT_EQ(find("a.svc.example"), &rules[1]);
  EXPECT_EQ(find("a.b.SVC.example"), &rules[1]);
  EXPECT_EQ(find("svc.example"), nullptr) << "the wildcard's apex is not below it";
  EXPECT_EQ(find("evilsvc.example"), nullptr) << "a suffix match must end at a label";
  EXPECT_EQ(FindNameRule(rules, dns::Name{{"a.svc", "example"}}), nullptr) << "dotted label";
  EXPECT_EQ(FindNameRule(rules, dns::Name{}), nullptr);
}

TEST_F(DnsResolverTest, AllowedNameResolvesAfterTheSinkHeardOfIt) {
  Resolver();
  auto r = Ask(Q("api.example.com"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rcode, dns::kNoError);
  dns::Chain chain = dns::FollowChain(Q("api.example.com").name, r->answers);
  EXPECT_EQ(chain.addrs, (std::vector<uint32_t>{kGood, kGood + 1}));
  ASSERT_EQ(sink_.calls.size(), 1u) << "one call for the whole answer";
  const SinkCall& call = sink_.calls[0];
  EXPECT_EQ(call.sandbox, "sb-1");
  EXPECT_EQ(call.ports, (std::vector<uint16_t>{443}));
  EXPECT_EQ(call.ttl, 30s) << "a 5 s TTL opens the address for the 30 s minimum";
  EXPECT_FALSE(call.answer_already_sent);
  EXPECT_EQ(call.addrs, (std::vector<uint32_t>{kGood, kGood + 1}));
}

TEST_F(DnsResolverTest, TtlHandedOutIsCappedByWhatTheFirewallKeepsOpen) {
  Resolver();
  sink_.open_for = 20s;  // opened earlier, still open for 20 s: not refreshed
  auto r = Ask(Q("a.b.example.com"));  // TTL 60 upstream
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rcode, dns::kNoError);
  ASSERT_FALSE(r->answers.empty());
  for (const dns::Record& record : r->answers) EXPECT_EQ(record.ttl, 20u);
}

TEST_F(DnsResolverTest, AnswerTheFirewallCouldNotOpenIsServfail) {
  Resolver();
  sink_.open_for = 0s;  // rate-limited, full, or nft failed
  auto r = Ask(Q("a.b.example.com"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rcode, dns::kServFail);
  EXPECT_TRUE(r->answers.empty()) << "no address the sandbox cannot reach is handed out";
  ASSERT_EQ(sink_.calls.size(), 1u);
}

TEST_F(DnsResolverTest, LongTtlIsClampedToADayInTheFirewallAndTheAnswer) {
  Resolver();
  auto r = Ask(Q("long.example.com"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->answers.size(), 1u);
  EXPECT_EQ(r->answers[0].ttl, 86400u) << "no client caches past the firewall entry";
  ASSERT_EQ(sink_.calls.size(), 1u);
  EXPECT_EQ(sink_.calls[0].ttl, 24h);
  EXPECT_TRUE(sink_.calls[0].ports.empty());
}

TEST_F(DnsResolverTest, AaaaAndOtherTypesOfAnAllowedNameAreEmptyNoError) {
  Resolver();
  for (uint16_t type : {dns::kTypeAaaa, uint16_t{16}, uint16_t{255}}) {
    auto r = Ask(Q("api.example.com", type));
    ASSERT_TRUE(r) << type;
    EXPECT_EQ(r->rcode, dns::kNoError);
    EXPECT_TRUE(r->answers.empty());
  }
  EXPECT_TRUE(upstream_.seen().empty()) << "nothing to ask the upstream";
  EXPECT_TRUE(sink_.calls.empty());
}

TEST_F(DnsResolverTest, NamesNotAllowedAreNxdomainAndNeverForwarded) {
  Resolver();
  upstream_.Set("evil.example.org", {.addrs = {kEvil}});
  upstream_.Set("example.com", {.addrs = {kEvil}});
  for (const char* name : {"evil.example.org", "example.com", "x.api.example.com.evil.org",
                           "www.example.net.evil.org"}) {
    auto r = Ask(Q(name));
    ASSERT_TRUE(r) << name;
    EXPECT_EQ(r->rcode, dns::kNxDomain) << name;
    EXPECT_TRUE(r->answers.empty());
  }
  auto aaaa = Ask(Q("evil.example.org", dns::kTypeAaaa));
  ASSERT_TRUE(aaaa);
  EXPECT_EQ(aaaa->rcode, dns::kNxDomain);
  EXPECT_TRUE(upstream_.seen().empty()) << "a query name is data: it must not leave";
  EXPECT_TRUE(sink_.calls.empty());
}

TEST_F(DnsResolverTest, WildcardCoversNamesBelowButNotTheApex) {
  Resolver();
  auto below = Ask(Q("A.B.example.COM"));
  ASSERT_TRUE(below);
  EXPECT_EQ(below->rcode, dns::kNoError);
  ASSERT_EQ(sink_.calls.size(), 1u);
  EXPECT_EQ(sink_.calls[0].ports, (std::vector<uint16_t>{80, 443}));
  auto apex = Ask(Q("example.com"));
  ASSERT_TRUE(apex);
  EXPECT_EQ(apex->rcode, dns::kNxDomain);
  EXPECT_FALSE(Seen("example.com"));
}

TEST_F(DnsResolverTest, UpstreamSilenceGivesServfailAfterOneRetry) {
  Resolver();
  auto start = std::chrono::steady_clock::now();
  auto r = Ask(Q("slow.example.com"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rcode, dns::kServFail);
  EXPECT_GE(std::chrono::steady_clock::now() - start, 500ms);
  EXPECT_EQ(upstream_.seen().size(), 2u) << "asked, then retried once";
  EXPECT_TRUE(sink_.calls.empty());
}

TEST_F(DnsResolverTest, UpstreamErrorsAndSilenceMoveOnToTheNextUpstream) {
  int dead = Socket(SOCK_DGRAM, kLoopback);  // bound, never answers
  Resolver({DnsUpstream{kLoopback, PortOf(dead)}, upstream_.upstream()});
  auto r = Ask(Q("api.example.com"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rcode, dns::kNoError);
  ASSERT_EQ(sink_.calls.size(), 1u);
  EXPECT_EQ(sink_.calls[0].addrs.size(), 2u);
  close(dead);

  upstream_.Set("a.b.example.com", {.addrs = {kGood}, .rcode = dns::kRefused});
  auto refused = Ask(Q("a.b.example.com"));
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->rcode, dns::kServFail) << "REFUSED upstream is not relayed as an answer";
}

TEST_F(DnsResolverTest, UpstreamNxdomainIsRelayed) {
  Resolver();
  auto r = Ask(Q("missing.example.com"));  // the fake upstream knows no such name
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rcode, dns::kNxDomain);
  EXPECT_TRUE(Seen("missing.example.com"));
}

TEST_F(DnsResolverTest, SpoofedRepliesAreIgnored) {
  Resolver();
  upstream_.Set("api.example.com", {.addrs = {kGood}, .spoof_first = true});
  auto r = Ask(Q("api.example.com"));
  ASSERT_TRUE(r);
  dns::Chain chain = dns::FollowChain(Q("api.example.com").name, r->answers);
  EXPECT_EQ(chain.addrs, (std::vector<uint32_t>{kGood}));
  ASSERT_EQ(sink_.calls.size(), 1u);
  EXPECT_EQ(sink_.calls[0].addrs, std::vector<uint32_t>{kGood}) << "neither the wrong source nor the wrong id opened kEvil";
}

TEST_F(DnsResolverTest, CnameChainIsFollowedAndUnrelatedRecordsDropped) {
  Resolver();
  upstream_.Set("www.example.net", {.addrs = {kGood}, .ttl = 120, .cname = "edge.cdn.test", .extra_unrelated = true});
  auto r = Ask(Q("www.example.net"));
  ASSERT_TRUE(r);
  ASSERT_EQ(r->answers.size(), 2u) << "the CNAME and its target's A; not unrelated.test";
  EXPECT_EQ(r->answers[0].type, dns::kTypeCname);
  EXPECT_EQ(dns::Dotted(r->answers[0].target), "edge.cdn.test");
  EXPECT_EQ(r->answers[1].addr, kGood);
  ASSERT_EQ(sink_.calls.size(), 1u);
  EXPECT_EQ(sink_.calls[0].addrs, std::vector<uint32_t>{kGood});
  EXPECT_EQ(sink_.calls[0].ttl, 120s);
}

TEST_F(DnsResolverTest, RebindingToLoopbackOrMetadataIsNotHandedOut) {
  Resolver();
  upstream_.Set("rebind.example.net", {.addrs = {kLoopback, 0xA9FEA9FE, kGood}});
  auto r = Ask(Q("rebind.example.net"));
  ASSERT_TRUE(r);
  EXPECT_EQ(dns::FollowChain(Q("rebind.example.net").name, r->answers).addrs,
            (std::vector<uint32_t>{kGood}));
  ASSERT_EQ(sink_.calls.size(), 1u);
  EXPECT_EQ(sink_.calls[0].addrs, std::vector<uint32_t>{kGood});
}

TEST_F(DnsResolverTest, TruncatedUpstreamReplyFallsBackToTcp) {
  Resolver();
  upstream_.Set("api.example.com", {.addrs = {kGood}, .truncate_udp = true});
  auto r = Ask(Q("api.example.com"));
  ASSERT_TRUE(r);
  EXPECT_FALSE(r->truncated);
  EXPECT_EQ(dns::FollowChain(Q("api.example.com").name, r->answers).addrs,
            (std::vector<uint32_t>{kGood}));
  EXPECT_EQ(upstream_.tcp_queries(), 1);
}

TEST_F(DnsResolverTest, TcpClientQueriesWorkAndAreForwardedOverTcp) {
  Resolver();
  int fd = TcpClient();
  for (uint16_t id : {7, 8}) {  // two queries, one after the other, on one connection
    SendTcp(fd, dns::BuildQuery(id, Q("api.example.com"), 0));
    auto reply = ReceiveTcp(fd);
    ASSERT_TRUE(reply);
    auto r = dns::ParseResponse(*reply, id, Q("api.example.com"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->answers.size(), 2u);
  }
  EXPECT_EQ(upstream_.tcp_queries(), 2);
  close(fd);
}

TEST_F(DnsResolverTest, TcpConnectionsAreCappedAndIdleOnesClosed) {
  Resolver();
  std::vector<int> fds;
  for (size_t i = 0; i < options_.max_tcp_connections + 2; ++i) fds.push_back(TcpClient());
  Pump(20 * kj::MILLISECONDS);
  int answered = 0;
  for (int fd : fds) {
    SendTcp(fd, dns::BuildQuery(1, Q("api.example.com", dns::kTypeAaaa), 0));
    if (ReceiveTcp(fd)) ++answered;
  }
  EXPECT_EQ(answered, static_cast<int>(options_.max_tcp_connections));
  // Idle past the timeout: the served ones are closed too, and new ones are accepted.
  Pump(400 * kj::MILLISECONDS);
  for (int fd : fds) {
    char c;
    EXPECT_LE(recv(fd, &c, 1, MSG_DONTWAIT), 0) << "closed";
    close(fd);
  }
  int again = TcpClient();
  SendTcp(again, dns::BuildQuery(2, Q("api.example.com", dns::kTypeAaaa), 0));
  EXPECT_TRUE(ReceiveTcp(again));
  close(again);
}

TEST_F(DnsResolverTest, FloodOfQueriesStaysBounded) {
  Resolver();
  int fd = Client();
  constexpr int kFlood = 100;
  for (int i = 0; i < kFlood; ++i) Send(fd, dns::BuildQuery(i, Q("slow.example.com"), 0));
  int refused = 0, servfail = 0;
  auto until = std::chrono::steady_clock::now() + 3000ms;
  while (refused + servfail < kFlood && std::chrono::steady_clock::now() < until) {
    auto reply = Receive(fd, 100ms);
    if (!reply) continue;
    uint8_t rcode = (*reply)[3] & 0xF;
    refused += rcode == dns::kRefused;
    servfail += rcode == dns::kServFail;
  }
  EXPECT_EQ(servfail, static_cast<int>(options_.max_in_flight));
  EXPECT_EQ(refused, kFlood - static_cast<int>(options_.max_in_flight));
  EXPECT_LE(upstream_.seen().size(), 2 * options_.max_in_flight);
  // Afterwards it serves again.
  close(fd);
  auto r = Ask(Q("api.example.com"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->rcode, dns::kNoError);
}

TEST_F(DnsResolverTest, MalformedQueriesAndStrangersAreDropped) {
  Resolver();
  int fd = Client();
  Bytes valid = dns::BuildQuery(1, Q("api.example.com"), 0);
  std::vector<Bytes> hostile = {
      {},
      {0, 1, 2},
      Bytes(valid.begin(), valid.end() - 3),         // cut
      [&] { Bytes b = valid; b[2] |= 0x80; return b; }(),  // a response
      [&] { Bytes b = valid; b[12] = 0xC0; b[13] = 12; return b; }(),  // pointer loop
      Bytes(2000, 0),                                  // oversized
  };
  for (const Bytes& m : hostile) Send(fd, m);
  EXPECT_FALSE(Receive(fd, 200ms)) << "no answer to any of them";
  close(fd);
  EXPECT_FALSE(Ask(Q("api.example.com"), kStranger)) << "only the sandbox's own address";
  EXPECT_TRUE(upstream_.seen().empty());
  auto r = Ask(Q("api.example.com"));
  ASSERT_TRUE(r) << "still serving";
}

TEST_F(DnsResolverTest, RemoveSandboxClosesItsSockets) {
  DnsResolver& resolver = Resolver();
  EXPECT_TRUE(absl::IsAlreadyExists(resolver.AddSandbox("sb-1", kHostEnd, kSandbox, rules_)));
  int fd = Client();
  Send(fd, dns::BuildQuery(1, Q("slow.example.com"), 0));  // in flight while removed
  Pump(20 * kj::MILLISECONDS);
  resolver.RemoveSandbox("sb-1");
  resolver.RemoveSandbox("sb-1");  // a no-op
  Pump(700 * kj::MILLISECONDS);
  EXPECT_FALSE(Receive(fd, 50ms)) << "its queries were dropped";
  close(fd);
  int udp = Socket(SOCK_DGRAM, kHostEnd, port_);
  int tcp = Socket(SOCK_STREAM, kHostEnd, port_);
  EXPECT_GE(udp, 0) << "UDP port free again";
  EXPECT_GE(tcp, 0) << "TCP port free again";
  if (udp >= 0) close(udp);
  if (tcp >= 0) close(tcp);
  EXPECT_TRUE(resolver.AddSandbox("sb-1", kHostEnd, kSandbox, rules_).ok());
  EXPECT_TRUE(Ask(Q("api.example.com")));
}

TEST_F(DnsResolverTest, AddSandboxFailsCleanlyWhenThePortIsTaken) {
  int taken = Socket(SOCK_STREAM, 0x7F000006, port_);
  ASSERT_GE(taken, 0);
  ASSERT_EQ(listen(taken, 1), 0);
  DnsResolver& resolver = Resolver();
  EXPECT_FALSE(resolver.AddSandbox("sb-2", 0x7F000006, 0x7F000007, rules_).ok());
  close(taken);
  int udp = Socket(SOCK_DGRAM, 0x7F000006, port_);
  EXPECT_GE(udp, 0) << "the UDP socket of the failed add was closed";
  close(udp);
  EXPECT_TRUE(resolver.AddSandbox("sb-2", 0x7F000006, 0x7F000007, rules_).ok());
}

}  // namespace
}  // namespace paseo::network
