// See sandbox_network.h.
#include "privhelper/network/sandbox_network.h"

#include <openssl/sha.h>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace paseo::network {
namespace {

// A decimal number without sign or leading zeros, at most `max`.
std::optional<uint32_t> ParseDecimal(absl::string_view s, uint32_t max) {
  if (s.empty() || s.size() > 5 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  uint32_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<uint32_t>(c - '0');
  }
  if (v > max) return std::nullopt;
  return v;
}

bool IsLdhLabel(absl::string_view label) {
  if (label.empty() || label.size() > 63) return false;
  if (label.front() == '-' || label.back() == '-') return false;
  for (char c : label) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return true;
}

}  // namespace

std::string FormatIpv4(uint32_t addr) {
  return absl::StrCat(addr >> 24, ".", (addr >> 16) & 0xff, ".", (addr >> 8) & 0xff, ".",
                      addr & 0xff);
}

std::optional<uint32_t> ParseIpv4(absl::string_view text) {
  std::vector<absl::string_view> parts = absl::StrSplit(text, '.');
  if (parts.size() != 4) return std::nullopt;
  uint32_t addr = 0;
  for (absl::string_view p : parts) {
    auto octet = ParseDecimal(p, 255);
    if (!octet) return std::nullopt;
    addr = (addr << 8) | *octet;
  }
  return addr;
}

bool Cidr::Overlaps(const Cidr& o) const {
  int shorter = std::min(prefix, o.prefix);
  uint32_t mask = shorter == 0 ? 0 : ~uint32_t{0} << (32 - shorter);
  return (addr & mask) == (o.addr & mask);
}

std::string Cidr::ToString() const { return absl::StrCat(FormatIpv4(addr), "/", prefix); }

std::optional<Cidr> ParseCidr(absl::string_view text) {
  Cidr cidr;
  size_t slash = text.find('/');
  auto addr = ParseIpv4(text.substr(0, slash));
  if (!addr) return std::nullopt;
  cidr.addr = *addr;
  if (slash != absl::string_view::npos) {
    auto prefix = ParseDecimal(text.substr(slash + 1), 32);
    if (!prefix) return std::nullopt;
    cidr.prefix = static_cast<int>(*prefix);
  }
  if ((cidr.addr & ~cidr.Mask()) != 0) return std::nullopt;  // host bits beyond the prefix
  return cidr;
}

const std::vector<Cidr>& AlwaysDenied() {
  static const auto* denied = new std::vector<Cidr>{
      {0x00000000, 8},   // 0.0.0.0/8
      {0x64400000, 10},  // 100.64.0.0/10
      {0x7F000000, 8},   // 127.0.0.0/8
      {0xA83F8110, 32},  // 168.63.129.16/32
      {0xA9FE0000, 16},  // 169.254.0.0/16
      {0xE0000000, 4},   // 224.0.0.0/4
      {0xF0000000, 4},   // 240.0.0.0/4
  };
  return *denied;
}

bool IsAlwaysDenied(uint32_t addr) {
  for (const Cidr& c : AlwaysDenied())
    if (c.Contains(addr)) return true;
  return false;
}

std::optional<Endpoint> ParseEndpoint(absl::string_view text) {
  Endpoint e;
  size_t colon = text.find(':');
  auto addr = ParseIpv4(text.substr(0, colon));
  if (!addr) return std::nullopt;
  e.addr = *addr;
  if (colon != absl::string_view::npos) {
    auto port = ParseDecimal(text.substr(colon + 1), 65535);
    if (!port || *port == 0) return std::nullopt;
    e.port = static_cast<uint16_t>(*port);
  }
  return e;
}

bool IsValidNamePattern(absl::string_view name) {
  if (absl::StartsWith(name, "*.")) name.remove_prefix(2);
  if (name.empty() || name.size() > 253) return false;
  std::vector<absl::string_view> labels = absl::StrSplit(name, '.');
  if (labels.size() < 2) return false;
  for (absl::string_view l : labels) {
    if (!IsLdhLabel(l)) return false;
  }
  return true;
}

std::string SandboxTag(absl::string_view sandbox_id) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(sandbox_id.data()), sandbox_id.size(), md);
  std::string hex;
  for (int i = 0; i < 5; ++i) absl::StrAppend(&hex, absl::Hex(md[i], absl::kZeroPad2));
  return hex;
}

std::string HostIfname(absl::string_view sandbox_id) {
  return absl::StrCat(kHostIfnamePrefix, SandboxTag(sandbox_id));
}

}  // namespace paseo::network
