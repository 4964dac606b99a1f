// See dns_upstreams.h.
#include "privhelper/network/dns_upstreams.h"

#include <arpa/inet.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace paseo::network {
namespace {

bool ParseIpv4(const std::string& text, uint32_t& addr) {
  in_addr a;
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return false;
  addr = ntohl(a.s_addr);
  return true;
}

}  // namespace

absl::StatusOr<DnsUpstream> ParseDnsUpstream(const std::string& text) {
  DnsUpstream up;
  std::string host = text;
  if (size_t colon = text.find(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    std::string port = text.substr(colon + 1);
    uint32_t value = 0;
    bool digits = !port.empty() && port.size() <= 5 &&
                  port.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || !absl::SimpleAtoi(port, &value) || value == 0 || value > 65535)
      return absl::InvalidArgumentError("DNS upstream \"" + text + "\": bad port");
    up.port = static_cast<uint16_t>(value);
  }
  if (!ParseIpv4(host, up.addr))
    return absl::InvalidArgumentError("DNS upstream \"" + text + "\": not an IPv4 address");
  return up;
}

std::vector<DnsUpstream> NameserversFromResolvConf(const std::string& text) {
  std::vector<DnsUpstream> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    std::vector<std::string> words =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (words.size() < 2 || words[0] != "nameserver") continue;  // also '#' and ';' comments
    DnsUpstream up;
    if (ParseIpv4(words[1], up.addr)) out.push_back(up);
  }
  return out;
}

absl::StatusOr<std::vector<DnsUpstream>> LoadDnsUpstreams(
    const std::vector<std::string>& configured, const std::string& resolv_conf) {
  std::vector<DnsUpstream> out;
  for (const std::string& entry : configured) {
    absl::StatusOr<DnsUpstream> up = ParseDnsUpstream(entry);
    if (!up.ok()) return up.status();
    out.push_back(*up);
  }
  if (configured.empty()) {
    std::ifstream in(resolv_conf);
    std::stringstream text;
    text << in.rdbuf();
    out = NameserversFromResolvConf(text.str());
    if (out.empty())
      return absl::FailedPreconditionError("no IPv4 nameserver in " + resolv_conf +
                                           " and network.dnsUpstreams is empty");
  }
  return out;
}

}  // namespace paseo::network
