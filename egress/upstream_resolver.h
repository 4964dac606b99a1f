// The egress proxy's own name resolution: A queries to the same upstream resolvers the
// sandboxes' DNS forwarder asks (HelperNetwork.dnsUpstreams, or the host's resolv.conf), so the
// proxy dials what the name resolves to now, never an address a sandbox supplied.
//
//   UpstreamResolver resolver(io.provider->getNetwork(), io.provider->getTimer(), upstreams);
//   resolver.Resolve("api.example.com").then([](std::vector<uint32_t> addrs) { ... });
//
// Each query goes from a fresh UDP port (a random source port and id), and only a reply from
// the upstream asked, with that id and question, is read (dns::ParseResponse); a truncated reply
// is asked again over TCP. The first upstream, then the next (or the same one again) within
// `timeout` in all. NXDOMAIN, no answer or no upstream answering: no address. The CNAME chain is
// followed as the forwarder does (dns::FollowChain). An answer with addresses is kept for its
// TTL (at most kMaxCacheTtl, at most kMaxCached names): a connection to a name the proxy
// dialled a moment ago does not wait for a lookup.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <kj/async-io.h>
#include <kj/timer.h>

#include "egress/egress_proxy.h"
#include "privhelper/network/dns_upstreams.h"

namespace paseo::egress {

class UpstreamResolver final : public NameResolver {
 public:
  UpstreamResolver(kj::Network& network, kj::Timer& timer, std::vector<network::DnsUpstream> upstreams,
                   kj::Duration timeout = 2 * kj::SECONDS);
  kj::Promise<std::vector<uint32_t>> Resolve(const std::string& name) override;

  static constexpr uint32_t kMaxCacheTtl = 300;  // seconds
  static constexpr size_t kMaxCached = 1024;
  size_t lookups() const { return lookups_; }  // answers asked of an upstream (tests)

  struct Answer {
    std::vector<uint32_t> addrs;
    uint32_t ttl = 0;
  };

 private:
  // One upstream's answer, or nullopt (no usable answer in time).
  kj::Promise<std::optional<Answer>> Ask(network::DnsUpstream up, std::string name,
                                         kj::Duration timeout);
  void Keep(const std::string& name, const Answer& answer);

  struct Cached {
    std::vector<uint32_t> addrs;
    kj::TimePoint until;
  };
  std::map<std::string, Cached> cache_;
  size_t lookups_ = 0;

  kj::Network& network_;
  kj::Timer& timer_;
  std::vector<network::DnsUpstream> upstreams_;
  kj::Duration timeout_;
};

}  // namespace paseo::egress
