// Secrets in the egress proxy (decision 59): a sandbox holds only a placeholder for each secret
// it was given; the proxy, terminating TLS for the hosts the secret is bound to, puts the real
// value in place of the placeholder in the one header the secret is bound to, and nowhere else.
//
//   std::vector<const BoundSecret*> bound = SecretsFor(sandbox.secrets, "api.anthropic.com");
//   std::vector<std::string> used;
//   SecretBytes head = InjectSecrets(request_head, bound, &used);  // then written upstream
//
// A placeholder in the request line, in another header, in a body, or sent to any other host
// passes unchanged. Values live in SecretBytes: memory kept out of core dumps (MADV_DONTDUMP,
// besides the process being non-dumpable), locked out of swap where RLIMIT_MEMLOCK allows, and
// wiped when freed.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace paseo::egress {

// Bytes in their own mapping: MADV_DONTDUMP, mlock'd (best effort), zeroed and unmapped when
// destroyed. Move-only.
class SecretBytes {
 public:
  SecretBytes() = default;
  explicit SecretBytes(absl::string_view bytes);
  ~SecretBytes();
  SecretBytes(SecretBytes&& other) noexcept;
  SecretBytes& operator=(SecretBytes&& other) noexcept;
  SecretBytes(const SecretBytes&) = delete;
  SecretBytes& operator=(const SecretBytes&) = delete;

  absl::string_view view() const { return {data_, size_}; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  // Appends, growing the mapping (the old one is wiped).
  void Append(absl::string_view bytes);

 private:
  void Reserve(size_t capacity);
  void Release();
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;
};

struct BoundSecret {
  std::string name;                // the registration's name, for the audit line
  std::vector<std::string> hosts;  // lower-case names it is sent to
  std::string header;              // lower-case header name it is put in
  std::string placeholder;         // what the sandbox holds instead
  std::shared_ptr<const SecretBytes> value;
};

// The secrets bound to `host` (lower case).
std::vector<const BoundSecret*> SecretsFor(const std::vector<BoundSecret>& secrets,
                                           const std::string& host);

// `head` (a complete request head that ParseRequestHead accepted: CRLF lines, no folding) with
// each secret's placeholder replaced by its value wherever it occurs in the value of a header
// named as that secret's header. `used` gets each secret put in, once.
SecretBytes InjectSecrets(absl::string_view head, const std::vector<const BoundSecret*>& secrets,
                          std::vector<std::string>* used);

}  // namespace paseo::egress
