// Fuzzes the runtime's reading of what Paseo sends it (runtime/protocol.h): the lifecycle
// request on stdin, the spawn envelope and the control frames on fd 3, each under both protocol
// versions, and the strict JSON reader beneath them. The first byte picks the version and the
// message kind; the rest is one message. Checks that a parse never crashes and never accepts
// what the contract forbids: text that is not UTF-8, or anything after the one JSON value.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "absl/strings/string_view.h"
#include "runtime/protocol.h"
#include "runtime/strict_json.h"

namespace {

void Check(bool ok) {
  if (!ok) abort();
}

// RFC 3629 UTF-8, without overlong forms or surrogates.
bool ValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    auto c = static_cast<uint8_t>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t n;
    uint32_t cp;
    if ((c >> 5) == 6) {
      n = 1, cp = c & 0x1f;
    } else if ((c >> 4) == 14) {
      n = 2, cp = c & 0x0f;
    } else if ((c >> 3) == 30) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (s.size() - i <= n) return false;
    for (size_t k = 1; k <= n; ++k) {
      auto cc = static_cast<uint8_t>(s[i + k]);
      if ((cc >> 6) != 2) return false;
      cp = cp << 6 | (cc & 0x3f);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
        cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
      return false;
    i += n + 1;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > paseo::runtime::kMaxMessageBytes) return 0;
  absl::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  paseo::runtime::UseProtocolVersion(data[0] & 1 ? 2 : 1);
  switch ((data[0] >> 1) % 4) {
    case 0: {
      auto parsed = paseo::runtime::ParsedJson::Parse(text);
      if (parsed.ok()) Check(ValidUtf8(text));
      break;
    }
    case 1:
      if (paseo::runtime::ParseLifecycleRequest(text).ok()) Check(ValidUtf8(text));
      break;
    case 2:
      if (paseo::runtime::ParseSpawnEnvelope(text).ok()) Check(ValidUtf8(text));
      break;
    case 3:
      if (paseo::runtime::ParseControl(text).ok()) Check(ValidUtf8(text));
      break;
  }
  return 0;
}
