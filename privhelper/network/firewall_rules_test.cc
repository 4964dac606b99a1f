#include "privhelper/network/firewall_rules.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace paseo::network {
namespace {

const Cidr kPool = *ParseCidr("10.88.0.0/16");

FirewallSandbox Sandbox() {
  FirewallSandbox sb;
  sb.sandbox_id = "sb-1";
  sb.host_ifname = HostIfname("sb-1");
  sb.host_addr = *ParseIpv4("10.88.0.1");
  sb.sandbox_addr = *ParseIpv4("10.88.0.2");
  sb.dns = true;
  sb.allow = {{*ParseCidr("203.0.113.10/32"), {443, 80, 80}}, {*ParseCidr("198.51.100.0/24"), {}}};
  return sb;
}

// The position of `needle` in `text` (npos fails the test).
size_t At(const std::string& text, const std::string& needle) {
  size_t pos = text.find(needle);
  EXPECT_NE(pos, std::string::npos) << "missing: " << needle << "\nin:\n" << text;
  return pos;
}

TEST(FirewallRules, TableReplacesAnyPreviousOneAtomically) {
  std::string t = RenderTable(kPool, "");
  EXPECT_TRUE(absl::StartsWith(t, "add table inet paseo_sandbox\ndelete table inet paseo_sandbox\n"
                                  "add table inet paseo_sandbox\n"));
  // Nothing goes into a link but answers; IPv6 from a link never passes.
  EXPECT_LT(At(t, "forward oifname \"psb-*\" ct state established,related accept"),
            At(t, "forward oifname \"psb-*\" drop"));
  // What comes from a link meets its own chain (and its source check) before any accept of
  // established traffic: a sandbox cannot inject into another's flows by forging a source.
  EXPECT_LT(At(t, "forward iifname \"psb-*\" drop"),
            At(t, "forward oifname \"psb-*\" ct state established,related accept"));
  EXPECT_EQ(t.find("input iifname \"psb-*\" ct state"), std::string::npos);
  At(t, "forward iifname \"psb-*\" meta nfproto ipv6 drop");
  At(t, "input iifname \"psb-*\" meta nfproto ipv6 drop");
  // A link without its own chain passes nothing, forwarded or to the host.
  EXPECT_LT(At(t, "forward iifname \"psb-*\" iifname vmap @links"),
            At(t, "forward iifname \"psb-*\" drop"));
  EXPECT_LT(At(t, "input iifname \"psb-*\" iifname vmap @inlinks"),
            At(t, "input iifname \"psb-*\" drop"));
  EXPECT_LT(At(t, "output oifname \"psb-*\" ct state established,related accept"),
            At(t, "output oifname \"psb-*\" drop"));
  At(t, "postrouting ip saddr 10.88.0.0/16 oifname != \"psb-*\" masquerade");
  At(RenderTable(kPool, "eth1"), "postrouting ip saddr 10.88.0.0/16 oifname \"eth1\" masquerade");
}

TEST(FirewallRules, SandboxChainDeniesFirstThenAllowsThenDrops) {
  std::string r = RenderSandbox(Sandbox(), kPool);
  std::string chain = "sb_" + SandboxTag("sb-1");
  size_t first_allow = At(r, chain + " ip daddr 203.0.113.10/32 meta l4proto { tcp, udp } th dport { 80, 443 } accept");
  // The source check comes first in both chains.
  size_t source = At(r, chain + " ip saddr != 10.88.0.2 drop\n");
  EXPECT_LT(source, At(r, chain + " ip daddr 0.0.0.0/8 drop"));
  EXPECT_LT(source, At(r, chain + " ct state established,related accept"));
  size_t in_source = At(r, chain + "_in ip saddr != 10.88.0.2 drop\n");
  EXPECT_LT(in_source, At(r, chain + "_in ct state established,related accept"));
  for (const char* denied : {"169.254.0.0/16", "127.0.0.0/8", "224.0.0.0/4", "240.0.0.0/4",
                             "0.0.0.0/8", "100.64.0.0/10", "168.63.129.16/32", "10.88.0.0/16"}) {
    EXPECT_LT(At(r, absl::StrCat(chain, " ip daddr ", denied, " drop")), first_allow) << denied;
  }
  At(r, chain + " ip daddr 198.51.100.0/24 meta l4proto { tcp, udp } accept");
  size_t learned = At(r, chain + " meta l4proto { tcp, udp } ip daddr . th dport @" + chain +
                              "_allow accept");
  EXPECT_LT(first_allow, learned);
  size_t drop = At(r, "add rule inet paseo_sandbox " + chain + " drop\n");
  EXPECT_LT(learned, drop);
  At(r, "add set inet paseo_sandbox " + chain +
            "_allow { type ipv4_addr . inet_service; flags interval, timeout; size 4096; }");
  // To the host: DNS on its own host end only, then nothing.
  size_t dns = At(r, chain + "_in ip daddr 10.88.0.1 meta l4proto { tcp, udp } th dport 53 accept");
  EXPECT_LT(dns, At(r, chain + "_in drop"));
  At(r, "links { \"" + HostIfname("sb-1") + "\" : jump " + chain + " }");
  // Without a resolver port 53 is as closed as the rest (no other host service answers there).
  FirewallSandbox no_dns = Sandbox();
  no_dns.dns = false;
  EXPECT_EQ(RenderSandbox(no_dns, kPool).find("dport 53"), std::string::npos);
  At(r, "inlinks { \"" + HostIfname("sb-1") + "\" : jump " + chain + "_in }");
}

TEST(FirewallRules, RemovalTakesMapEntriesBeforeChains) {
  std::string tag = SandboxTag("sb-1");
  std::string r = RenderSandboxRemoval(tag);
  EXPECT_LT(At(r, "delete element inet paseo_sandbox links { \"psb-" + tag + "\" }"),
            At(r, "delete chain inet paseo_sandbox sb_" + tag + "\n"));
  EXPECT_LT(At(r, "delete element inet paseo_sandbox inlinks"),
            At(r, "delete chain inet paseo_sandbox sb_" + tag + "_in"));
  At(r, "delete set inet paseo_sandbox sb_" + tag + "_allow");
  EXPECT_EQ(r.find("natlinks"), std::string::npos) << "a sandbox without egress has no nat chain";
  // With the egress proxy: its nat map entry before its nat chain. The steps (for what may be
  // partly there) always include them.
  std::string e = RenderSandboxRemoval(tag, /*egress=*/true);
  EXPECT_LT(At(e, "delete element inet paseo_sandbox natlinks { \"psb-" + tag + "\" }"),
            At(e, "delete chain inet paseo_sandbox sb_" + tag + "_nat"));
  EXPECT_EQ(RenderSandboxRemovalSteps(tag).size(), 7u);
  EXPECT_EQ(RenderSandboxRemovalSteps(tag, false).size(), 5u);
}

// Decision 58: the name rules' TCP goes to the proxy; the resolver on the host end, the CIDR
// rules' destinations and other protocols do not; the proxy's port is open on the host end only.
TEST(FirewallRules, NameCheckedTcpIsRedirectedToTheEgressProxy) {
  FirewallSandbox sb = Sandbox();
  EXPECT_EQ(RenderSandbox(sb, kPool).find("redirect"), std::string::npos) << "no proxy, no redirect";
  sb.egress_port = 15001;
  EgressPortsOf({{443}, {80, 443}}, &sb.egress_ports, &sb.egress_all_ports);
  EXPECT_EQ(sb.egress_ports, (std::vector<uint16_t>{80, 443}));
  EXPECT_FALSE(sb.egress_all_ports);
  std::string r = RenderSandbox(sb, kPool);
  std::string nat = "inet paseo_sandbox " + SandboxChain("sb-1") + "_nat";
  size_t own = At(r, nat + " ip saddr != 10.88.0.2 return");
  size_t host_end = At(r, nat + " ip daddr 10.88.0.1 return");
  size_t cidr = At(r, nat + " ip daddr 203.0.113.10/32 meta l4proto tcp th dport { 80, 443 } return");
  size_t redirect = At(r, nat + " meta nfproto ipv4 meta l4proto tcp th dport { 80, 443 } redirect to :15001");
  EXPECT_LT(own, redirect);
  EXPECT_LT(host_end, redirect);
  EXPECT_LT(cidr, redirect);
  At(r, "add element inet paseo_sandbox natlinks { \"" + sb.host_ifname + "\" : jump " + SandboxChain("sb-1") + "_nat }");
  size_t accept = At(r, "_in ip daddr 10.88.0.1 tcp dport 15001 ct state new accept");
  EXPECT_LT(accept, At(r, "_in drop"));
  // A rule of every port: all its TCP.
  EgressPortsOf({{443}, {}}, &sb.egress_ports, &sb.egress_all_ports);
  EXPECT_TRUE(sb.egress_all_ports);
  At(RenderSandbox(sb, kPool), nat + " meta nfproto ipv4 meta l4proto tcp redirect to :15001");
  At(RenderTable(kPool, ""), "prerouting iifname \"psb-*\" iifname vmap @natlinks");
}

// The egress proxy's own connections (review): its DNS upstreams, then never the host's own
// addresses, the always-denied ones, the pool or IPv6; only through the uplink when one is set.
TEST(FirewallRules, TheEgressUserReachesNeitherTheHostNorTheDeniedAddresses) {
  std::string r = RenderEgressUser(995, {{*ParseIpv4("203.0.113.53"), 53}}, kPool, "eth1");
  std::string c = "inet paseo_sandbox egress_out";
  size_t dns = At(r, c + " ip daddr 203.0.113.53 meta l4proto { tcp, udp } th dport 53 accept");
  size_t local = At(r, c + " fib daddr type local reject");
  EXPECT_LT(dns, local);
  EXPECT_LT(At(r, c + " ct state established,related accept"), local);
  At(r, c + " meta nfproto ipv6 reject");
  At(r, c + " ip daddr 169.254.0.0/16 reject");
  At(r, c + " ip daddr 127.0.0.0/8 reject");
  At(r, c + " ip daddr 10.88.0.0/16 reject");
  At(r, c + " oifname != \"eth1\" reject");
  At(r, "insert rule inet paseo_sandbox output meta skuid 995 jump egress_out");
  EXPECT_EQ(RenderEgressUser(995, {}, kPool, "").find("oifname"), std::string::npos);
}

TEST(FirewallRules, AllowResolvedRefreshesTheTimeout) {
  std::string set = "inet paseo_sandbox sb_" + SandboxTag("sb-1") + "_allow";
  std::string r = RenderAllowResolved(
      "sb-1", {}, ResolvedKeys({*ParseIpv4("203.0.113.7")}, {443, 80}), std::chrono::seconds(300));
  EXPECT_EQ(r, "add element " + set + " { 203.0.113.7 . 80 timeout 300s, 203.0.113.7 . 443 timeout 300s }\n"
               "delete element " + set + " { 203.0.113.7 . 80, 203.0.113.7 . 443 }\n"
               "add element " + set + " { 203.0.113.7 . 80 timeout 300s, 203.0.113.7 . 443 timeout 300s }\n");
  At(RenderAllowResolved("sb-1", {}, ResolvedKeys({*ParseIpv4("203.0.113.7")}, {}),
                         std::chrono::seconds(60)),
     "203.0.113.7 . 0-65535 timeout 60s");
}

TEST(FirewallRules, OneAnswerIsOneTransactionOfEveryAddressAndPort) {
  uint32_t a = *ParseIpv4("203.0.113.7"), b = *ParseIpv4("198.51.100.1");
  std::vector<ResolvedKey> keys = ResolvedKeys({a, b, a}, {443, 80, 443});
  EXPECT_EQ(keys, (std::vector<ResolvedKey>{{b, 80}, {b, 443}, {a, 80}, {a, 443}}))
      << "sorted, duplicates dropped";
  EXPECT_EQ(ResolvedKeys({a}, {}), (std::vector<ResolvedKey>{{a, -1}}));
  std::string r = RenderAllowResolved("sb-1", keys, {}, std::chrono::seconds(30));
  EXPECT_EQ(r, "add element inet paseo_sandbox sb_" + SandboxTag("sb-1") +
                   "_allow { 198.51.100.1 . 80 timeout 30s, 198.51.100.1 . 443 timeout 30s, "
                   "203.0.113.7 . 80 timeout 30s, 203.0.113.7 . 443 timeout 30s }\n")
      << "fresh elements are only added";
  r = RenderAllowResolved("sb-1", {{b, 80}}, {{a, 443}}, std::chrono::seconds(30));
  EXPECT_EQ(At(r, "add element"), 0u);
  At(r, "{ 198.51.100.1 . 80 timeout 30s }\nadd element");
  At(r, "delete element inet paseo_sandbox sb_" + SandboxTag("sb-1") + "_allow { 203.0.113.7 . 443 }");
  EXPECT_EQ(r.find("198.51.100.1", At(r, "delete")), std::string::npos);
}

TEST(FirewallRules, TagsFromAListing) {
  std::string a = SandboxTag("a"), b = SandboxTag("b");
  std::string listing = "table inet paseo_sandbox {\n\tmap links {\n\t}\n\tchain forward {\n\t}\n"
                        "\tchain sb_" + a + " {\n\t\tdrop\n\t}\n\tchain sb_" + a + "_in {\n\t}\n"
                        "\tchain sb_" + b + "_in {\n\t}\n}\n";
  EXPECT_EQ(SandboxTagsIn(listing), std::vector<std::string>{a});
}

}  // namespace
}  // namespace paseo::network
