// The facts of one sandbox's network link (shared with the resolver and Sandbox.connect), and
// the small pure helpers every part of privhelper/network uses: IPv4 text, CIDRs, resolver
// addresses, name rules and the names the privhelper gives a sandbox's link and rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace paseo::network {

struct SandboxLink {
  std::string sandbox_id;
  std::string netns_path;     // <runDir>/netns/<sandbox-id>: bind-mounted netns file
  std::string host_ifname;    // "psb-" + 10 hex of sha256(sandbox id)
  uint32_t host_addr = 0;     // host end of the /30, host byte order
  uint32_t sandbox_addr = 0;  // the sandbox's address (host end + 1)
};

// "10.88.0.6" for an address in host byte order.
std::string FormatIpv4(uint32_t addr);
// Strict dotted quad: four decimal octets 0..255, no leading zeros, nothing else.
std::optional<uint32_t> ParseIpv4(absl::string_view text);

struct Cidr {
  uint32_t addr = 0;  // host byte order, no bits beyond the prefix
  int prefix = 32;
  uint32_t Mask() const { return prefix == 0 ? 0 : ~uint32_t{0} << (32 - prefix); }
  bool Contains(uint32_t a) const { return (a & Mask()) == addr; }
  bool Overlaps(const Cidr& o) const;
  std::string ToString() const;  // "203.0.113.0/24"
};
// "a.b.c.d/n" or "a.b.c.d" (a /32). nullopt if malformed or if it has host bits set.
std::optional<Cidr> ParseCidr(absl::string_view text);

// Destinations no policy opens, for the firewall (firewall_rules.h) and the resolver alike:
// "this network", carrier-grade NAT (some clouds' metadata, 100.100.100.200), loopback, Azure's
// host endpoint 168.63.129.16, link-local (cloud metadata 169.254.169.254), multicast, reserved
// and the limited broadcast. The pool (other sandboxes) is added by the firewall.
const std::vector<Cidr>& AlwaysDenied();
bool IsAlwaysDenied(uint32_t addr);

struct Endpoint {
  uint32_t addr = 0;
  uint16_t port = 53;
};
// "a.b.c.d" (port 53) or "a.b.c.d:port" (1..65535).
std::optional<Endpoint> ParseEndpoint(absl::string_view text);

// A NameRule name: lower-case LDH labels ("api.example.com"), optionally "*." in front; at
// least two labels after any "*.", each 1..63 bytes, 253 bytes in all.
bool IsValidNamePattern(absl::string_view name);

// 10 hex digits of sha256(sandbox id): a sandbox's short tag, unique enough for one host and
// short enough for an interface name (15 bytes).
std::string SandboxTag(absl::string_view sandbox_id);
// "psb-<tag>": the host end of the sandbox's veth pair.
std::string HostIfname(absl::string_view sandbox_id);
inline constexpr char kHostIfnamePrefix[] = "psb-";
// Inside the sandbox's namespace the other end is always this.
inline constexpr char kSandboxIfname[] = "eth0";

}  // namespace paseo::network
