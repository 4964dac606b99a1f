// See firewall_rules.h.
#include "privhelper/network/firewall_rules.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace paseo::network {
namespace {

constexpr char kLinks[] = "\"psb-*\"";

std::string Prefix() { return absl::StrCat("inet ", kTable); }

std::string PortSet(const std::vector<uint16_t>& ports) {
  std::vector<uint16_t> sorted = ports;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  return absl::StrCat("{ ", absl::StrJoin(sorted, ", "), " }");
}

}  // namespace

std::string SandboxChain(const std::string& sandbox_id) {
  return absl::StrCat("sb_", SandboxTag(sandbox_id));
}

std::string RenderTable(const Cidr& pool, const std::string& uplink) {
  std::string t = Prefix();
  std::string out = absl::StrCat("add table ", t, "\n", "delete table ", t, "\n",
                                 "add table ", t, "\n");
  absl::StrAppend(&out, "add map ", t, " links { type ifname : verdict; }\n");
  absl::StrAppend(&out, "add map ", t, " inlinks { type ifname : verdict; }\n");
  absl::StrAppend(&out, "add chain ", t,
                  " forward { type filter hook forward priority filter - 10; policy accept; }\n");
  absl::StrAppend(&out, "add rule ", t, " forward iifname ", kLinks, " meta nfproto ipv6 drop\n");
  // What comes from a link is decided by that link's chain alone (its source check first), so
  // a sandbox cannot pass as another one's flow; only then what goes into a link.
  absl::StrAppend(&out, "add rule ", t, " forward iifname ", kLinks, " iifname vmap @links\n");
  absl::StrAppend(&out, "add rule ", t, " forward iifname ", kLinks, " drop\n");
  absl::StrAppend(&out, "add rule ", t, " forward oifname ", kLinks,
                  " ct state established,related accept\n");
  absl::StrAppend(&out, "add rule ", t, " forward oifname ", kLinks, " drop\n");
  absl::StrAppend(&out, "add chain ", t,
                  " input { type filter hook input priority filter - 10; policy accept; }\n");
  absl::StrAppend(&out, "add rule ", t, " input iifname ", kLinks, " meta nfproto ipv6 drop\n");
  absl::StrAppend(&out, "add rule ", t, " input iifname ", kLinks, " iifname vmap @inlinks\n");
  absl::StrAppend(&out, "add rule ", t, " input iifname ", kLinks, " drop\n");
  absl::StrAppend(&out, "add chain ", t,
                  " output { type filter hook output priority filter - 10; policy accept; }\n");
  absl::StrAppend(&out, "add rule ", t, " output oifname ", kLinks,
                  " ct state established,related accept\n");
  absl::StrAppend(&out, "add rule ", t, " output oifname ", kLinks, " meta mark ",
                  kInboundMark, " tcp flags syn ct state new accept\n");
  absl::StrAppend(&out, "add rule ", t, " output oifname ", kLinks, " drop\n");
  absl::StrAppend(&out, "add chain ", t,
                  " postrouting { type nat hook postrouting priority srcnat; policy accept; }\n");
  std::string out_if = uplink.empty() ? absl::StrCat("oifname != ", kLinks)
                                      : absl::StrCat("oifname \"", uplink, "\"");
  absl::StrAppend(&out, "add rule ", t, " postrouting ip saddr ", pool.ToString(), " ", out_if,
                  " masquerade\n");
  absl::StrAppend(&out, "add map ", t, " natlinks { type ifname : verdict; }\n");
  absl::StrAppend(&out, "add chain ", t,
                  " prerouting { type nat hook prerouting priority dstnat; policy accept; }\n");
  absl::StrAppend(&out, "add rule ", t, " prerouting iifname ", kLinks, " iifname vmap @natlinks\n");
  return out;
}

std::string RenderEgressUser(uint32_t uid, const std::vector<Endpoint>& upstreams, const Cidr& pool,
                             const std::string& uplink) {
  std::string t = Prefix();
  std::string c = absl::StrCat(t, " egress_out");
  std::string out = absl::StrCat("add chain ", c, "\n", "flush chain ", c, "\n");
  absl::StrAppend(&out, "add rule ", c, " ct state established,related accept\n");
  for (const Endpoint& u : upstreams)
    absl::StrAppend(&out, "add rule ", c, " ip daddr ", FormatIpv4(u.addr),
                    " meta l4proto { tcp, udp } th dport ", u.port, " accept\n");
  absl::StrAppend(&out, "add rule ", c, " meta nfproto ipv6 reject\n");
  absl::StrAppend(&out, "add rule ", c, " fib daddr type local reject\n");
  std::vector<Cidr> denied = AlwaysDenied();
  denied.push_back(pool);
  for (const Cidr& d : denied) absl::StrAppend(&out, "add rule ", c, " ip daddr ", d.ToString(), " reject\n");
  if (!uplink.empty()) absl::StrAppend(&out, "add rule ", c, " oifname != \"", uplink, "\" reject\n");
  absl::StrAppend(&out, "insert rule ", t, " output meta skuid ", uid, " jump egress_out\n");
  return out;
}

void EgressPortsOf(const std::vector<std::vector<uint16_t>>& rule_ports, std::vector<uint16_t>* ports,
                   bool* all) {
  *all = false;
  ports->clear();
  for (const auto& rule : rule_ports) {
    if (rule.empty()) *all = true;
    ports->insert(ports->end(), rule.begin(), rule.end());
  }
  std::sort(ports->begin(), ports->end());
  ports->erase(std::unique(ports->begin(), ports->end()), ports->end());
  if (*all) ports->clear();
}

std::string RenderTableRemoval() { return absl::StrCat("delete table ", Prefix(), "\n"); }

std::string RenderSandbox(const FirewallSandbox& sb, const Cidr& pool) {
  std::string t = Prefix();
  std::string chain = SandboxChain(sb.sandbox_id);
  std::string in = chain + "_in";
  std::string set = chain + "_allow";
  std::string out;
  absl::StrAppend(&out, "add chain ", t, " ", chain, "\n");
  absl::StrAppend(&out, "add chain ", t, " ", in, "\n");
  absl::StrAppend(&out, "add set ", t, " ", set,
                  " { type ipv4_addr . inet_service; flags interval, timeout; size ",
                  kMaxResolvedElements, "; }\n");
  // Only the sandbox's own address may send from its link: no forged source reaches the
  // host, another sandbox's flows or the NAT.
  std::string own = FormatIpv4(sb.sandbox_addr);
  absl::StrAppend(&out, "add rule ", t, " ", chain, " ip saddr != ", own, " drop\n");
  absl::StrAppend(&out, "add rule ", t, " ", in, " ip saddr != ", own, " drop\n");
  std::vector<Cidr> denied = AlwaysDenied();
  denied.push_back(pool);
  for (const Cidr& d : denied)
    absl::StrAppend(&out, "add rule ", t, " ", chain, " ip daddr ", d.ToString(), " drop\n");
  absl::StrAppend(&out, "add rule ", t, " ", chain, " ct state established,related accept\n");
  for (const auto& a : sb.allow) {
    absl::StrAppend(&out, "add rule ", t, " ", chain, " ip daddr ", a.cidr.ToString(),
                    " meta l4proto { tcp, udp }");
    if (!a.ports.empty()) absl::StrAppend(&out, " th dport ", PortSet(a.ports));
    absl::StrAppend(&out, " accept\n");
  }
  absl::StrAppend(&out, "add rule ", t, " ", chain,
                  " meta l4proto { tcp, udp } ip daddr . th dport @", set, " accept\n");
  absl::StrAppend(&out, "add rule ", t, " ", chain, " drop\n");
  // Input: replies to the privhelper's marked connections into the sandbox (Sandbox.connect),
  // and its resolver on its own host end.
  absl::StrAppend(&out, "add rule ", t, " ", in, " ct state established,related accept\n");
  if (sb.dns)
    absl::StrAppend(&out, "add rule ", t, " ", in, " ip daddr ", FormatIpv4(sb.host_addr),
                    " meta l4proto { tcp, udp } th dport 53 accept\n");
  bool egress = sb.egress_port != 0 && (sb.egress_all_ports || !sb.egress_ports.empty());
  if (egress)
    absl::StrAppend(&out, "add rule ", t, " ", in, " ip daddr ", FormatIpv4(sb.host_addr),
                    " tcp dport ", sb.egress_port, " ct state new accept\n");
  absl::StrAppend(&out, "add rule ", t, " ", in, " drop\n");
  if (egress) {
    // Name-checked TCP goes to the proxy on the link's host end; the sandbox's own host end
    // (its resolver) and its address rules' destinations are left as they are.
    std::string nat = chain + "_nat";
    absl::StrAppend(&out, "add chain ", t, " ", nat, "\n");
    absl::StrAppend(&out, "add rule ", t, " ", nat, " ip saddr != ", own, " return\n");
    absl::StrAppend(&out, "add rule ", t, " ", nat, " ip daddr ", FormatIpv4(sb.host_addr), " return\n");
    for (const auto& a : sb.allow) {
      absl::StrAppend(&out, "add rule ", t, " ", nat, " ip daddr ", a.cidr.ToString(), " meta l4proto tcp");
      if (!a.ports.empty()) absl::StrAppend(&out, " th dport ", PortSet(a.ports));
      absl::StrAppend(&out, " return\n");
    }
    absl::StrAppend(&out, "add rule ", t, " ", nat, " meta nfproto ipv4 meta l4proto tcp");
    if (!sb.egress_all_ports) absl::StrAppend(&out, " th dport ", PortSet(sb.egress_ports));
    absl::StrAppend(&out, " redirect to :", sb.egress_port, "\n");
    absl::StrAppend(&out, "add element ", t, " natlinks { \"", sb.host_ifname, "\" : jump ", nat,
                    " }\n");
  }
  absl::StrAppend(&out, "add element ", t, " links { \"", sb.host_ifname, "\" : jump ", chain,
                  " }\n");
  absl::StrAppend(&out, "add element ", t, " inlinks { \"", sb.host_ifname, "\" : jump ", in,
                  " }\n");
  return out;
}

std::vector<std::string> RenderSandboxRemovalSteps(const std::string& tag, bool egress) {
  std::string t = Prefix();
  std::string chain = absl::StrCat("sb_", tag);
  std::string ifname = absl::StrCat(kHostIfnamePrefix, tag);
  // The map entries first: a chain cannot go while a jump to it exists.
  std::vector<std::string> steps = {
      absl::StrCat("delete element ", t, " links { \"", ifname, "\" }\n"),
      absl::StrCat("delete element ", t, " inlinks { \"", ifname, "\" }\n"),
      absl::StrCat("flush chain ", t, " ", chain, "\n", "delete chain ", t, " ", chain, "\n"),
      absl::StrCat("flush chain ", t, " ", chain, "_in\n", "delete chain ", t, " ", chain,
                   "_in\n"),
      absl::StrCat("delete set ", t, " ", chain, "_allow\n"),
  };
  if (egress) {
    // The map entry before its chain, as above.
    steps.insert(steps.begin() + 2,
                 absl::StrCat("delete element ", t, " natlinks { \"", ifname, "\" }\n"));
    steps.push_back(
        absl::StrCat("flush chain ", t, " ", chain, "_nat\n", "delete chain ", t, " ", chain, "_nat\n"));
  }
  return steps;
}

std::string RenderSandboxRemoval(const std::string& tag, bool egress) {
  return absl::StrJoin(RenderSandboxRemovalSteps(tag, egress), "");
}

std::vector<ResolvedKey> ResolvedKeys(const std::vector<uint32_t>& addrs,
                                      const std::vector<uint16_t>& ports) {
  std::vector<ResolvedKey> keys;
  for (uint32_t addr : addrs) {
    if (ports.empty()) keys.push_back({addr, -1});
    for (uint16_t p : ports) keys.push_back({addr, p});
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

std::string RenderAllowResolved(const std::string& sandbox_id,
                                const std::vector<ResolvedKey>& fresh,
                                const std::vector<ResolvedKey>& known, std::chrono::seconds ttl) {
  std::string set = absl::StrCat("inet ", kTable, " ", SandboxChain(sandbox_id), "_allow");
  long seconds = std::max<long>(1, static_cast<long>(ttl.count()));
  auto element = [](const ResolvedKey& k) {
    return absl::StrCat(FormatIpv4(k.addr), " . ", k.port < 0 ? "0-65535" : absl::StrCat(k.port));
  };
  auto timed = [&](const std::vector<ResolvedKey>& keys) {
    std::vector<std::string> out;
    for (const ResolvedKey& k : keys) out.push_back(absl::StrCat(element(k), " timeout ", seconds, "s"));
    return absl::StrJoin(out, ", ");
  };
  std::string out;
  if (!fresh.empty()) absl::StrAppend(&out, "add element ", set, " { ", timed(fresh), " }\n");
  if (known.empty()) return out;
  // add (so the delete finds it), delete, add: the element comes back with a fresh timeout.
  std::vector<std::string> plain;
  for (const ResolvedKey& k : known) plain.push_back(element(k));
  absl::StrAppend(&out, "add element ", set, " { ", timed(known), " }\n", "delete element ", set,
                  " { ", absl::StrJoin(plain, ", "), " }\n", "add element ", set, " { ",
                  timed(known), " }\n");
  return out;
}

std::vector<std::string> SandboxTagsIn(const std::string& listing) {
  std::vector<std::string> tags;
  for (absl::string_view line : absl::StrSplit(listing, '\n')) {
    line = absl::StripLeadingAsciiWhitespace(line);
    if (!absl::ConsumePrefix(&line, "chain sb_")) continue;
    absl::string_view tag = line.substr(0, line.find_first_of(" {_"));
    // The forward chain's name only: sb_<tag>_in and sb_<tag>_nat are the same sandbox's.
    if (tag.size() == 10 && (line.size() == 10 || line[10] != '_')) tags.emplace_back(tag);
  }
  return tags;
}

}  // namespace paseo::network
