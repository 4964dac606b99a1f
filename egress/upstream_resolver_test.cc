// UpstreamResolver against fake upstreams on loopback (a thread each, plain sockets): answers,
// a spoofed reply first, a truncated reply and its TCP retry, NXDOMAIN, a silent first upstream.
#include "egress/upstream_resolver.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "gtest/gtest.h"
#include "privhelper/network/dns_message.h"

namespace paseo::egress {
namespace {

namespace dns = network::dns;

// A fake upstream: UDP (and TCP) on 127.0.0.1, answering A queries with `addrs`, until stopped.
class FakeUpstream {
 public:
  enum class Mode { kAnswer, kSpoofFirst, kTruncateUdp, kNxDomain, kSilent };
  FakeUpstream(Mode mode, std::vector<uint32_t> addrs) : mode_(mode), addrs_(std::move(addrs)) {
    udp_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    tcp_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(0x7f000001);
    bind(udp_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(udp_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    int one = 1;
    setsockopt(tcp_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    bind(tcp_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    listen(tcp_, 4);
    thread_ = std::thread([this] { Serve(); });
  }
  ~FakeUpstream() {
    stop_ = true;
    thread_.join();
    close(udp_);
    close(tcp_);
  }
  network::DnsUpstream upstream() const { return {0x7f000001, port_}; }
  int queries() const { return queries_; }

 private:
  std::vector<uint8_t> Answer(const dns::Query& q, bool truncate) {
    std::vector<dns::Record> records;
    for (uint32_t a : addrs_) records.push_back({q.question.name, dns::kTypeA, dns::kClassIn, 60, a, {}});
    if (mode_ == Mode::kNxDomain) return dns::BuildResponse(q, dns::kNxDomain, {}, 512);
    return dns::BuildResponse(q, dns::kNoError, records, truncate ? 12 + 64 : 65535);
  }
  void Serve() {
    while (!stop_) {
      pollfd fds[2] = {{udp_, POLLIN, 0}, {tcp_, POLLIN, 0}};
      if (poll(fds, 2, 20) <= 0) continue;
      if (fds[0].revents & POLLIN) {
        uint8_t buf[2048];
        sockaddr_in from = {};
        socklen_t len = sizeof(from);
        ssize_t n = recvfrom(udp_, buf, sizeof(buf), 0, reinterpret_cast<sockaddr*>(&from), &len);
        ++queries_;
        auto q = dns::ParseQuery(absl::MakeConstSpan(buf, static_cast<size_t>(n)));
        if (!q.ok() || mode_ == Mode::kSilent) continue;
        if (mode_ == Mode::kSpoofFirst) {
          dns::Query wrong = *q;
          wrong.id ^= 1;
          auto spoof = dns::BuildResponse(wrong, dns::kNoError,
                                          {{q->question.name, dns::kTypeA, dns::kClassIn, 60, 0x0a0a0a0a, {}}}, 512);
          sendto(udp_, spoof.data(), spoof.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
        }
        auto r = Answer(*q, mode_ == Mode::kTruncateUdp);
        sendto(udp_, r.data(), r.size(), 0, reinterpret_cast<sockaddr*>(&from), len);
      }
      if (fds[1].revents & POLLIN) {
        int c = accept(tcp_, nullptr, nullptr);
        uint8_t len[2];
        if (recv(c, len, 2, MSG_WAITALL) == 2) {
          std::vector<uint8_t> m(size_t{len[0]} << 8 | len[1]);
          recv(c, m.data(), m.size(), MSG_WAITALL);
          auto q = dns::ParseQuery(m);
          if (q.ok()) {
            auto r = Answer(*q, false);
            uint8_t out[2] = {static_cast<uint8_t>(r.size() >> 8), static_cast<uint8_t>(r.size())};
            send(c, out, 2, 0);
            send(c, r.data(), r.size(), 0);
          }
        }
        close(c);
      }
    }
  }
  Mode mode_;
  std::vector<uint32_t> addrs_;
  int udp_ = -1, tcp_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> queries_{0};
  std::thread thread_;
};

class UpstreamResolverTest : public ::testing::Test {
 protected:
  struct Io {
    kj::AsyncIoContext io = kj::setupAsyncIo();
  };
  std::unique_ptr<Io> io_ = std::make_unique<Io>();

  std::vector<uint32_t> Resolve(std::vector<network::DnsUpstream> ups, const std::string& name) {
    UpstreamResolver r(io_->io.provider->getNetwork(), io_->io.provider->getTimer(), std::move(ups),
                       400 * kj::MILLISECONDS);
    return r.Resolve(name).wait(io_->io.waitScope);
  }
};

TEST_F(UpstreamResolverTest, AnAnswersAddressesAreReturned) {
  FakeUpstream up(FakeUpstream::Mode::kAnswer, {0xc0000201, 0xc0000202});
  EXPECT_EQ(Resolve({up.upstream()}, "api.example.com"), (std::vector<uint32_t>{0xc0000201, 0xc0000202}));
}

// An answer is kept for its TTL: the next connection to the name asks no upstream.
TEST_F(UpstreamResolverTest, AnAnswerIsKeptForItsTtl) {
  FakeUpstream up(FakeUpstream::Mode::kAnswer, {0xc0000201});
  UpstreamResolver r(io_->io.provider->getNetwork(), io_->io.provider->getTimer(), {up.upstream()},
                     400 * kj::MILLISECONDS);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(r.Resolve("api.example.com").wait(io_->io.waitScope), (std::vector<uint32_t>{0xc0000201}));
  EXPECT_EQ(r.lookups(), 1u);
  EXPECT_EQ(up.queries(), 1);
  // Another name is its own lookup; a name with no address is not kept.
  FakeUpstream nx(FakeUpstream::Mode::kNxDomain, {});
  UpstreamResolver n(io_->io.provider->getNetwork(), io_->io.provider->getTimer(), {nx.upstream()},
                     400 * kj::MILLISECONDS);
  n.Resolve("none.example.com").wait(io_->io.waitScope);
  n.Resolve("none.example.com").wait(io_->io.waitScope);
  EXPECT_EQ(n.lookups(), 2u);
}

TEST_F(UpstreamResolverTest, ASpoofedReplyIsNotTakenForTheAnswer) {
  FakeUpstream up(FakeUpstream::Mode::kSpoofFirst, {0xc0000201});
  EXPECT_EQ(Resolve({up.upstream()}, "api.example.com"), (std::vector<uint32_t>{0xc0000201}));
}

TEST_F(UpstreamResolverTest, ATruncatedReplyIsAskedAgainOverTcp) {
  std::vector<uint32_t> many;
  for (uint32_t i = 1; i <= 20; ++i) many.push_back(0xc0000200 + i);
  FakeUpstream up(FakeUpstream::Mode::kTruncateUdp, many);
  EXPECT_EQ(Resolve({up.upstream()}, "many.example.com"), many);
}

TEST_F(UpstreamResolverTest, NxdomainAndSilenceGiveNoAddress) {
  FakeUpstream nx(FakeUpstream::Mode::kNxDomain, {});
  EXPECT_TRUE(Resolve({nx.upstream()}, "none.example.com").empty());
  FakeUpstream silent(FakeUpstream::Mode::kSilent, {});
  EXPECT_TRUE(Resolve({silent.upstream()}, "api.example.com").empty());
  EXPECT_EQ(silent.queries(), 2) << "one upstream: asked twice";
  EXPECT_TRUE(Resolve({}, "api.example.com").empty());
}

TEST_F(UpstreamResolverTest, ASilentFirstUpstreamFallsToTheNext) {
  FakeUpstream silent(FakeUpstream::Mode::kSilent, {});
  FakeUpstream up(FakeUpstream::Mode::kAnswer, {0xc0000201});
  EXPECT_EQ(Resolve({silent.upstream(), up.upstream()}, "api.example.com"),
            (std::vector<uint32_t>{0xc0000201}));
}

}  // namespace
}  // namespace paseo::egress
