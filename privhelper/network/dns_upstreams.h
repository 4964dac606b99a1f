// The resolvers the supervisor's DNS forwarder asks: HelperNetwork.dnsUpstreams from the
// config, or, when that is empty, the IPv4 nameservers of the host's /etc/resolv.conf as the
// privhelper finds them at start.
//
//   ASSIGN_OR_RETURN(std::vector<DnsUpstream> upstreams,
//                    LoadDnsUpstreams({"192.0.2.53", "198.51.100.1:5353"}));
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace paseo::network {

struct DnsUpstream {
  uint32_t addr = 0;  // host byte order
  uint16_t port = 53;
  bool operator==(const DnsUpstream& o) const { return addr == o.addr && port == o.port; }
};

// "192.0.2.53" or "192.0.2.53:5353" (dotted quad only; the port 1..65535).
absl::StatusOr<DnsUpstream> ParseDnsUpstream(const std::string& text);

// The IPv4 "nameserver" lines of a resolv.conf text, in order; IPv6 and malformed lines are
// skipped (the forwarder only speaks IPv4 to upstreams).
std::vector<DnsUpstream> NameserversFromResolvConf(const std::string& text);

// `configured` parsed, or if it is empty the nameservers of `resolv_conf`. An error if a
// configured entry is malformed or no upstream results.
absl::StatusOr<std::vector<DnsUpstream>> LoadDnsUpstreams(
    const std::vector<std::string>& configured, const std::string& resolv_conf = "/etc/resolv.conf");

}  // namespace paseo::network
