// See client_hello.h.
#include "egress/client_hello.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace paseo::egress {
namespace {

constexpr uint8_t kHandshakeRecord = 22;
constexpr uint8_t kClientHelloType = 1;
constexpr size_t kRecordHeader = 5;
constexpr size_t kMaxRecordPayload = 16384;  // 2^14 (RFC 8446 5.1)
constexpr uint16_t kServerNameExtension = 0;
constexpr uint16_t kAlpnExtension = 16;
constexpr uint8_t kHostNameType = 0;
// Encrypted ClientHello (draft-ietf-tls-esni: 0xfe0d) and its predecessor ESNI (0xffce): the
// name they carry is hidden from the proxy, and an ECH-enabled CDN serves the inner one.
constexpr uint16_t kEchExtension = 0xfe0d;
constexpr uint16_t kEsniExtension = 0xffce;

absl::Status Malformed(absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("malformed TLS ClientHello: ", why));
}

// A bounds-checked cursor over one length-delimited field.
class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> data) : data_(data) {}
  bool empty() const { return data_.empty(); }
  size_t size() const { return data_.size(); }

  bool U8(uint8_t* v) {
    if (data_.size() < 1) return false;
    *v = data_[0];
    data_.remove_prefix(1);
    return true;
  }
  bool U16(uint16_t* v) {
    if (data_.size() < 2) return false;
    *v = static_cast<uint16_t>(data_[0] << 8 | data_[1]);
    data_.remove_prefix(2);
    return true;
  }
  bool Skip(size_t n) {
    if (data_.size() < n) return false;
    data_.remove_prefix(n);
    return true;
  }
  // A field preceded by its length in `width` bytes (1 or 2).
  bool Vector(int width, Reader* out) {
    size_t n = 0;
    if (width == 1) {
      uint8_t v;
      if (!U8(&v)) return false;
      n = v;
    } else {
      uint16_t v;
      if (!U16(&v)) return false;
      n = v;
    }
    if (data_.size() < n) return false;
    *out = Reader(data_.subspan(0, n));
    data_.remove_prefix(n);
    return true;
  }
  std::string Text() const { return std::string(data_.begin(), data_.end()); }

 private:
  absl::Span<const uint8_t> data_;
};

// RFC 6066 3: a list holding one host_name (a second of the same type is not allowed).
absl::Status ParseServerName(Reader ext, std::string* name) {
  Reader list(absl::Span<const uint8_t>{});
  if (!ext.Vector(2, &list) || !ext.empty() || list.empty())
    return Malformed("bad server_name extension");
  bool seen = false;
  while (!list.empty()) {
    uint8_t type;
    Reader value(absl::Span<const uint8_t>{});
    if (!list.U8(&type) || !list.Vector(2, &value)) return Malformed("bad server_name entry");
    if (type != kHostNameType) continue;  // other name types are not defined; ignored
    if (seen) return Malformed("more than one host_name");
    seen = true;
    std::string host = value.Text();
    if (!IsHostName(host)) return Malformed("server_name is not a DNS host name");
    *name = absl::AsciiStrToLower(host);
  }
  return absl::OkStatus();
}

// RFC 7301 3.1: a non-empty list of non-empty protocol names.
absl::Status ParseAlpn(Reader ext, std::vector<std::string>* alpn) {
  Reader list(absl::Span<const uint8_t>{});
  if (!ext.Vector(2, &list) || !ext.empty() || list.size() < 2)
    return Malformed("bad ALPN extension");
  while (!list.empty()) {
    Reader name(absl::Span<const uint8_t>{});
    if (!list.Vector(1, &name) || name.empty()) return Malformed("bad ALPN protocol name");
    alpn->push_back(name.Text());
  }
  return absl::OkStatus();
}

// The ClientHello body (after the handshake header).
absl::Status ParseBody(Reader body, ClientHello* hello) {
  Reader session(absl::Span<const uint8_t>{}), suites(absl::Span<const uint8_t>{}),
      compression(absl::Span<const uint8_t>{});
  uint16_t version;
  if (!body.U16(&version) || !body.Skip(32)) return Malformed("truncated");
  if (version >> 8 != 3) return Malformed("not a TLS version");
  if (!body.Vector(1, &session) || session.size() > 32) return Malformed("bad session id");
  if (!body.Vector(2, &suites) || suites.size() < 2 || suites.size() % 2 != 0)
    return Malformed("bad cipher suites");
  if (!body.Vector(1, &compression) || compression.empty())
    return Malformed("bad compression methods");
  if (body.empty()) return absl::OkStatus();  // TLS 1.2 allows no extensions: no name
  Reader extensions(absl::Span<const uint8_t>{});
  if (!body.Vector(2, &extensions) || !body.empty()) return Malformed("bad extensions");
  std::set<uint16_t> seen;
  while (!extensions.empty()) {
    uint16_t type;
    Reader ext(absl::Span<const uint8_t>{});
    if (!extensions.U16(&type) || !extensions.Vector(2, &ext)) return Malformed("bad extension");
    if (!seen.insert(type).second) return Malformed("an extension appears twice");
    if (type == kEchExtension || type == kEsniExtension)
      return absl::InvalidArgumentError(
          "TLS ClientHello refused: an encrypted ClientHello hides the server name");
    if (type == kServerNameExtension) {
      if (absl::Status s = ParseServerName(ext, &hello->server_name); !s.ok()) return s;
    } else if (type == kAlpnExtension) {
      if (absl::Status s = ParseAlpn(ext, &hello->alpn); !s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool IsHostName(const std::string& name) {
  if (name.empty() || name.size() > 253) return false;
  std::vector<absl::string_view> labels = absl::StrSplit(name, '.');
  if (labels.size() < 2) return false;
  for (absl::string_view label : labels) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-')
      return false;
    for (char c : label)
      if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  for (char c : labels.back())
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return true;
  return false;  // the last label all digits: an address, not a name
}

absl::StatusOr<std::optional<ClientHello>> ParseClientHello(absl::Span<const uint8_t> data) {
  // The handshake message, put together from the records' payloads.
  std::vector<uint8_t> message;
  size_t at = 0;
  for (;;) {
    if (data.size() - at < kRecordHeader) {
      if (at >= kMaxClientHello) return Malformed("longer than the proxy reads");
      return std::optional<ClientHello>();
    }
    const uint8_t* h = data.data() + at;
    if (h[0] != kHandshakeRecord) return Malformed("not a handshake record");
    if (h[1] != 3) return Malformed("not a TLS record");
    size_t length = size_t{h[3]} << 8 | h[4];
    if (length == 0 || length > kMaxRecordPayload) return Malformed("bad record length");
    if (at + kRecordHeader + length > kMaxClientHello) return Malformed("longer than the proxy reads");
    if (data.size() - at - kRecordHeader < length) return std::optional<ClientHello>();
    message.insert(message.end(), h + kRecordHeader, h + kRecordHeader + length);
    at += kRecordHeader + length;
    if (message.size() < 4) continue;
    if (message[0] != kClientHelloType) return Malformed("not a ClientHello");
    size_t body = size_t{message[1]} << 16 | size_t{message[2]} << 8 | message[3];
    if (4 + body > kMaxClientHello) return Malformed("longer than the proxy reads");
    if (message.size() < 4 + body) continue;
    // The hello must end with its record: a client sends nothing else before the server's
    // answer, and bytes after it in the same record would be passed on unread.
    if (message.size() != 4 + body) return Malformed("bytes after the ClientHello");
    ClientHello hello;
    hello.record_bytes = at;
    if (absl::Status s = ParseBody(Reader(absl::MakeConstSpan(message).subspan(4)), &hello);
        !s.ok())
      return s;
    return std::optional<ClientHello>(std::move(hello));
  }
}

}  // namespace paseo::egress
