// The nftables rule text of the sandbox firewall, rendered by pure functions (tested in
// firewall_rules_test.cc) and applied by Firewall (firewall.h) through libnftables.
//
// One table, `inet paseo_sandbox`, replaced whole at start. Its base chains only look at
// traffic of sandbox links (interfaces "psb-*"):
//   forward:     IPv6 from a link dropped; from a link, a jump to that sandbox's chain through
//                the verdict map `links` (anything without one dropped), before anything else
//                looks at it; into a link only established/related (nothing inbound).
//   input:       from a link, through the map `inlinks` and the sandbox's input chain, only
//                replies to Sandbox.connect and DNS (UDP/TCP 53) to that link's own host end
//                (only when the privhelper's resolver serves it);
//                everything else to the host (any of its addresses) dropped.
//   output:      to a link only established/related (the resolver's answers).
//   postrouting: the pool masqueraded when it leaves through the uplink (or any non-link).
//   prerouting:  from a link, through the map `natlinks` and the sandbox's nat chain: its
//                name-checked TCP redirected to the egress proxy (decision 58).
// Per sandbox (tag = SandboxTag(id)): chain sb_<tag> (forward), chain sb_<tag>_in (input),
// chain sb_<tag>_nat (prerouting; only with the egress proxy), set
// sb_<tag>_allow (ipv4_addr . inet_service, interval + timeout: what its resolved names opened).
// sb_<tag>: any source but the sandbox's own address dropped; always-denied destinations
// dropped (link-local and metadata, carrier-grade NAT, loopback, multicast, broadcast and
// reserved, "this network", the whole pool = other sandboxes); established accepted; the
// profile's CIDR rules; @sb_<tag>_allow; everything else dropped. sb_<tag>_in starts with the
// same source check.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "privhelper/network/sandbox_network.h"

namespace paseo::network {

inline constexpr char kTable[] = "paseo_sandbox";
// The socket mark (SO_MARK, which needs CAP_NET_ADMIN) of the privhelper's Sandbox.connect
// connections: the only traffic the host may start into a sandbox link.
inline constexpr uint32_t kInboundMark = 0x70736231;
// At most this many (address . port) entries the resolver opened are held per sandbox at once
// (the kernel refuses more; each expires with its answer's TTL): a sandbox resolving name after
// name under a wildcard rule cannot grow the host's firewall without bound. Past it, a newly
// resolved address stays closed until older ones expire (logged).
inline constexpr size_t kMaxResolvedElements = 4096;

struct CidrAllow {
  Cidr cidr;
  std::vector<uint16_t> ports;  // empty = every port
};

struct FirewallSandbox {
  std::string sandbox_id;
  std::string host_ifname;
  uint32_t host_addr = 0;
  uint32_t sandbox_addr = 0;  // the only source address its link may send from
  bool dns = false;           // port 53 on host_addr open (a resolver listens there)
  std::vector<CidrAllow> allow;
  // Name-checked egress (decision 58): when egress_port is set, the sandbox's TCP to
  // `egress_ports` (every port if egress_all_ports) is redirected to host_addr:egress_port,
  // where the egress proxy reads the name, except TCP to its own host end and to its CIDR
  // rules' destinations (address rules, unchanged).
  uint16_t egress_port = 0;
  std::vector<uint16_t> egress_ports;
  bool egress_all_ports = false;
};
// What the egress proxy's user (`uid`) may start from the host (decision 58): its DNS queries to
// `upstreams`, and connections to anything but the host's own addresses (fib type local),
// the always-denied destinations, the pool, IPv6, and (with `uplink`) other interfaces. The
// same bounds a sandbox's forwarded traffic has, enforced in the kernel for the proxy too, so
// neither a name that resolves to the host nor a compromised proxy reaches the host's
// services. One transaction: the chain `egress_out` and its jump at the head of `output`.
std::string RenderEgressUser(uint32_t uid, const std::vector<Endpoint>& upstreams, const Cidr& pool,
                             const std::string& uplink);
// The ports a profile's allowNames rules name, for FirewallSandbox's egress fields: `all` if
// any rule allows every port.
void EgressPortsOf(const std::vector<std::vector<uint16_t>>& rule_ports, std::vector<uint16_t>* ports,
                   bool* all);

// Deletes any previous table and creates the base one (one transaction; the `add table` first
// makes the delete succeed when there was none). `uplink` empty = any interface but links.
std::string RenderTable(const Cidr& pool, const std::string& uplink);
// The table's removal (clean shutdown with no sandbox left).
std::string RenderTableRemoval();
// A sandbox's chains, set and map entries, as one transaction.
std::string RenderSandbox(const FirewallSandbox& sandbox, const Cidr& pool);
// Their removal by the sandbox's tag (SandboxTag; garbage collection knows no more), as one
// transaction (fails as a whole if any piece is missing).
// `egress`: it has the nat chain too (FirewallSandbox.egress_port).
std::string RenderSandboxRemoval(const std::string& tag, bool egress = false);
// The same pieces one command each, for removing what may be partly there.
std::vector<std::string> RenderSandboxRemovalSteps(const std::string& tag, bool egress = true);
// One element of a sandbox's allow set: an address on one port, or on every port (port -1).
struct ResolvedKey {
  uint32_t addr = 0;
  int32_t port = -1;
  auto operator<=>(const ResolvedKey&) const = default;
};
// The elements an answer's `addrs` open on `ports` (empty = every port), sorted, no duplicates.
std::vector<ResolvedKey> ResolvedKeys(const std::vector<uint32_t>& addrs,
                                      const std::vector<uint16_t>& ports);
// Opens `fresh` (elements the set does not hold) and refreshes `known` (elements it may hold:
// each is replaced, so its timeout starts again) in the sandbox's allow set with `ttl`, as one
// transaction. Fresh ones are only added: the kernel's work for deleting elements added in the
// same transaction grows with the set (200 of them in a set of 4000: seconds).
std::string RenderAllowResolved(const std::string& sandbox_id,
                                const std::vector<ResolvedKey>& fresh,
                                const std::vector<ResolvedKey>& known, std::chrono::seconds ttl);
// The sandbox tags of the sb_<tag> chains in `listing` (nft's `list table` text).
std::vector<std::string> SandboxTagsIn(const std::string& listing);

std::string SandboxChain(const std::string& sandbox_id);  // sb_<tag>

}  // namespace paseo::network
