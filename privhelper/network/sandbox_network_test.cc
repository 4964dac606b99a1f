#include "privhelper/network/sandbox_network.h"

#include "gtest/gtest.h"

namespace paseo::network {
namespace {

TEST(Ipv4, FormatsAndParsesStrictly) {
  EXPECT_EQ(FormatIpv4(0x0a580006), "10.88.0.6");
  EXPECT_EQ(ParseIpv4("10.88.0.6"), 0x0a580006u);
  EXPECT_EQ(ParseIpv4("255.255.255.255"), 0xffffffffu);
  for (const char* bad : {"", "10.88.0", "10.88.0.6.1", "10.88.0.256", "010.88.0.6", "10.88.0.-1",
                          "10.88.0.6 ", "a.b.c.d", "10..0.6", "0x0a.0.0.1"}) {
    EXPECT_FALSE(ParseIpv4(bad).has_value()) << bad;
  }
}

TEST(Cidr, ParsesAndRefusesHostBits) {
  auto c = ParseCidr("203.0.113.0/24");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->prefix, 24);
  EXPECT_TRUE(c->Contains(*ParseIpv4("203.0.113.77")));
  EXPECT_FALSE(c->Contains(*ParseIpv4("203.0.114.1")));
  EXPECT_EQ(c->ToString(), "203.0.113.0/24");
  auto host = ParseCidr("203.0.113.7");
  ASSERT_TRUE(host.has_value());
  EXPECT_EQ(host->prefix, 32);
  EXPECT_EQ(ParseCidr("0.0.0.0/0")->Mask(), 0u);
  for (const char* bad : {"203.0.113.1/24", "203.0.113.0/33", "203.0.113.0/", "203.0.113.0/024",
                          "/24", "203.0.113.0/24/1", "::1/128"}) {
    EXPECT_FALSE(ParseCidr(bad).has_value()) << bad;
  }
  EXPECT_TRUE(ParseCidr("10.0.0.0/8")->Overlaps(*ParseCidr("10.88.0.0/16")));
  EXPECT_FALSE(ParseCidr("10.89.0.0/16")->Overlaps(*ParseCidr("10.88.0.0/16")));
}

TEST(Endpoint, DefaultsToPort53) {
  auto e = ParseEndpoint("192.0.2.53");
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->port, 53);
  EXPECT_EQ(ParseEndpoint("192.0.2.53:5353")->port, 5353);
  for (const char* bad : {"192.0.2.53:0", "192.0.2.53:65536", "192.0.2.53:", "host:53",
                          "192.0.2.53:53:1"}) {
    EXPECT_FALSE(ParseEndpoint(bad).has_value()) << bad;
  }
}

TEST(NamePattern, LowerCaseLdhWithOptionalWildcard) {
  for (const char* good : {"api.anthropic.com", "*.example.com", "a-b.c0.io", "x.y"}) {
    EXPECT_TRUE(IsValidNamePattern(good)) << good;
  }
  for (const char* bad : {"", "com", "*.com", "Example.com", "a..b", "-a.b", "a-.b", "a_b.c",
                          "*example.com", "a.*.b", "*", "*.", "a.b.", ".a.b", "a b.c"}) {
    EXPECT_FALSE(IsValidNamePattern(bad)) << bad;
  }
  EXPECT_FALSE(IsValidNamePattern(std::string(64, 'a') + ".com"));
}

TEST(AlwaysDenied, MetadataLoopbackAndReservedButNotThePublicInternet) {
  for (const char* denied : {"0.0.0.1", "100.64.0.1", "100.100.100.200", "100.127.255.255",
                             "127.0.0.1", "127.255.255.254", "168.63.129.16", "169.254.169.254",
                             "224.0.0.251", "239.255.255.250", "240.0.0.1", "255.255.255.255"}) {
    EXPECT_TRUE(IsAlwaysDenied(*ParseIpv4(denied))) << denied;
  }
  for (const char* open : {"1.1.1.1", "100.63.255.255", "100.128.0.0", "168.63.129.17",
                           "169.253.255.255", "203.0.113.7", "223.255.255.255"}) {
    EXPECT_FALSE(IsAlwaysDenied(*ParseIpv4(open))) << open;
  }
  for (const Cidr& c : AlwaysDenied()) EXPECT_EQ(ParseCidr(c.ToString())->addr, c.addr);
}

TEST(Tag, StableShortAndDistinct) {
  EXPECT_EQ(SandboxTag("sb-1").size(), 10u);
  EXPECT_EQ(SandboxTag("sb-1"), SandboxTag("sb-1"));
  EXPECT_NE(SandboxTag("sb-1"), SandboxTag("sb-2"));
  EXPECT_EQ(HostIfname("sb-1"), "psb-" + SandboxTag("sb-1"));
  EXPECT_LE(HostIfname("sb-1").size(), 15u);  // IFNAMSIZ - 1
}

}  // namespace
}  // namespace paseo::network
