// See egress_proxy.h.
#include "egress/egress_proxy.h"

#include <arpa/inet.h>
#include <linux/netfilter_ipv4.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>

#include <kj/compat/tls.h>
#include <kj/debug.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "egress/cert_authority.h"
#include "egress/client_hello.h"
#include "egress/http_head.h"
#include "egress/secrets.h"

namespace paseo::egress {
namespace {

constexpr size_t kReadCap = std::max(kMaxClientHello, kMaxRequestHead);
constexpr uint8_t kTlsHandshake = 22;
constexpr size_t kCopyBuffer = 131072;  // per direction of a connection

std::string Ipv4(uint32_t addr) {
  return absl::StrCat(addr >> 24, ".", (addr >> 16) & 255, ".", (addr >> 8) & 255, ".", addr & 255);
}

std::optional<std::pair<uint32_t, uint16_t>> OriginalDestination(kj::AsyncIoStream& conn) {
  sockaddr_in dst = {};
  kj::uint len = sizeof(dst);
  try {
    conn.getsockopt(SOL_IP, SO_ORIGINAL_DST, &dst, &len);
  } catch (const kj::Exception&) {
    return std::nullopt;  // not a redirected connection (no conntrack entry)
  }
  if (dst.sin_family != AF_INET) return std::nullopt;
  return std::make_pair(ntohl(dst.sin_addr.s_addr), ntohs(dst.sin_port));
}

// The client's stream with the bytes the proxy already read from it (the ClientHello) given
// back first, for the TLS server that terminates it.
class ReplayStream final : public kj::AsyncIoStream {
 public:
  ReplayStream(kj::Own<kj::AsyncIoStream> inner, std::vector<uint8_t> first)
      : inner_(kj::mv(inner)), first_(std::move(first)) {}

  kj::Promise<size_t> tryRead(void* buffer, size_t min_bytes, size_t max_bytes) override {
    if (taken_ == first_.size()) return inner_->tryRead(buffer, min_bytes, max_bytes);
    size_t n = std::min(max_bytes, first_.size() - taken_);
    memcpy(buffer, first_.data() + taken_, n);
    taken_ += n;
    if (n >= min_bytes) return n;
    return inner_->tryRead(static_cast<uint8_t*>(buffer) + n, min_bytes - n, max_bytes - n)
        .then([n](size_t more) { return n + more; });
  }
  kj::Promise<void> write(const void* buffer, size_t size) override {
    return inner_->write(buffer, size);
  }
  kj::Promise<void> write(kj::ArrayPtr<const kj::ArrayPtr<const kj::byte>> pieces) override {
    return inner_->write(pieces);
  }
  kj::Promise<void> whenWriteDisconnected() override { return inner_->whenWriteDisconnected(); }
  void shutdownWrite() override { inner_->shutdownWrite(); }
  void abortRead() override { inner_->abortRead(); }
  void getsockopt(int level, int option, void* value, kj::uint* length) override {
    inner_->getsockopt(level, option, value, length);
  }
  void setsockopt(int level, int option, const void* value, kj::uint length) override {
    inner_->setsockopt(level, option, value, length);
  }
  void getsockname(sockaddr* addr, kj::uint* length) override { inner_->getsockname(addr, length); }
  void getpeername(sockaddr* addr, kj::uint* length) override { inner_->getpeername(addr, length); }

 private:
  kj::Own<kj::AsyncIoStream> inner_;
  std::vector<uint8_t> first_;
  size_t taken_ = 0;
};

// The methods a terminated connection may use.
bool IsPlainMethod(const std::string& m) {
  for (const char* ok : {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
    if (m == ok) return true;
  return false;
}

// Why a refused connection was refused: the audit's reason and the end of the connection.
struct Refusal {
  std::string reason;
};

}  // namespace

bool RuleNames(const EgressRule& rule, const std::string& name) {
  return absl::StartsWith(rule.name, "*.")
             ? name.size() > rule.name.size() - 1 &&
                   absl::EndsWith(name, absl::string_view(rule.name).substr(1))
             : name == rule.name;
}

const EgressRule* FindEgressRule(const std::vector<EgressRule>& rules, const std::string& name,
                                 uint16_t port) {
  for (const EgressRule& rule : rules) {
    if (!RuleNames(rule, name)) continue;
    if (rule.ports.empty() || std::find(rule.ports.begin(), rule.ports.end(), port) != rule.ports.end())
      return &rule;
  }
  return nullptr;
}

// One sandbox's listener and connections. Destroying it cancels every connection (their
// promises live in tasks_) and closes the listener.
class EgressProxy::Served {
 public:
  Served(EgressProxy& proxy, EgressSandbox sandbox, kj::Own<kj::ConnectionReceiver> listener)
      : proxy_(proxy), sandbox_(std::move(sandbox)), listener_(kj::mv(listener)), tasks_(errors_) {}
  size_t connections() const { return connections_; }

  // Makes the CA and the TLS server for its secrets' hosts (if any), then starts accepting.
  absl::StatusOr<std::string> Start() {
    std::vector<std::string> hosts;
    for (const BoundSecret& s : sandbox_.secrets)
      for (const std::string& h : s.hosts)
        if (std::find(hosts.begin(), hosts.end(), h) == hosts.end()) hosts.push_back(h);
    std::string ca_pem;
    if (!hosts.empty()) {
      auto ca = CertAuthority::Create(sandbox_.id, hosts);
      if (!ca.ok()) return ca.status();
      ca_ = std::move(*ca);
      ca_pem = ca_->certificate_pem();
      auto first = ca_->LeafFor(hosts[0]);
      if (!first.ok()) return first.status();
      kj::TlsContext::Options options;
      default_key_ = kj::heap<kj::TlsKeypair>(kj::TlsKeypair{
          kj::TlsPrivateKey((*first)->key_pem.c_str()),
          kj::TlsCertificate((*first)->certificate_pem.c_str())});
      options.defaultKeypair = *default_key_;
      options.sniCallback = sni_;
      sni_.served = this;
      server_tls_ = kj::heap<kj::TlsContext>(kj::mv(options));
    }
    tasks_.add(Accept());
    return ca_pem;
  }

 private:
  struct ErrorHandler : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&&) override {}  // a connection's end, already audited
  };

  // The leaf for the name a terminated ClientHello gave (only secrets' hosts get here), parsed
  // once (OpenSSL 3's PEM decoding on every connection put 3.1 ms on the bench's terminated
  // first byte; kept, 1.9 ms).
  struct Sni : kj::TlsSniCallback {
    Served* served = nullptr;
    std::map<std::string, kj::TlsKeypair> parsed;
    kj::Maybe<kj::TlsKeypair> getKey(kj::StringPtr hostname) override {
      std::string host = absl::AsciiStrToLower(hostname.cStr());
      auto it = parsed.find(host);
      if (it == parsed.end()) {
        auto leaf = served->ca_->LeafFor(host);
        if (!leaf.ok()) return nullptr;
        it = parsed
                 .emplace(host, kj::TlsKeypair{kj::TlsPrivateKey((*leaf)->key_pem.c_str()),
                                               kj::TlsCertificate((*leaf)->certificate_pem.c_str())})
                 .first;
      }
      return kj::TlsKeypair{it->second.privateKey, it->second.certificate};  // references counted
    }
  };

  // One connection's state, owned by its promise chain.
  struct Conn {
    kj::Own<kj::AsyncIoStream> client;
    kj::Own<kj::AsyncIoStream> upstream;
    std::vector<uint8_t> buffer = std::vector<uint8_t>(kReadCap);
    size_t buffered = 0;  // bytes of `buffer` read from the client and not yet passed on
    EgressEvent event;
    uint32_t original_addr = 0;
    bool tls = false;
    // TLS to a secret's host: terminated here, then re-made to the host (decision 59).
    std::vector<const BoundSecret*> bound;
    bool terminated = false;
    bool sandbox_verified = false;   // its handshake with the proxy completed
    bool upstream_verified = false;  // the proxy's with the host completed
    std::optional<uint16_t> host_port;  // plain HTTP: the first request's Host port
    // Relay's two directions and its end: both ended, or either failed.
    kj::Promise<void> up = kj::READY_NOW, down = kj::READY_NOW;
    kj::Own<kj::PromiseFulfiller<void>> ended;
    int open = 2;
  };

  kj::Promise<void> Accept() {
    return listener_->accept().then(
        [this](kj::Own<kj::AsyncIoStream> stream) {
          // A connection reset before it was accepted has no peer (ENOTCONN): it is dropped,
          // and the loop goes on (an exception here would end this sandbox's accepting).
          sockaddr_in peer = {};
          kj::uint len = sizeof(peer);
          if (kj::runCatchingExceptions([&] {
                stream->getpeername(reinterpret_cast<sockaddr*>(&peer), &len);
              }) != nullptr)
            return Accept();
          EgressEvent event;
          event.sandbox_id = sandbox_.id;
          if (peer.sin_family != AF_INET || ntohl(peer.sin_addr.s_addr) != sandbox_.sandbox_addr) {
            event.reason = "not from the sandbox's address";
            proxy_.audit_(event);
          } else if (connections_ >= proxy_.options_.max_connections) {
            event.reason = absl::StrCat("more than ", proxy_.options_.max_connections,
                                        " connections at once");
            proxy_.audit_(event);
          } else {
            ++connections_;
            auto conn = kj::heap<Conn>();
            conn->client = kj::mv(stream);
            conn->event = std::move(event);
            Conn& c = *conn;
            tasks_.add(Serve(c).attach(kj::mv(conn), kj::defer([this] { --connections_; })));
          }
          return Accept();
        },
        [this](kj::Exception&& e) {
          // accept(2) failing (EMFILE, ENOBUFS) must not end this sandbox's egress for good.
          KJ_LOG(WARNING, "egress: accept failed", sandbox_.id.c_str(), e.getDescription());
          return proxy_.timer_.afterDelay(100 * kj::MILLISECONDS).then([this] { return Accept(); });
        });
  }

  void Audit(Conn& c, bool allowed, std::string reason) {
    c.event.allowed = allowed;
    c.event.reason = std::move(reason);
    proxy_.audit_(c.event);
  }

  kj::Promise<void> Serve(Conn& c) {
    auto original = proxy_.options_.original_destination
                        ? proxy_.options_.original_destination(*c.client)
                        : OriginalDestination(*c.client);
    if (!original) {
      Audit(c, false, "no original destination");
      return kj::READY_NOW;
    }
    c.original_addr = original->first;
    c.event.port = original->second;
    // The first byte within first_byte_timeout, the whole head within head_timeout.
    auto first = proxy_.timer_.timeoutAfter(proxy_.options_.first_byte_timeout,
                                            c.client->tryRead(c.buffer.data(), 1, kReadCap));
    auto head = first.then([this, &c](size_t n) { return ReadHead(c, n); });
    return proxy_.timer_.timeoutAfter(proxy_.options_.head_timeout, kj::mv(head))
        .then(
            [this, &c](std::optional<Refusal> refused) -> kj::Promise<void> {
              if (refused) {
                Audit(c, false, refused->reason);
                return kj::READY_NOW;
              }
              return Dial(c);
            },
            [this, &c](kj::Exception&& e) -> kj::Promise<void> {
              Audit(c, false,
                    e.getType() == kj::Exception::Type::OVERLOADED
                        ? "named no host in time"
                        : "the connection failed before naming a host");
              return kj::READY_NOW;
            });
  }

  // Reads until the first bytes name a host (or cannot); `n` bytes just arrived.
  kj::Promise<std::optional<Refusal>> ReadHead(Conn& c, size_t n) {
    if (n == 0) return std::optional<Refusal>(Refusal{"closed before naming a host"});
    c.buffered += n;
    auto bytes = absl::MakeConstSpan(c.buffer.data(), c.buffered);
    c.tls = bytes[0] == kTlsHandshake;
    std::string name;
    if (c.tls) {
      auto hello = ParseClientHello(bytes);
      if (!hello.ok()) return std::optional<Refusal>(Refusal{std::string(hello.status().message())});
      if (!hello->has_value()) return More(c);
      name = (*hello)->server_name;
      if (name.empty()) return std::optional<Refusal>(Refusal{"the ClientHello names no server"});
    } else {
      auto head = ParseRequestHead(bytes);
      if (!head.ok()) return std::optional<Refusal>(Refusal{std::string(head.status().message())});
      if (!head->has_value()) return More(c);
      name = (*head)->host;
      c.host_port = (*head)->port;
      if ((*head)->upgrade)
        return std::optional<Refusal>(Refusal{"an Upgrade is not proxied on plain HTTP"});
      if (c.host_port && *c.host_port != c.event.port)
        return std::optional<Refusal>(Refusal{absl::StrCat("Host names port ", *c.host_port,
                                                           ", the connection is to ", c.event.port)});
    }
    c.event.name = name;
    if (FindEgressRule(sandbox_.rules, name, c.event.port) == nullptr)
      return std::optional<Refusal>(
          Refusal{absl::StrCat("no allowNames rule allows ", name, " on port ", c.event.port)});
    // Terminated only on secrets_port (443): see EgressOptions.
    if (c.tls && server_tls_ && c.event.port == proxy_.options_.secrets_port) {
      c.bound = SecretsFor(sandbox_.secrets, name);
      for (const BoundSecret* s : c.bound) c.event.secrets.push_back(s->name);
    }
    return std::optional<Refusal>();
  }

  kj::Promise<std::optional<Refusal>> More(Conn& c) {
    if (c.buffered == kReadCap)
      return std::optional<Refusal>(Refusal{"the first bytes are longer than the proxy reads"});
    return c.client->tryRead(c.buffer.data() + c.buffered, 1, kReadCap - c.buffered)
        .then([this, &c](size_t n) { return ReadHead(c, n); });
  }

  // Resolves the name itself and connects to one of its addresses: the one the sandbox asked
  // for if the name has it (the sandbox's own DNS answer), else the first.
  kj::Promise<void> Dial(Conn& c) {
    auto resolved = proxy_.resolver_.Resolve(c.event.name).catch_([](kj::Exception&&) {
      return std::vector<uint32_t>{};  // audited below as resolving to nothing
    });
    return resolved
        .then([this, &c](std::vector<uint32_t> addrs) -> kj::Promise<void> {
          addrs.erase(std::remove_if(addrs.begin(), addrs.end(),
                                     [this](uint32_t a) { return Denied(a); }),
                      addrs.end());
          if (addrs.empty()) {
            Audit(c, false, absl::StrCat(c.event.name, " resolves to no address the proxy dials"));
            return kj::READY_NOW;
          }
          uint32_t addr = addrs[0];
          if (std::find(addrs.begin(), addrs.end(), c.original_addr) != addrs.end())
            addr = c.original_addr;
          c.event.upstream = absl::StrCat(Ipv4(addr), ":", c.event.port);
          auto connected = proxy_.io_.getNetwork()
                               .parseAddress(Ipv4(addr), c.event.port)
                               .then([](kj::Own<kj::NetworkAddress> a) { return a->connect(); });
          return proxy_.timer_.timeoutAfter(proxy_.options_.connect_timeout, kj::mv(connected))
              .then(
                  [this, &c](kj::Own<kj::AsyncIoStream> upstream) -> kj::Promise<void> {
                    c.upstream = kj::mv(upstream);
                    if (!c.bound.empty()) return Terminate(c);
                    Audit(c, true, "");
                    return Relay(c);
                  },
                  [this, &c](kj::Exception&&) -> kj::Promise<void> {
                    Audit(c, false, absl::StrCat("could not connect to ", c.event.upstream));
                    return kj::READY_NOW;
                  });
        });
  }

  // TLS to a secret's host: the sandbox's handshake with this sandbox's CA (its ClientHello
  // given back first), then the proxy's own to the host, verified against the host's name; each
  // within head_timeout. Then request by request, as plain HTTP is.
  kj::Promise<void> Terminate(Conn& c) {
    std::vector<uint8_t> hello(c.buffer.begin(), c.buffer.begin() + c.buffered);
    c.buffered = 0;
    auto client = kj::heap<ReplayStream>(kj::mv(c.client), std::move(hello));
    // Both at once, the sandbox's first: its ServerHello goes out before the proxy's own
    // ClientHello to the host, and the host's round trip and the proxy's check of its
    // certificate overlap the sandbox's share of its handshake (strace of the bench's
    // terminated first byte: done one after the other, the host's handshake came first).
    // Nothing is sent to the host but that handshake until the sandbox's has completed too.
    auto server = server_tls_->wrapServer(kj::mv(client))
                      .then([&c](kj::Own<kj::AsyncIoStream> inner) {
                        c.client = kj::mv(inner);
                        c.sandbox_verified = true;
                      })
                      .eagerlyEvaluate(nullptr);
    auto upstream = proxy_.upstream_tls_->wrapClient(kj::mv(c.upstream), c.event.name)
                        .then([&c](kj::Own<kj::AsyncIoStream> s) {
                          c.upstream_verified = true;
                          return kj::mv(s);
                        })
                        .eagerlyEvaluate(nullptr);
    auto handshakes = server.then([upstream = kj::mv(upstream)]() mutable { return kj::mv(upstream); });
    return proxy_.timer_.timeoutAfter(proxy_.options_.head_timeout, kj::mv(handshakes))
        .then(
            [this, &c](kj::Own<kj::AsyncIoStream> upstream) -> kj::Promise<void> {
              c.upstream = kj::mv(upstream);
              c.terminated = true;
              Audit(c, true, "");
              return Relay(c);
            },
            [this, &c](kj::Exception&& e) -> kj::Promise<void> {
              // Which side failed (both run at once).
              std::string why;
              if (e.getType() == kj::Exception::Type::OVERLOADED)
                why = "the TLS handshakes did not complete in time";
              else if (c.sandbox_verified && !c.upstream_verified)
                why = absl::StrCat(c.event.name, "'s TLS handshake or certificate failed: ",
                                   e.getDescription().cStr());
              else if (c.upstream_verified)
                why = "the sandbox's TLS handshake with the proxy failed";
              else
                why = absl::StrCat("the TLS handshakes failed: ", e.getDescription().cStr());
              Audit(c, false, why);
              return kj::READY_NOW;
            });
  }

  bool Denied(uint32_t addr) const {
    return proxy_.options_.denied ? proxy_.options_.denied(addr) : false;
  }

  // Both directions until both have ended, or until either fails. Each runs on its own
  // (kj 0.9's joinPromises of the two never saw a branch's failure here).
  kj::Promise<void> Relay(Conn& c) {
    auto ended = kj::newPromiseAndFulfiller<void>();
    c.ended = kj::mv(ended.fulfiller);
    c.up = (c.tls && !c.terminated ? PassOn(c) : ForwardRequests(c))
               .then([&c] { Ended(c, false); }, [&c](kj::Exception&&) { Ended(c, true); })
               .eagerlyEvaluate(nullptr);
    c.down = Copy(*c.upstream, *c.client)
                 .then([&c] { Ended(c, false); }, [&c](kj::Exception&&) { Ended(c, true); })
                 .eagerlyEvaluate(nullptr);
    return kj::mv(ended.promise);
  }
  static void Ended(Conn& c, bool failed) {
    if ((failed || --c.open == 0) && c.ended->isWaiting()) c.ended->fulfill();
  }

  // Everything `from` sends, to `to`, then its end (kj 0.9's pumpTo between two sockets did
  // not see the end of the stream here). One buffer per direction, for the connection's life.
  static kj::Promise<void> Copy(kj::AsyncIoStream& from, kj::AsyncIoStream& to) {
    auto buffer = kj::heapArray<uint8_t>(kCopyBuffer);
    uint8_t* data = buffer.begin();  // the array moves into attach(); its bytes stay put
    return CopyLoop(from, to, data).attach(kj::mv(buffer));
  }
  static kj::Promise<void> CopyLoop(kj::AsyncIoStream& from, kj::AsyncIoStream& to, uint8_t* data) {
    return from.tryRead(data, 1, kCopyBuffer).then([&from, &to, data](size_t n) -> kj::Promise<void> {
      if (n == 0) {
        to.shutdownWrite();
        return kj::READY_NOW;
      }
      return to.write(data, n).then([&from, &to, data] { return CopyLoop(from, to, data); });
    });
  }
  // `amount` bytes of `from` to `to`: true if all came, false at an early end.
  static kj::Promise<bool> Copy(kj::AsyncIoStream& from, kj::AsyncIoStream& to, uint64_t amount) {
    auto buffer = kj::heapArray<uint8_t>(kCopyBuffer);
    uint8_t* data = buffer.begin();
    return CopyLoop(from, to, data, amount).attach(kj::mv(buffer));
  }
  static kj::Promise<bool> CopyLoop(kj::AsyncIoStream& from, kj::AsyncIoStream& to, uint8_t* data,
                                    uint64_t amount) {
    if (amount == 0) return true;
    size_t want = static_cast<size_t>(std::min<uint64_t>(amount, kCopyBuffer));
    return from.tryRead(data, 1, want).then([&from, &to, data, amount](size_t n) -> kj::Promise<bool> {
      if (n == 0) return false;
      return to.write(data, n).then([&from, &to, data, rest = amount - n] {
        return CopyLoop(from, to, data, rest);
      });
    });
  }

  // TLS: the hello and whatever followed it, then everything as it comes.
  kj::Promise<void> PassOn(Conn& c) {
    return c.upstream->write(c.buffer.data(), c.buffered).then([&c] {
      c.buffered = 0;
      return Copy(*c.client, *c.upstream);
    });
  }

  // Plain HTTP: request by request, each head checked again (the same host and port as the
  // first) and its body passed on as framed, so no request goes out unread.
  kj::Promise<void> ForwardRequests(Conn& c) {
    auto head = ParseRequestHead(absl::MakeConstSpan(c.buffer.data(), c.buffered));
    if (!head.ok()) return Cut(c, std::string(head.status().message()));
    if (!head->has_value()) {
      if (c.buffered == kReadCap) return Cut(c, "a request head longer than the proxy reads");
      return c.client->tryRead(c.buffer.data() + c.buffered, 1, kReadCap - c.buffered)
          .then([this, &c](size_t n) -> kj::Promise<void> {
            if (n == 0) {
              if (c.buffered > 0) return Cut(c, "closed inside a request head");
              c.upstream->shutdownWrite();
              return kj::READY_NOW;
            }
            c.buffered += n;
            return ForwardRequests(c);
          });
    }
    const RequestHead& h = **head;
    // Terminated TLS: the Host the SNI named, without a port or with the connection's.
    bool same_port = c.terminated ? !h.port || *h.port == c.event.port : h.port == c.host_port;
    if (h.host != c.event.name || !same_port)
      return Cut(c, absl::StrCat("a later request names ", h.host, " on a connection to ", c.event.name));
    if (h.upgrade) return Cut(c, "an Upgrade is not proxied where requests are checked");
    // Where a secret may be put in, no method whose answer echoes the request (TRACE) or that
    // turns the connection into a tunnel.
    if (c.terminated && !IsPlainMethod(h.method))
      return Cut(c, absl::StrCat("method ", h.method, " is not proxied to a secret's host"));
    size_t head_size = h.head_size;
    bool chunked = h.chunked;
    uint64_t length = h.content_length;
    kj::Promise<void> sent = nullptr;
    if (c.terminated) {
      std::vector<std::string> used;
      auto injected = kj::heap<SecretBytes>(InjectSecrets(
          absl::string_view(reinterpret_cast<const char*>(c.buffer.data()), head_size), c.bound,
          &used));
      const SecretBytes& bytes = *injected;
      sent = c.upstream->write(bytes.data(), bytes.size()).attach(kj::mv(injected)).then([&c, head_size] {
        memmove(c.buffer.data(), c.buffer.data() + head_size, c.buffered - head_size);
        c.buffered -= head_size;
      });
    } else {
      sent = Send(c, head_size);
    }
    return sent.then([this, &c, chunked, length]() -> kj::Promise<void> {
      if (chunked) return ForwardChunked(c, kj::heap<ChunkedBody>());
      return ForwardLength(c, length);
    });
  }

  // Passes on the first `n` buffered bytes and keeps the rest.
  kj::Promise<void> Send(Conn& c, size_t n) {
    return c.upstream->write(c.buffer.data(), n).then([&c, n] {
      memmove(c.buffer.data(), c.buffer.data() + n, c.buffered - n);
      c.buffered -= n;
    });
  }

  kj::Promise<void> ForwardLength(Conn& c, uint64_t remaining) {
    size_t from_buffer = static_cast<size_t>(std::min<uint64_t>(remaining, c.buffered));
    return Send(c, from_buffer).then([this, &c, rest = remaining - from_buffer]() -> kj::Promise<void> {
      if (rest == 0) return ForwardRequests(c);
      return Copy(*c.client, *c.upstream, rest).then([this, &c](bool whole) -> kj::Promise<void> {
        if (!whole) return Cut(c, "closed inside a request body");
        return ForwardRequests(c);
      });
    });
  }

  kj::Promise<void> ForwardChunked(Conn& c, kj::Own<ChunkedBody> body) {
    auto took = body->Feed(absl::MakeConstSpan(c.buffer.data(), c.buffered));
    if (!took.ok()) return Cut(c, std::string(took.status().message()));
    bool done = body->done();
    return Send(c, *took).then([this, &c, done, body = kj::mv(body)]() mutable -> kj::Promise<void> {
      if (done) return ForwardRequests(c);
      return c.client->tryRead(c.buffer.data(), 1, kReadCap)
          .then([this, &c, body = kj::mv(body)](size_t n) mutable -> kj::Promise<void> {
            if (n == 0) return Cut(c, "closed inside a chunked body");
            c.buffered = n;
            return ForwardChunked(c, kj::mv(body));
          });
    });
  }

  // Ends a connection that was allowed at first: audited, and both directions end.
  kj::Promise<void> Cut(Conn& c, std::string reason) {
    Audit(c, false, std::move(reason));
    return KJ_EXCEPTION(DISCONNECTED, "egress: request refused");
  }

  EgressProxy& proxy_;
  EgressSandbox sandbox_;
  kj::Own<kj::ConnectionReceiver> listener_;
  std::unique_ptr<CertAuthority> ca_;
  Sni sni_;
  kj::Own<kj::TlsKeypair> default_key_;
  kj::Own<kj::TlsContext> server_tls_;
  size_t connections_ = 0;
  ErrorHandler errors_;
  kj::TaskSet tasks_;  // last: destroyed first, cancelling every connection
};

EgressProxy::EgressProxy(kj::AsyncIoProvider& io, kj::Timer& timer, NameResolver& resolver,
                         std::function<void(const EgressEvent&)> audit, EgressOptions options)
    : io_(io), timer_(timer), resolver_(resolver), audit_(std::move(audit)), options_(std::move(options)) {}

EgressProxy::~EgressProxy() = default;

absl::StatusOr<std::string> EgressProxy::AddSandbox(EgressSandbox sandbox,
                                                    kj::Own<kj::ConnectionReceiver> listener) {
  if (sandboxes_.count(sandbox.id))
    return absl::AlreadyExistsError(absl::StrCat("egress: ", sandbox.id, " is served already"));
  for (const BoundSecret& s : sandbox.secrets) {
    if (s.placeholder.empty() || s.header.empty() || s.value == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("egress: secret ", s.name, " is incomplete"));
    for (const std::string& h : s.hosts) {
      bool allowed = false;
      for (const EgressRule& r : sandbox.rules) allowed |= RuleNames(r, h);
      if (!allowed)
        return absl::InvalidArgumentError(
            absl::StrCat("egress: secret ", s.name, "'s host ", h, " is allowed by no rule"));
    }
  }
  if (!sandbox.secrets.empty() && !upstream_tls_) {
    kj::TlsContext::Options options;
    options.useSystemTrustStore = options_.upstream_system_trust;
    for (const std::string& pem : options_.upstream_trusted_pem)
      upstream_trusted_.add(kj::TlsCertificate(pem.c_str()));
    options.trustedCertificates = upstream_trusted_.asPtr();
    upstream_tls_ = kj::heap<kj::TlsContext>(kj::mv(options));
  }
  std::string id = sandbox.id;
  auto served = kj::heap<Served>(*this, std::move(sandbox), kj::mv(listener));
  auto started = served->Start();
  if (!started.ok()) return started.status();
  sandboxes_.emplace(id, kj::mv(served));
  return started;
}

void EgressProxy::RemoveSandbox(const std::string& id) { sandboxes_.erase(id); }

size_t EgressProxy::connections(const std::string& id) const {
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? 0 : it->second->connections();
}

}  // namespace paseo::egress
