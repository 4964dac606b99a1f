// See secrets.h.
#include "egress/secrets.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"

namespace paseo::egress {

SecretBytes::SecretBytes(absl::string_view bytes) { Append(bytes); }

SecretBytes::~SecretBytes() { Release(); }

SecretBytes::SecretBytes(SecretBytes&& other) noexcept
    : data_(other.data_), size_(other.size_), mapped_(other.mapped_) {
  other.data_ = nullptr;
  other.size_ = other.mapped_ = 0;
}

SecretBytes& SecretBytes::operator=(SecretBytes&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = other.data_;
    size_ = other.size_;
    mapped_ = other.mapped_;
    other.data_ = nullptr;
    other.size_ = other.mapped_ = 0;
  }
  return *this;
}

void SecretBytes::Release() {
  if (data_ == nullptr) return;
  explicit_bzero(data_, mapped_);
  munlock(data_, mapped_);
  munmap(data_, mapped_);
  data_ = nullptr;
  size_ = mapped_ = 0;
}

void SecretBytes::Reserve(size_t capacity) {
  if (capacity <= mapped_) return;
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t want = (std::max(capacity, mapped_ * 2) + page - 1) / page * page;
  void* p = mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  madvise(p, want, MADV_DONTDUMP);
  mlock(p, want);  // best effort: RLIMIT_MEMLOCK may refuse, the mapping stays out of dumps
  char* next = static_cast<char*>(p);
  if (size_ > 0) memcpy(next, data_, size_);
  size_t size = size_;
  Release();
  data_ = next;
  size_ = size;
  mapped_ = want;
}

void SecretBytes::Append(absl::string_view bytes) {
  if (bytes.empty()) return;
  Reserve(size_ + bytes.size());
  memcpy(data_ + size_, bytes.data(), bytes.size());
  size_ += bytes.size();
}

std::vector<const BoundSecret*> SecretsFor(const std::vector<BoundSecret>& secrets,
                                           const std::string& host) {
  std::vector<const BoundSecret*> out;
  for (const BoundSecret& s : secrets)
    if (std::find(s.hosts.begin(), s.hosts.end(), host) != s.hosts.end()) out.push_back(&s);
  return out;
}

SecretBytes InjectSecrets(absl::string_view head, const std::vector<const BoundSecret*>& secrets,
                          std::vector<std::string>* used) {
  SecretBytes out;
  size_t line_start = 0;
  bool request_line = true;
  while (line_start < head.size()) {
    size_t end = head.find("\r\n", line_start);
    if (end == absl::string_view::npos) end = head.size();
    size_t next = std::min(head.size(), end + 2);
    absl::string_view line = head.substr(line_start, end - line_start);
    size_t colon = line.find(':');
    const BoundSecret* bound = nullptr;
    if (!request_line && colon != absl::string_view::npos) {
      absl::string_view name = line.substr(0, colon);
      for (const BoundSecret* s : secrets) {
        if (absl::EqualsIgnoreCase(name, s->header)) {
          // One header may carry several secrets' placeholders; each is replaced below.
          bound = s;
          break;
        }
      }
    }
    if (bound == nullptr) {
      out.Append(head.substr(line_start, next - line_start));
    } else {
      out.Append(line.substr(0, colon + 1));
      absl::string_view value = line.substr(colon + 1);
      while (!value.empty()) {
        const BoundSecret* found = nullptr;
        size_t at = absl::string_view::npos;
        for (const BoundSecret* s : secrets) {
          if (!absl::EqualsIgnoreCase(line.substr(0, colon), s->header) || s->placeholder.empty())
            continue;
          size_t pos = value.find(s->placeholder);
          if (pos < at) {
            at = pos;
            found = s;
          }
        }
        if (found == nullptr) {
          out.Append(value);
          break;
        }
        out.Append(value.substr(0, at));
        out.Append(found->value->view());
        if (std::find(used->begin(), used->end(), found->name) == used->end())
          used->push_back(found->name);
        value.remove_prefix(at + found->placeholder.size());
      }
      out.Append(head.substr(end, next - end));
    }
    request_line = false;
    line_start = next;
  }
  return out;
}

}  // namespace paseo::egress
