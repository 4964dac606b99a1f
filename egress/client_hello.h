// The first thing a sandbox sends on a TLS connection, read before anything reaches the
// outside: the ClientHello's server name (SNI) and offered protocols (ALPN), which the egress
// proxy checks against the profile's allowNames before it dials that name itself.
//
//   absl::StatusOr<std::optional<ClientHello>> hello = ParseClientHello(first_bytes);
//   if (!hello.ok()) refuse(hello.status().message());  // malformed: never passed on
//   else if (!*hello) read_more();                         // a record or the message is cut
//   else check((*hello)->server_name);                     // "" when the hello names none
//
// Everything here comes from an untrusted sandbox. The parse is strict (RFC 8446 4.1.2 and
// 4.2, RFC 6066 3, RFC 7301 3.1): every length must agree with its container, an extension may
// appear once, the server_name list holds exactly one host_name, which must be a DNS host name
// (an IP literal or a name with a trailing dot is refused, not matched). An encrypted ClientHello
// (ECH, or the older ESNI) is refused: the name it hides is the one an ECH-enabled CDN serves. The message may span
// several handshake records (large post-quantum key shares do) but never more than
// kMaxClientHello bytes; nothing but handshake records may come before it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace paseo::egress {

// The most bytes of records a ClientHello may take: ample for today's browsers and TLS
// libraries (about 1.8 KiB with an X25519MLKEM768 key share), and the proxy's buffer bound.
inline constexpr size_t kMaxClientHello = 16384;

struct ClientHello {
  std::string server_name;        // lower case; empty if the hello has no server_name
  std::vector<std::string> alpn;  // in the client's order; empty if none offered
  size_t record_bytes = 0;        // bytes of `data` the records holding the message took
};

// nullopt: the bytes so far are a valid start, and more are needed. An error (InvalidArgument,
// with a stable reason): not a TLS ClientHello, or a malformed one, or over kMaxClientHello, or
// one with ECH.
absl::StatusOr<std::optional<ClientHello>> ParseClientHello(absl::Span<const uint8_t> data);

// True if `name` is a DNS host name as the proxy accepts one: 1..253 bytes of dot-separated
// labels, each 1..63 bytes of letters, digits and inner hyphens, at least two labels, the last
// not all digits (so no IPv4 literal), no trailing dot. Case is not looked at.
bool IsHostName(const std::string& name);

}  // namespace paseo::egress
