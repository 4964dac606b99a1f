// Id generation and validation; see ids.h.
#include "absl/strings/string_view.h"
#include "common/ids.h"

#include <sys/random.h>

#include <cstdint>
#include <stdexcept>

namespace paseo {

std::string NewId(absl::string_view prefix) {
  uint8_t bytes[12];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    ssize_t n = getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error("getrandom failed");
    }
    got += static_cast<size_t>(n);
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id(prefix);
  for (uint8_t b : bytes) {
    id.push_back(kHex[b >> 4]);
    id.push_back(kHex[b & 15]);
  }
  return id;
}

bool IsValidId(absl::string_view id) {
  if (id.empty() || id.size() > 64 || id[0] == '-') return false;
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace paseo
