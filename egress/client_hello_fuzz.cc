// Fuzzes ParseClientHello with what a sandbox may send first on a TLS port. Checks what the
// proxy relies on: an accepted hello's name is a host name in lower case, its records lie
// within the input, and a prefix of an accepted input never fails (a slow client is not a
// malformed one); nothing is read past the input (ASan).
#include <cstdint>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "egress/client_hello.h"

namespace {
void Check(bool ok) {
  if (!ok) abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto span = absl::MakeConstSpan(data, size);
  auto hello = paseo::egress::ParseClientHello(span);
  if (!hello.ok() || !hello->has_value()) return 0;
  const paseo::egress::ClientHello& h = **hello;
  Check(h.record_bytes > 0 && h.record_bytes <= size &&
        h.record_bytes <= paseo::egress::kMaxClientHello);
  if (!h.server_name.empty()) {
    Check(paseo::egress::IsHostName(h.server_name));
    Check(absl::AsciiStrToLower(h.server_name) == h.server_name);
  }
  for (const auto& p : h.alpn) Check(!p.empty() && p.size() <= 255);
  // Any shorter input is a start that asks for more, or (cut inside a record's length) the same.
  size_t cut = h.record_bytes / 2;
  auto prefix = paseo::egress::ParseClientHello(span.subspan(0, cut));
  Check(prefix.ok() && !prefix->has_value());
  return 0;
}
