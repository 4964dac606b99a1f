// See upstream_resolver.h.
#include "egress/upstream_resolver.h"

#include <sys/random.h>

#include <optional>

#include "absl/strings/str_cat.h"
#include "privhelper/network/dns_message.h"
#include "privhelper/network/sandbox_network.h"

namespace paseo::egress {
namespace {

namespace dns = network::dns;
using Bytes = std::vector<uint8_t>;

uint16_t RandomId() {
  uint16_t id = 0;
  while (getrandom(&id, sizeof(id), 0) != sizeof(id)) {
  }
  return id;
}

// The addresses of a usable reply (NOERROR or NXDOMAIN), or nullopt for any other rcode.
std::optional<UpstreamResolver::Answer> Addresses(const dns::Response& r, const dns::Name& name) {
  if (r.rcode == dns::kNxDomain) return UpstreamResolver::Answer{};
  if (r.rcode != dns::kNoError) return std::nullopt;
  dns::Chain chain = dns::FollowChain(name, r.answers);
  return UpstreamResolver::Answer{chain.addrs, chain.ttl};
}

struct Exchange {
  uint16_t id = RandomId();
  dns::Question question;
  Bytes query;
  kj::Own<kj::NetworkAddress> upstream;
  kj::Own<kj::DatagramPort> port;
  kj::Own<kj::DatagramReceiver> receiver;
  kj::Own<kj::AsyncIoStream> tcp;
  uint8_t length[2] = {0, 0};
  Bytes reply;
};

// Datagrams until one is the upstream's valid reply (a stray or spoofed one is skipped).
kj::Promise<std::optional<dns::Response>> ReceiveUdp(Exchange& x, std::string from) {
  return x.receiver->receive().then([&x, from = kj::mv(from)]() mutable -> kj::Promise<std::optional<dns::Response>> {
    auto content = x.receiver->getContent();
    if (!content.isTruncated && x.receiver->getSource().toString().cStr() == from) {
      auto r = dns::ParseResponse(absl::MakeConstSpan(content.value.begin(), content.value.size()),
                                  x.id, x.question);
      if (r.ok()) return std::optional<dns::Response>(*r);
    }
    return ReceiveUdp(x, kj::mv(from));
  });
}

kj::Promise<std::optional<dns::Response>> AskTcp(Exchange& x) {
  return x.upstream->connect().then([&x](kj::Own<kj::AsyncIoStream> tcp) {
    x.tcp = kj::mv(tcp);
    Bytes framed = {static_cast<uint8_t>(x.query.size() >> 8), static_cast<uint8_t>(x.query.size())};
    framed.insert(framed.end(), x.query.begin(), x.query.end());
    auto sent = x.tcp->write(framed.data(), framed.size()).attach(kj::mv(framed));
    return sent.then([&x] { return x.tcp->read(x.length, 2); }).then([&x] {
      x.reply.resize(size_t{x.length[0]} << 8 | x.length[1]);
      return x.tcp->read(x.reply.data(), x.reply.size());
    }).then([&x]() -> std::optional<dns::Response> {
      auto r = dns::ParseResponse(x.reply, x.id, x.question);
      if (!r.ok()) return std::nullopt;
      return *r;
    });
  });
}

}  // namespace

UpstreamResolver::UpstreamResolver(kj::Network& network, kj::Timer& timer,
                                   std::vector<network::DnsUpstream> upstreams, kj::Duration timeout)
    : network_(network), timer_(timer), upstreams_(std::move(upstreams)), timeout_(timeout) {}

kj::Promise<std::vector<uint32_t>> UpstreamResolver::Resolve(const std::string& name) {
  auto cached = cache_.find(name);
  if (cached != cache_.end()) {
    if (cached->second.until > timer_.now()) return cached->second.addrs;
    cache_.erase(cached);
  }
  if (upstreams_.empty()) return std::vector<uint32_t>{};
  ++lookups_;
  kj::Duration attempt = timeout_ / 2;
  network::DnsUpstream second = upstreams_[upstreams_.size() > 1 ? 1 : 0];
  return Ask(upstreams_[0], name, attempt)
      .then([this, second, name, attempt](std::optional<Answer> got) -> kj::Promise<std::optional<Answer>> {
        if (got) return kj::mv(got);
        return Ask(second, name, attempt);
      })
      .then([this, name](std::optional<Answer> got) {
        if (!got) return std::vector<uint32_t>{};
        Keep(name, *got);
        return got->addrs;
      });
}

void UpstreamResolver::Keep(const std::string& name, const Answer& answer) {
  if (answer.addrs.empty() || answer.ttl == 0) return;
  kj::TimePoint now = timer_.now();
  if (cache_.size() >= kMaxCached) {
    for (auto it = cache_.begin(); it != cache_.end();) it = it->second.until <= now ? cache_.erase(it) : ++it;
    if (cache_.size() >= kMaxCached) return;
  }
  cache_.insert_or_assign(name, Cached{answer.addrs, now + std::min(answer.ttl, kMaxCacheTtl) * kj::SECONDS});
}

kj::Promise<std::optional<UpstreamResolver::Answer>> UpstreamResolver::Ask(network::DnsUpstream up,
                                                                           std::string name,
                                                                           kj::Duration timeout) {
  auto parsed = dns::NameFromDotted(name);
  if (!parsed.ok()) return std::optional<Answer>();
  auto x = kj::heap<Exchange>();
  x->question = dns::Question{*parsed, dns::kTypeA, dns::kClassIn};
  x->query = dns::BuildQuery(x->id, x->question, dns::kMaxEdnsUdpSize);
  std::string from = absl::StrCat(network::FormatIpv4(up.addr), ":", up.port);
  Exchange& e = *x;
  auto answer =
      network_.parseAddress(network::FormatIpv4(up.addr), up.port)
          .then([this, &e](kj::Own<kj::NetworkAddress> addr) {
            e.upstream = kj::mv(addr);
            return network_.parseAddress("0.0.0.0", 0);
          })
          .then([&e, from](kj::Own<kj::NetworkAddress> local) mutable {
            e.port = local->bindDatagramPort();  // a fresh source port per query
            e.receiver = e.port->makeReceiver({dns::kMaxEdnsUdpSize + 1, 0});
            return e.port->send(e.query.data(), e.query.size(), *e.upstream)
                .then([&e, from = kj::mv(from)](size_t) mutable { return ReceiveUdp(e, kj::mv(from)); });
          })
          .then([&e](std::optional<dns::Response> r) -> kj::Promise<std::optional<dns::Response>> {
            if (r && r->truncated) return AskTcp(e);
            return kj::mv(r);
          })
          .then([&e](std::optional<dns::Response> r) -> std::optional<Answer> {
            if (!r) return std::nullopt;
            return Addresses(*r, e.question.name);
          });
  return timer_.timeoutAfter(timeout, kj::mv(answer))
      .then([](std::optional<Answer> a) { return a; },
            [](kj::Exception&&) { return std::optional<Answer>(); })
      .attach(kj::mv(x));
}

}  // namespace paseo::egress
