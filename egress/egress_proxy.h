// The egress proxy's connections: every TCP connection a sandbox makes to an allowNames rule's
// port is redirected here (decision 58), read until it names where it is going (the TLS
// ClientHello's server name, or each plain-HTTP request's Host), checked against the sandbox's
// rules, and only then dialled, by name: the proxy resolves the name itself and connects to
// one of its addresses, never to an address the sandbox chose. So an address shared by many
// names (a CDN's) opens only the allowed name, and a ClientHello that names nothing or another
// name is refused before a byte reaches the outside.
//
//   EgressProxy proxy(io, timer, resolver, audit, options);
//   RETURN_IF_ERROR(proxy.AddSandbox({"sb-1", sandbox_addr, rules}, kj::mv(listener)));
//   proxy.RemoveSandbox("sb-1");  // closes its listener and ends its connections
//
// Everything a sandbox sends is hostile: connections only from the sandbox's own address,
// at most max_connections at once per sandbox, the first byte within first_byte_timeout and
// the whole ClientHello or request head within head_timeout, each at most kMaxClientHello /
// kMaxRequestHead bytes. Plain HTTP is checked request by request (http_head.h frames each
// body), and a request that names another host than the first ends the connection.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <kj/async-io.h>
#include <kj/compat/tls.h>
#include <kj/timer.h>
#include <kj/vector.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "egress/secrets.h"

namespace paseo::egress {

// One allowNames rule: "api.example.com" (that name) or "*.example.com" (any name strictly
// below), lower case, and its ports (empty = every port).
struct EgressRule {
  std::string name;
  std::vector<uint16_t> ports;
};

// True if `rule` names `name` (lower case), on whatever port.
bool RuleNames(const EgressRule& rule, const std::string& name);

// The rule allowing `name` (lower case) on `port`, or null.
const EgressRule* FindEgressRule(const std::vector<EgressRule>& rules, const std::string& name,
                                 uint16_t port);

struct EgressSandbox {
  std::string id;
  uint32_t sandbox_addr = 0;  // host byte order: the only peer accepted
  std::vector<EgressRule> rules;
  // Secrets for hosts its rules allow (decision 59): TLS to such a host on port 443
  // (EgressOptions::secrets_port) is terminated here with the sandbox's own CA and re-made to the host,
  // verified, and each request's bound header gets the value in place of the placeholder.
  std::vector<BoundSecret> secrets;
};

// Resolves a name for the proxy: IPv4 addresses in host byte order (empty if none).
class NameResolver {
 public:
  virtual ~NameResolver() = default;
  virtual kj::Promise<std::vector<uint32_t>> Resolve(const std::string& name) = 0;
};

// What happened to one connection, for the audit log (never a secret or a payload).
struct EgressEvent {
  std::string sandbox_id;
  std::string name;        // what it named ("" if it named nothing)
  uint16_t port = 0;       // the port it connected to
  bool allowed = false;
  std::string reason;      // why refused, or "" when allowed
  std::string upstream;    // "a.b.c.d:port" dialled, when allowed
  // The secrets bound to the name, when the proxy terminated its TLS to put them in (their
  // names only, never a value).
  std::vector<std::string> secrets;
};

struct EgressOptions {
  kj::Duration first_byte_timeout = 10 * kj::SECONDS;
  kj::Duration head_timeout = 10 * kj::SECONDS;
  kj::Duration connect_timeout = 10 * kj::SECONDS;
  size_t max_connections = 256;  // per sandbox, at once
  // The destination the sandbox asked for (its port picks the rule): SO_ORIGINAL_DST of the
  // redirected connection. Tests give their own.
  std::function<std::optional<std::pair<uint32_t, uint16_t>>(kj::AsyncIoStream&)> original_destination;
  // Addresses never dialled whatever a name resolves to (network::AlwaysDenied and the
  // sandboxes' pool). Tests that serve on loopback allow it.
  std::function<bool(uint32_t addr)> denied;
  // Who a terminated connection's upstream must prove to be: the system's trust store and
  // these PEM certificates (an operator's own CA, a test's).
  bool upstream_system_trust = true;
  // The one port whose TLS to a secret's host is terminated (and the value put in): HTTPS's,
  // so the value never goes to another service of the same name (an echo or debug port a
  // rule also allows). Tests serving on another port set theirs.
  uint16_t secrets_port = 443;
  std::vector<std::string> upstream_trusted_pem;
};

class EgressProxy {
 public:
  EgressProxy(kj::AsyncIoProvider& io, kj::Timer& timer, NameResolver& resolver,
              std::function<void(const EgressEvent&)> audit, EgressOptions options = {});
  ~EgressProxy();
  EgressProxy(const EgressProxy&) = delete;
  EgressProxy& operator=(const EgressProxy&) = delete;

  // Serves `sandbox` on `listener` (a listening TCP socket, non-blocking). With secrets, it
  // makes the sandbox's CA (cert_authority.h) and returns its certificate (PEM), else "". An
  // error if the id is served already or a secret's host is none its rules allow.
  absl::StatusOr<std::string> AddSandbox(EgressSandbox sandbox,
                                         kj::Own<kj::ConnectionReceiver> listener);
  // Closes its listener and ends its connections; a no-op for an unknown id.
  void RemoveSandbox(const std::string& id);
  // Its connections now (tests and bounds).
  size_t connections(const std::string& id) const;

 private:
  class Served;
  kj::AsyncIoProvider& io_;
  kj::Timer& timer_;
  NameResolver& resolver_;
  std::function<void(const EgressEvent&)> audit_;
  EgressOptions options_;
  kj::Own<kj::TlsContext> upstream_tls_;  // made at the first sandbox with secrets
  kj::Vector<kj::TlsCertificate> upstream_trusted_;
  std::map<std::string, kj::Own<Served>> sandboxes_;
};

}  // namespace paseo::egress
