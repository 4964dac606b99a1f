// See http_head.h.
#include "egress/http_head.h"

#include <algorithm>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "egress/client_hello.h"

namespace paseo::egress {
namespace {

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed HTTP request: ", why));
}

// RFC 9110 5.6.2.
bool IsTokenChar(unsigned char c) {
  return absl::ascii_isalnum(c) || absl::string_view("!#$%&'*+-.^_`|~").find(static_cast<char>(c)) !=
                                       absl::string_view::npos;
}
bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (!IsTokenChar(static_cast<unsigned char>(c))) return false;
  return true;
}
// A header value's bytes: visible, space, tab and obs-text; no controls.
bool IsFieldValue(absl::string_view s) {
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  return true;
}

struct Authority {
  std::string host;
  std::optional<uint16_t> port;
  bool operator==(const Authority&) const = default;
};
absl::StatusOr<Authority> ParseAuthority(absl::string_view text) {
  Authority a;
  absl::string_view host = text;
  size_t colon = text.rfind(':');
  if (colon != absl::string_view::npos) {
    host = text.substr(0, colon);
    absl::string_view digits = text.substr(colon + 1);
    uint32_t port = 0;
    if (digits.empty() || digits.size() > 5 || !absl::SimpleAtoi(digits, &port) || port == 0 ||
        port > 65535 || !absl::c_all_of(digits, [](char c) { return absl::ascii_isdigit(c); }))
      return Malformed("bad port in the host");
    a.port = static_cast<uint16_t>(port);
  }
  if (!IsHostName(std::string(host))) return Malformed("the host is not a DNS host name");
  a.host = absl::AsciiStrToLower(host);
  return a;
}

// Bytes that can never start or be part of a request head: refused as soon as seen, so a
// sandbox speaking TLS or binary to a plain-HTTP port is not kept waiting for a blank line.
absl::Status CheckPrefix(absl::string_view data) {
  size_t method_end = data.find(' ');
  absl::string_view method = data.substr(0, method_end);
  for (char c : method)
    if (!IsTokenChar(static_cast<unsigned char>(c))) return Malformed("not a request line");
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] == '\0') return Malformed("a NUL byte");
    if (data[i] == '\n' && (i == 0 || data[i - 1] != '\r')) return Malformed("a bare LF");
    // A CR is a line's end only with its LF (one still to come at the end of the bytes so far).
    if (data[i] == '\r' && i + 1 < data.size() && data[i + 1] != '\n') return Malformed("a bare CR");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::optional<RequestHead>> ParseRequestHead(absl::Span<const uint8_t> bytes) {
  absl::string_view data(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  size_t end = data.substr(0, kMaxRequestHead).find("\r\n\r\n");
  if (end == absl::string_view::npos) {
    if (data.size() >= kMaxRequestHead) return Malformed("the head is longer than the proxy reads");
    if (absl::Status s = CheckPrefix(data); !s.ok()) return s;
    return std::optional<RequestHead>();
  }
  absl::string_view head = data.substr(0, end);
  if (absl::Status s = CheckPrefix(head); !s.ok()) return s;
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");

  RequestHead r;
  r.head_size = end + 4;
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3) return Malformed("not a request line");
  if (!IsToken(parts[0])) return Malformed("bad method");
  if (parts[2] != "HTTP/1.1" && parts[2] != "HTTP/1.0") return Malformed("not HTTP/1.0 or 1.1");
  if (parts[1].empty()) return Malformed("no request target");
  for (char c : parts[1])
    if (c <= 0x20 || c >= 0x7f) return Malformed("bad request target");
  r.method = std::string(parts[0]);
  r.target = std::string(parts[1]);
  if (r.method == "CONNECT") return Malformed("CONNECT is not proxied");

  int hosts = 0, lengths = 0, encodings = 0;
  Authority host;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (line.empty() || line[0] == ' ' || line[0] == '\t') return Malformed("a folded header line");
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon)))
      return Malformed("bad header name");
    absl::string_view name = line.substr(0, colon);
    // Only SP and HTAB around a value (RFC 9110 5.5): a vertical tab or form feed is kept, and
    // refused below as a control character, rather than trimmed away as absl would.
    absl::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    // A server that maps '_' to '-' (CGI) would read "Content_Length" as a framing header.
    if (name.find('_') != absl::string_view::npos) {
      std::string dashed(name);
      std::replace(dashed.begin(), dashed.end(), '_', '-');
      for (const char* framing : {"host", "content-length", "transfer-encoding", "upgrade"})
        if (absl::EqualsIgnoreCase(dashed, framing)) return Malformed("an underscore in a framing header's name");
    }
    if (!IsFieldValue(value)) return Malformed("bad header value");
    if (absl::EqualsIgnoreCase(name, "host")) {
      if (++hosts > 1) return Malformed("more than one Host");
      absl::StatusOr<Authority> a = ParseAuthority(value);
      if (!a.ok()) return a.status();
      host = *a;
    } else if (absl::EqualsIgnoreCase(name, "content-length")) {
      if (++lengths > 1) return Malformed("more than one Content-Length");
      if (value.empty() || value.size() > 18 ||
          !absl::c_all_of(value, [](char c) { return absl::ascii_isdigit(c); }) ||
          !absl::SimpleAtoi(value, &r.content_length))
        return Malformed("bad Content-Length");
    } else if (absl::EqualsIgnoreCase(name, "upgrade")) {
      r.upgrade = true;
    } else if (absl::EqualsIgnoreCase(name, "transfer-encoding")) {
      if (++encodings > 1) return Malformed("more than one Transfer-Encoding");
      if (!absl::EqualsIgnoreCase(value, "chunked")) return Malformed("a transfer coding other than chunked");
      r.chunked = true;
    }
  }
  if (hosts == 0) return Malformed("no Host");
  if (r.chunked && lengths > 0) return Malformed("both Content-Length and Transfer-Encoding");
  if (r.chunked && parts[2] == "HTTP/1.0") return Malformed("Transfer-Encoding in HTTP/1.0");
  // The target names the same host or none (RFC 9112 3.2: a server uses the absolute form's
  // authority over Host, so the two must not differ).
  if (r.target[0] != '/') {
    if (r.target == "*") {
      if (r.method != "OPTIONS") return Malformed("bad request target");
    } else {
      if (!absl::StartsWithIgnoreCase(r.target, "http://"))
        return Malformed("a request target that is neither a path nor http://");
      absl::string_view rest = absl::string_view(r.target).substr(7);
      absl::string_view authority = rest.substr(0, rest.find_first_of("/?#"));
      if (authority.find('@') != absl::string_view::npos) return Malformed("userinfo in the target");
      absl::StatusOr<Authority> a = ParseAuthority(authority);
      if (!a.ok()) return a.status();
      if (!(*a == host)) return Malformed("the target names another host than Host");
    }
  }
  r.host = host.host;
  r.port = host.port;
  return std::optional<RequestHead>(std::move(r));
}

absl::StatusOr<size_t> ChunkedBody::Feed(absl::Span<const uint8_t> data) {
  constexpr size_t kMaxLine = 4096;
  size_t i = 0;
  while (i < data.size() && state_ != State::kDone) {
    uint8_t c = data[i];
    switch (state_) {
      case State::kSize:
        if (absl::ascii_isxdigit(c)) {
          // At most 2^31 - 1: a server that keeps chunk sizes in 32 bits must read them as we do.
          if (++digits_ > 8 || (digits_ == 8 && remaining_ > 0x7ffffff))
            return Malformed("a chunk size of 2 GiB or more");
          remaining_ = remaining_ << 4 |
                       static_cast<uint64_t>(absl::ascii_isdigit(c) ? c - '0' : (c | 0x20) - 'a' + 10);
        } else if (digits_ > 0 && c == ';') {
          state_ = State::kExtension;
          line_ = 0;
        } else if (digits_ > 0 && c == '\r') {
          state_ = State::kSizeLf;
        } else {
          return Malformed("bad chunk size");
        }
        ++i;
        break;
      case State::kExtension:
        if (c == '\r') state_ = State::kSizeLf;
        else if (c == '\n' || c == '\0' || ++line_ > kMaxLine) return Malformed("bad chunk extension");
        ++i;
        break;
      case State::kSizeLf:
        if (c != '\n') return Malformed("bad chunk line end");
        state_ = remaining_ == 0 ? State::kTrailer : State::kData;
        line_ = 0;
        trailer_empty_ = true;
        ++i;
        break;
      case State::kData: {
        size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, data.size() - i));
        remaining_ -= n;
        i += n;
        if (remaining_ == 0) state_ = State::kDataCr;
        break;
      }
      case State::kDataCr:
        if (c != '\r') return Malformed("a chunk longer than its size");
        state_ = State::kDataLf;
        ++i;
        break;
      case State::kDataLf:
        if (c != '\n') return Malformed("bad chunk end");
        state_ = State::kSize;
        digits_ = 0;
        ++i;
        break;
      case State::kTrailer:
        if (c == '\r') {
          state_ = State::kTrailerLf;
        } else if (c == '\n' || c == '\0' || ++line_ > kMaxLine) {
          return Malformed("bad trailer");
        } else {
          trailer_empty_ = false;
        }
        ++i;
        break;
      case State::kTrailerLf:
        if (c != '\n') return Malformed("bad trailer line end");
        state_ = trailer_empty_ ? State::kDone : State::kTrailer;
        line_ = 0;
        trailer_empty_ = true;
        ++i;
        break;
      case State::kDone:
        break;
    }
  }
  return i;
}

}  // namespace paseo::egress
