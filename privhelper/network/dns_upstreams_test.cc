// Upstream resolver lists: config entries and the host's resolv.conf.
#include "privhelper/network/dns_upstreams.h"

#include <fstream>

#include "gtest/gtest.h"

namespace paseo::network {
namespace {

TEST(DnsUpstreamsTest, ParsesAddressAndPort) {
  auto plain = ParseDnsUpstream("192.0.2.53");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->addr, 0xC0000235u);
  EXPECT_EQ(plain->port, 53);
  auto port = ParseDnsUpstream("192.0.2.53:5353");
  ASSERT_TRUE(port.ok());
  EXPECT_EQ(port->port, 5353);
  for (const char* bad : {"", "192.0.2", "192.0.2.256", "example.com", "::1", "192.0.2.53:",
                          "192.0.2.53:0", "192.0.2.53:65536", "192.0.2.53:+53", "192.0.2.53:5x",
                          " 192.0.2.53", "[::1]:53", "192.0.2.53:53:53"}) {
    EXPECT_FALSE(ParseDnsUpstream(bad).ok()) << bad;
  }
}

TEST(DnsUpstreamsTest, ResolvConfIpv4NameserversInOrder) {
  std::string text =
      "# generated\n"
      "search example.com\n"
      "nameserver 192.0.2.1\n"
      "  nameserver\t198.51.100.7   # trailing words are ignored\n"
      "nameserver 2001:db8::1\n"
      "; nameserver 203.0.113.9\n"
      "nameserver\n"
      "nameserver bogus\n"
      "options edns0\n"
      "nameserver 203.0.113.5";
  auto ups = NameserversFromResolvConf(text);
  ASSERT_EQ(ups.size(), 3u);
  EXPECT_EQ(ups[0], (DnsUpstream{0xC0000201, 53}));
  EXPECT_EQ(ups[1], (DnsUpstream{0xC6336407, 53}));
  EXPECT_EQ(ups[2], (DnsUpstream{0xCB007105, 53}));
}

TEST(DnsUpstreamsTest, ConfiguredListWinsElseResolvConf) {
  std::string path = std::string(getenv("TEST_TMPDIR")) + "/resolv.conf";
  std::ofstream(path) << "nameserver 192.0.2.9\n";
  auto configured = LoadDnsUpstreams({"198.51.100.1:5353"}, path);
  ASSERT_TRUE(configured.ok());
  EXPECT_EQ(*configured, (std::vector<DnsUpstream>{{0xC6336401, 5353}}));
  auto from_file = LoadDnsUpstreams({}, path);
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(*from_file, (std::vector<DnsUpstream>{{0xC0000209, 53}}));
  EXPECT_FALSE(LoadDnsUpstreams({"nonsense"}, path).ok());
  std::ofstream(path) << "nameserver ::1\n";
  EXPECT_FALSE(LoadDnsUpstreams({}, path).ok()) << "no IPv4 upstream at all";
  EXPECT_FALSE(LoadDnsUpstreams({}, path + ".missing").ok());
}

}  // namespace
}  // namespace paseo::network
