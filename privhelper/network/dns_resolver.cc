// See dns_resolver.h.
#include "privhelper/network/dns_resolver.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include <kj/debug.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "privhelper/network/sandbox_network.h"

namespace paseo::network {
namespace {

using Bytes = std::vector<uint8_t>;

constexpr uint32_t kMinTtl = 30;          // seconds an allowed address stays open at least
constexpr uint32_t kMaxTtl = 24 * 3600;   // and at most
constexpr size_t kMaxAddrsPerAnswer = 32;  // addresses one answer may open
constexpr size_t kMaxTcpQuery = 4096;      // a one-question query is far smaller
constexpr size_t kUpstreamUdpBuffer = 4096;
constexpr int kDatagramsPerWakeup = 64;    // then yield, so one busy socket cannot starve others
constexpr int kListenBacklog = 16;

sockaddr_in Ipv4(uint32_t addr, uint16_t port) {
  sockaddr_in sa = {};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(addr);
  sa.sin_port = htons(port);
  return sa;
}

uint16_t RandomId() {
  uint16_t id = 0;
  // getrandom of 2 bytes from the urandom pool never blocks once it is initialized, which it
  // is long before a service starts.
  if (getrandom(&id, sizeof(id), 0) != sizeof(id)) KJ_FAIL_SYSCALL("getrandom", errno);
  return id;
}

// Addresses no answer may open, whatever the upstream says (DNS rebinding towards the host or
// a metadata service): "this network", loopback, link-local, multicast and reserved. The
// firewall denies them too; the forwarder does not even hand them out.
int MakeSocket(const DnsResolverOptions& options, int type) {
  return options.make_socket ? options.make_socket(type) : socket(AF_INET, type, 0);
}

// A bound, non-blocking socket on host_addr:port; IP_FREEBIND lets the bind succeed before
// the link's address is configured.
absl::StatusOr<kj::AutoCloseFd> BoundSocket(const DnsResolverOptions& options, int type,
                                            uint32_t host_addr, uint16_t port) {
  int fd = MakeSocket(options, type | SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return ErrnoStatus("socket", "");
  kj::AutoCloseFd owned(fd);
  int one = 1;
  if (setsockopt(fd, SOL_IP, IP_FREEBIND, &one, sizeof(one)) != 0)
    return ErrnoStatus("setsockopt IP_FREEBIND", "");
  sockaddr_in sa = Ipv4(host_addr, port);
  std::string where = absl::StrCat(inet_ntoa(sa.sin_addr), ":", port);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return ErrnoStatus("bind", where);
  if (type == SOCK_STREAM && listen(fd, kListenBacklog) != 0) return ErrnoStatus("listen", where);
  return owned;
}

// Reads exactly `size` bytes, or false on EOF or when `timeout` passes first.
kj::Promise<bool> ReadExactly(kj::Timer& timer, kj::AsyncInputStream& in, void* buffer, size_t size,
                              kj::Duration timeout) {
  return in.tryRead(buffer, size, size)
      .then([size](size_t got) { return got == size; })
      .exclusiveJoin(timer.afterDelay(timeout).then([] { return false; }));
}

// A length-prefixed message (RFC 1035 4.2.2) of at most `max` bytes, or nullopt.
kj::Promise<std::optional<Bytes>> ReadTcpMessage(kj::Timer& timer, kj::AsyncInputStream& in,
                                                 size_t max, kj::Duration timeout) {
  auto length = kj::heapArray<uint8_t>(2);
  auto promise = ReadExactly(timer, in, length.begin(), 2, timeout);
  return promise.then([&timer, &in, max, timeout, length = kj::mv(length)](
                          bool ok) -> kj::Promise<std::optional<Bytes>> {
    size_t size = size_t{length[0]} << 8 | length[1];
    if (!ok || size < 12 || size > max) return std::optional<Bytes>();
    auto body = kj::heap<Bytes>(size);
    auto read = ReadExactly(timer, in, body->data(), size, timeout);
    return read.then([body = kj::mv(body)](bool ok) {
      return ok ? std::optional<Bytes>(kj::mv(*body)) : std::optional<Bytes>();
    });
  });
}

kj::Promise<void> WriteTcpMessage(kj::AsyncOutputStream& out, Bytes message) {
  auto framed = kj::heap<Bytes>();
  framed->push_back(static_cast<uint8_t>(message.size() >> 8));
  framed->push_back(static_cast<uint8_t>(message.size()));
  framed->insert(framed->end(), message.begin(), message.end());
  auto write = out.write(framed->data(), framed->size());
  return write.attach(kj::mv(framed));
}

class LoggingErrorHandler final : public kj::TaskSet::ErrorHandler {
 public:
  explicit LoggingErrorHandler(std::string id) : id_(std::move(id)) {}
  void taskFailed(kj::Exception&& e) override {
    KJ_LOG(WARNING, "dns forwarder", id_.c_str(), e.getDescription());
  }

 private:
  std::string id_;
};

}  // namespace

std::vector<AllowedName> AllowedNamesFrom(config::NetworkPolicy::Reader policy) {
  std::vector<AllowedName> out;
  for (auto rule : policy.getAllowNames()) {
    AllowedName name{absl::AsciiStrToLower(rule.getName().cStr()), {}};
    for (uint16_t port : rule.getPorts()) name.ports.push_back(port);
    out.push_back(std::move(name));
  }
  return out;
}

const AllowedName* FindNameRule(const std::vector<AllowedName>& rules, const dns::Name& name) {
  if (!dns::IsHostname(name)) return nullptr;
  std::string dotted = dns::Dotted(name);  // lower case; labels hold no dots (IsHostname)
  for (const AllowedName& rule : rules) {
    std::string pattern = absl::AsciiStrToLower(rule.name);
    if (absl::StartsWith(pattern, "*.")) {
      // Strictly below the suffix: at least one more label, so the apex does not match.
      std::string suffix = pattern.substr(1);  // ".example.com"
      if (dotted.size() > suffix.size() && absl::EndsWith(dotted, suffix)) return &rule;
    } else if (dotted == pattern) {
      return &rule;
    }
  }
  return nullptr;
}

// One sandbox's listeners and queries. Destroying it cancels every promise it started (they
// live in tasks_, destroyed first) and then closes its sockets.
class DnsResolver::SandboxDns {
 public:
  SandboxDns(DnsResolver& resolver, std::string id, uint32_t sandbox_addr,
             std::vector<AllowedName> names, kj::AutoCloseFd udp, kj::AutoCloseFd tcp)
      : resolver_(resolver),
        timer_(resolver.events_.getTimer()),
        options_(resolver.options_),
        id_(std::move(id)),
        sandbox_addr_(sandbox_addr),
        names_(std::move(names)),
        udp_(kj::mv(udp)),
        udp_observer_(resolver.events_, udp_.get(), kj::UnixEventPort::FdObserver::OBSERVE_READ),
        listener_(resolver.io_.wrapListenSocketFd(
            tcp.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP |
                               kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC |
                               kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK)),
        errors_(id_),
        tasks_(errors_) {
    tasks_.add(ServeUdp());
    tasks_.add(AcceptTcp());
  }

 private:
  // --- from the sandbox ---------------------------------------------------------------------

  kj::Promise<void> ServeUdp() {
    // The observer is edge-triggered: drain the socket, but yield after a batch so a flood
    // from this sandbox leaves the loop to everyone else.
    if (DrainUdp()) return kj::evalLater([this] { return ServeUdp(); });
    return udp_observer_.whenBecomesReadable().then([this] { return ServeUdp(); });
  }

  // Handles queued datagrams; true if there may be more.
  bool DrainUdp() {
    uint8_t buffer[dns::kMaxEdnsUdpSize];
    for (int i = 0; i < kDatagramsPerWakeup; ++i) {
      sockaddr_in from = {};
      socklen_t from_len = sizeof(from);
      ssize_t n = recvfrom(udp_.get(), buffer, sizeof(buffer), MSG_TRUNC,
                           reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
      // Oversized (MSG_TRUNC reports the real length) or not from this sandbox: dropped.
      if (static_cast<size_t>(n) > sizeof(buffer) || !FromSandbox(from)) continue;
      absl::StatusOr<dns::Query> query =
          dns::ParseQuery(absl::MakeConstSpan(buffer, static_cast<size_t>(n)));
      if (!query.ok()) continue;
      if (in_flight_ >= options_.max_in_flight) {
        SendUdp(from, dns::BuildResponse(*query, dns::kRefused, {}, query->udp_size));
        continue;
      }
      ++in_flight_;
      tasks_.add(Answer(*query, /*over_tcp=*/false)
                     .then([this, from](Bytes response) { SendUdp(from, std::move(response)); })
                     .attach(kj::defer([this] { --in_flight_; })));
    }
    return true;
  }

  bool FromSandbox(const sockaddr_in& from) const {
    return from.sin_family == AF_INET && ntohl(from.sin_addr.s_addr) == sandbox_addr_;
  }

  void SendUdp(const sockaddr_in& to, const Bytes& message) {
    // Best effort, like UDP itself: a full socket buffer drops the answer and the client
    // asks again.
    sendto(udp_.get(), message.data(), message.size(), MSG_DONTWAIT,
           reinterpret_cast<const sockaddr*>(&to), sizeof(to));
  }

  kj::Promise<void> AcceptTcp() {
    return listener_->accept().then([this](kj::Own<kj::AsyncIoStream> conn) {
      sockaddr_in peer = {};
      kj::uint peer_len = sizeof(peer);
      conn->getpeername(reinterpret_cast<sockaddr*>(&peer), &peer_len);
      if (FromSandbox(peer) && tcp_connections_ < options_.max_tcp_connections) {
        ++tcp_connections_;
        auto served = ServeTcp(*conn).catch_([](kj::Exception&&) {});  // reset by the peer
        tasks_.add(served.attach(kj::mv(conn), kj::defer([this] { --tcp_connections_; })));
      }  // else closed right away
      return AcceptTcp();
    }, [this](kj::Exception&& e) {
      // accept(2) failing (EMFILE, ENOBUFS) must not end this sandbox's TCP service for good.
      KJ_LOG(WARNING, "dns forwarder: accept failed", id_.c_str(), e.getDescription());
      return timer_.afterDelay(100 * kj::MILLISECONDS).then([this] { return AcceptTcp(); });
    });
  }

  // One query at a time per connection; the connection ends on EOF, a malformed or oversized
  // query, or idle_timeout without a whole query.
  kj::Promise<void> ServeTcp(kj::AsyncIoStream& conn) {
    auto read = ReadTcpMessage(timer_, conn, kMaxTcpQuery, options_.tcp_idle_timeout);
    return read.then([this, &conn](std::optional<Bytes> message) -> kj::Promise<void> {
      if (!message) return kj::READY_NOW;
      absl::StatusOr<dns::Query> query = dns::ParseQuery(*message);
      if (!query.ok()) return kj::READY_NOW;
      if (in_flight_ >= options_.max_in_flight) {
        Bytes refused = dns::BuildResponse(*query, dns::kRefused, {}, dns::kMaxMessage);
        return WriteTcpMessage(conn, std::move(refused)).then([this, &conn] {
          return ServeTcp(conn);
        });
      }
      ++in_flight_;
      auto answered = Answer(*query, /*over_tcp=*/true).attach(kj::defer([this] { --in_flight_; }));
      return answered.then([&conn](Bytes response) {
        return WriteTcpMessage(conn, std::move(response));
      }).then([this, &conn] { return ServeTcp(conn); });
    });
  }

  // --- the answer ---------------------------------------------------------------------------

  kj::Promise<Bytes> Answer(dns::Query query, bool over_tcp) {
    size_t limit = over_tcp ? dns::kMaxMessage : query.udp_size;
    auto reply = [&](uint8_t rcode) { return dns::BuildResponse(query, rcode, {}, limit); };
    if (query.opcode != 0) return reply(dns::kNotImp);
    if (query.question.klass != dns::kClassIn) return reply(dns::kRefused);
    const AllowedName* rule = FindNameRule(names_, query.question.name);
    if (rule == nullptr) return reply(dns::kNxDomain);  // never forwarded
    // IPv6 is not routed for sandboxes (docs/running.md, "DNS"), and only A answers can be
    // opened in the firewall, so every other type of an allowed name is empty.
    if (query.question.type != dns::kTypeA) return reply(dns::kNoError);
    auto forwarded = Forward(query.question, over_tcp);
    return forwarded.then([this, query = std::move(query), ports = rule->ports,
                           limit](std::optional<dns::Response> response) {
      if (!response) return dns::BuildResponse(query, dns::kServFail, {}, limit);
      return Relay(query, *response, ports, limit);
    });
  }

  // The upstream's answer cut down to the question's CNAME chain and A records, its addresses
  // allowed in the firewall (one call for the whole answer) before the sandbox can learn them.
  // The TTL handed out is capped by how long the firewall keeps them open; an answer whose
  // addresses could not be opened is SERVFAIL (the sandbox asks again later).
  Bytes Relay(const dns::Query& query, const dns::Response& response,
              const std::vector<uint16_t>& ports, size_t limit) {
    dns::Chain chain = dns::FollowChain(query.question.name, response.answers);
    uint32_t ttl = std::min(chain.ttl, kMaxTtl);  // no cache may outlive the firewall entry
    std::vector<dns::Record> records;
    std::vector<uint32_t> addrs;
    for (const dns::Record& record : chain.records) {
      if (record.type == dns::kTypeA) {
        if (IsAlwaysDenied(record.addr) || addrs.size() == kMaxAddrsPerAnswer) continue;
        addrs.push_back(record.addr);
      }
      records.push_back(record);
    }
    if (!addrs.empty()) {
      auto open_for = resolver_.sink_.AllowResolved(
          id_, addrs, ports, std::chrono::seconds(std::max(ttl, kMinTtl)));
      if (open_for.count() <= 0) return dns::BuildResponse(query, dns::kServFail, {}, limit);
      ttl = std::min<uint32_t>(ttl, static_cast<uint32_t>(open_for.count()));
    }
    for (dns::Record& record : records) record.ttl = ttl;
    return dns::BuildResponse(query, response.rcode, records, limit);
  }

  // --- to the upstreams ---------------------------------------------------------------------

  // The answer from the first upstream, or on failure or timeout from the next one (a second
  // attempt on the same one if there is only one); nullopt if neither answers in time.
  kj::Promise<std::optional<dns::Response>> Forward(const dns::Question& question, bool over_tcp) {
    const std::vector<DnsUpstream>& ups = resolver_.upstreams_;
    kj::Duration attempt = options_.upstream_timeout / 2;
    auto first = Exchange(ups[0], question, over_tcp, attempt);
    return first.then([this, question, over_tcp, attempt](std::optional<dns::Response> r)
                          -> kj::Promise<std::optional<dns::Response>> {
      if (r) return kj::mv(r);
      const std::vector<DnsUpstream>& ups = resolver_.upstreams_;
      return Exchange(ups[ups.size() > 1 ? 1 : 0], question, over_tcp, attempt);
    });
  }

  // One attempt: UDP, then TCP to the same upstream if the reply was truncated. Only NOERROR
  // and NXDOMAIN count as answers; SERVFAIL, REFUSED and the rest move on to the next upstream.
  kj::Promise<std::optional<dns::Response>> Exchange(DnsUpstream up, const dns::Question& question,
                                                     bool over_tcp, kj::Duration timeout) {
    kj::TimePoint deadline = timer_.now() + timeout;
    auto usable = [](std::optional<dns::Response> r) {
      if (r && r->rcode != dns::kNoError && r->rcode != dns::kNxDomain) r.reset();
      return r;
    };
    if (over_tcp) return TcpExchange(up, question, deadline).then(usable);
    return UdpExchange(up, question, deadline)
        .then([this, up, question, deadline](std::optional<dns::Response> r)
                  -> kj::Promise<std::optional<dns::Response>> {
          if (r && r->truncated) return TcpExchange(up, question, deadline);
          return kj::mv(r);
        })
        .then(usable);
  }

  // One datagram to `up` from a fresh socket (a fresh kernel-chosen source port) with a fresh
  // random id; connected, so the kernel already drops datagrams from any other source.
  struct UdpQuery {
    kj::AutoCloseFd fd;
    kj::Own<kj::UnixEventPort::FdObserver> observer;
    uint16_t id;
    dns::Question question;
    DnsUpstream up;
  };

  kj::Promise<std::optional<dns::Response>> UdpExchange(DnsUpstream up, dns::Question question,
                                                        kj::TimePoint deadline) {
    int fd = MakeSocket(resolver_.options_, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return std::optional<dns::Response>();
    auto q = kj::heap<UdpQuery>(UdpQuery{kj::AutoCloseFd(fd), kj::Own<kj::UnixEventPort::FdObserver>(), RandomId(), question, up});
    sockaddr_in to = Ipv4(up.addr, up.port);
    Bytes message = dns::BuildQuery(q->id, question, dns::kMaxEdnsUdpSize);
    if (connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0 ||
        send(fd, message.data(), message.size(), 0) != static_cast<ssize_t>(message.size()))
      return std::optional<dns::Response>();
    q->observer = kj::heap<kj::UnixEventPort::FdObserver>(
        resolver_.events_, fd, kj::UnixEventPort::FdObserver::OBSERVE_READ);
    auto reply = ReadUdpReply(*q);
    return reply.attach(kj::mv(q)).exclusiveJoin(
        timer_.atTime(deadline).then([] { return std::optional<dns::Response>(); }));
  }

  // Waits for the reply that matches id, source and question; anything else is ignored.
  kj::Promise<std::optional<dns::Response>> ReadUdpReply(UdpQuery& q) {
    auto buffer = kj::heapArray<uint8_t>(kUpstreamUdpBuffer);
    for (int i = 0; i < kDatagramsPerWakeup; ++i) {
      sockaddr_in from = {};
      socklen_t from_len = sizeof(from);
      ssize_t n = recvfrom(q.fd.get(), buffer.begin(), buffer.size(), MSG_TRUNC,
                           reinterpret_cast<sockaddr*>(&from), &from_len);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return q.observer->whenBecomesReadable().then([this, &q] { return ReadUdpReply(q); });
      }
      if (n < 0) return std::optional<dns::Response>();  // ECONNREFUSED: try the next one
      if (ntohl(from.sin_addr.s_addr) != q.up.addr || ntohs(from.sin_port) != q.up.port) continue;
      if (static_cast<size_t>(n) > buffer.size()) {
        // Larger than we asked for: as good as truncated; TCP gets the whole answer.
        dns::Response truncated;
        truncated.truncated = true;
        return std::optional<dns::Response>(truncated);
      }
      absl::StatusOr<dns::Response> r = dns::ParseResponse(
          absl::MakeConstSpan(buffer.begin(), static_cast<size_t>(n)), q.id, q.question);
      if (r.ok()) return std::optional<dns::Response>(*std::move(r));
    }
    return kj::evalLater([this, &q] { return ReadUdpReply(q); });
  }

  kj::Promise<std::optional<dns::Response>> TcpExchange(DnsUpstream up, dns::Question question,
                                                        kj::TimePoint deadline) {
    int fd = MakeSocket(resolver_.options_, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return std::optional<dns::Response>();
    sockaddr_in to = Ipv4(up.addr, up.port);
    uint16_t id = RandomId();
    auto connected = resolver_.io_.wrapConnectingSocketFd(
        fd, reinterpret_cast<sockaddr*>(&to), sizeof(to),
        kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP | kj::LowLevelAsyncIoProvider::ALREADY_CLOEXEC |
            kj::LowLevelAsyncIoProvider::ALREADY_NONBLOCK);
    kj::Duration left = std::max(deadline - timer_.now(), 0 * kj::SECONDS);
    auto exchange = connected.then([this, id, question, left](kj::Own<kj::AsyncIoStream> stream) {
      auto& s = *stream;
      auto sent = WriteTcpMessage(s, dns::BuildQuery(id, question, 0));
      return sent
          .then([this, &s, left] { return ReadTcpMessage(timer_, s, dns::kMaxMessage, left); })
          .then([id, question](std::optional<Bytes> reply) {
            if (!reply) return std::optional<dns::Response>();
            absl::StatusOr<dns::Response> r = dns::ParseResponse(*reply, id, question);
            if (!r.ok() || r->truncated) return std::optional<dns::Response>();
            return std::optional<dns::Response>(*std::move(r));
          })
          .attach(kj::mv(stream));
    });
    return exchange.catch_([](kj::Exception&&) { return std::optional<dns::Response>(); })
        .exclusiveJoin(timer_.atTime(deadline).then([] { return std::optional<dns::Response>(); }));
  }

  DnsResolver& resolver_;
  kj::Timer& timer_;
  const DnsResolverOptions& options_;
  const std::string id_;
  const uint32_t sandbox_addr_;
  const std::vector<AllowedName> names_;
  size_t in_flight_ = 0;
  size_t tcp_connections_ = 0;
  // Declared before its observer, so it is closed after the observer has left epoll.
  kj::AutoCloseFd udp_;
  kj::UnixEventPort::FdObserver udp_observer_;
  kj::Own<kj::ConnectionReceiver> listener_;
  LoggingErrorHandler errors_;
  // Last: destroyed first, cancelling every promise that refers to the members above.
  kj::TaskSet tasks_;
};

DnsResolver::DnsResolver(kj::UnixEventPort& events, kj::LowLevelAsyncIoProvider& io,
                         std::vector<DnsUpstream> upstreams, ResolvedAddressSink& sink,
                         DnsResolverOptions options)
    : events_(events), io_(io), upstreams_(std::move(upstreams)), sink_(sink), options_(options) {
  KJ_REQUIRE(!upstreams_.empty(), "DnsResolver needs an upstream");
}

DnsResolver::~DnsResolver() = default;

absl::Status DnsResolver::AddSandbox(const std::string& id, uint32_t host_addr,
                                     uint32_t sandbox_addr, std::vector<AllowedName> names) {
  if (sandboxes_.count(id)) return absl::AlreadyExistsError("DNS for " + id + " is served already");
  ASSIGN_OR_RETURN(kj::AutoCloseFd udp, BoundSocket(options_, SOCK_DGRAM, host_addr, options_.listen_port));
  ASSIGN_OR_RETURN(kj::AutoCloseFd tcp, BoundSocket(options_, SOCK_STREAM, host_addr, options_.listen_port));
  sandboxes_.emplace(id, kj::heap<SandboxDns>(*this, id, sandbox_addr, std::move(names),
                                              kj::mv(udp), kj::mv(tcp)));
  return absl::OkStatus();
}

void DnsResolver::RemoveSandbox(const std::string& id) { sandboxes_.erase(id); }

}  // namespace paseo::network
