// The supervisor's per-sandbox DNS forwarder: the only resolver a sandbox with network mode
// "sandbox" can reach (its resolv.conf names its link's host end). It answers the names the
// sandbox's profile allows (NetworkPolicy.allowNames) by asking the upstream resolvers, tells
// the firewall the IPv4 addresses it hands out (ResolvedAddressSink) before the sandbox sees
// them, and answers everything else itself: NXDOMAIN for a name not allowed (never forwarded,
// so a sandbox cannot leak data through query names either), an empty NOERROR for AAAA and
// other types. It runs on the privhelper's kj event loop (no threads).
//
// Everything a sandbox sends is hostile: messages are parsed strictly (dns_message.h), only
// datagrams and connections from the sandbox's own address are served, and every per-sandbox
// resource is capped (queries in flight, TCP connections, message sizes, idle time), so a
// sandbox can exhaust only its own share and never delay or read another sandbox's answers.
// Upstream replies are accepted only from the upstream asked, with the query's random id and
// question, on a fresh socket (fresh source port) per query.
//
//   ASSIGN_OR_RETURN(std::vector<DnsUpstream> upstreams, LoadDnsUpstreams(configured));
//   DnsResolver dns(io.unixEventPort, *io.lowLevelProvider, upstreams, firewall);
//   RETURN_IF_ERROR(dns.AddSandbox("sb-1", link.host_addr, link.sandbox_addr,
//                                  AllowedNamesFrom(profile.getNetwork())));
//   ...
//   dns.RemoveSandbox("sb-1");  // closes its sockets, cancels its queries
#pragma once

#include <functional>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/time.h>

#include "absl/status/status.h"
#include "privhelper/network/dns_message.h"
#include "privhelper/network/dns_upstreams.h"
#include "privhelper/network/resolved_address_sink.h"
#include "schema/config.capnp.h"

namespace paseo::network {

// One NameRule of a profile: "api.example.com" (that name) or "*.example.com" (any name
// strictly below example.com), lower case, and the ports its addresses open (empty = all).
struct AllowedName {
  std::string name;
  std::vector<uint16_t> ports;
};
std::vector<AllowedName> AllowedNamesFrom(config::NetworkPolicy::Reader policy);

// The rule that allows `name` (case-insensitively), or null. A name that is not a plain host
// name (dns::IsHostname) matches nothing.
const AllowedName* FindNameRule(const std::vector<AllowedName>& rules, const dns::Name& name);

struct DnsResolverOptions {
  uint16_t listen_port = 53;                        // tests use an ephemeral one
  kj::Duration upstream_timeout = 2 * kj::SECONDS;  // per query, both attempts together
  size_t max_in_flight = 64;                        // queries per sandbox (UDP and TCP)
  size_t max_tcp_connections = 8;                   // per sandbox
  kj::Duration tcp_idle_timeout = 10 * kj::SECONDS;
  // Makes every socket (the sandbox's listeners and each upstream query's): an AF_INET socket
  // of `type` (which includes SOCK_NONBLOCK | SOCK_CLOEXEC), or -1 with errno. Empty: socket(2)
  // in the calling thread's network namespace. The privhelper serves from its control
  // namespace and makes them in the host's, where the links' host ends and the upstreams are.
  std::function<int(int type)> make_socket;
};

class DnsResolver {
 public:
  // `upstreams` must not be empty (LoadDnsUpstreams ensures it); `sink` must outlive this.
  DnsResolver(kj::UnixEventPort& events, kj::LowLevelAsyncIoProvider& io,
              std::vector<DnsUpstream> upstreams, ResolvedAddressSink& sink,
              DnsResolverOptions options = {});
  ~DnsResolver();
  DnsResolver(const DnsResolver&) = delete;
  DnsResolver& operator=(const DnsResolver&) = delete;

  // Serves sandbox `id` on UDP and TCP `host_addr`:listen_port (host byte order; bound with
  // IP_FREEBIND so the link need not be up yet), answering only queries from `sandbox_addr`.
  // An error if `id` is served already or a socket cannot be made (nothing is left open).
  absl::Status AddSandbox(const std::string& id, uint32_t host_addr, uint32_t sandbox_addr,
                          std::vector<AllowedName> names);
  // Closes `id`'s sockets and drops its queries in flight; a no-op for an unknown id.
  void RemoveSandbox(const std::string& id);

 private:
  class SandboxDns;
  friend class SandboxDns;

  kj::UnixEventPort& events_;
  kj::LowLevelAsyncIoProvider& io_;
  std::vector<DnsUpstream> upstreams_;
  ResolvedAddressSink& sink_;
  DnsResolverOptions options_;
  std::map<std::string, kj::Own<SandboxDns>> sandboxes_;
};

}  // namespace paseo::network
