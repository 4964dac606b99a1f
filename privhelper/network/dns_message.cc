// See dns_message.h.
#include "privhelper/network/dns_message.h"

#include <algorithm>
#include <limits>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace paseo::network::dns {
namespace {

constexpr size_t kHeaderSize = 12;
// Pointers per name. Each must go strictly backwards, which already ends every chain; the
// bound only keeps a hostile name from costing more than a few steps.
constexpr int kMaxPointers = 16;

constexpr uint16_t kFlagQr = 0x8000;
constexpr uint16_t kFlagTc = 0x0200;
constexpr uint16_t kFlagRd = 0x0100;
constexpr uint16_t kFlagRa = 0x0080;

absl::Status Malformed(const char* what) {
  return absl::InvalidArgumentError(std::string("malformed DNS message: ") + what);
}

// Bounds-checked reads from a message.
class Reader {
 public:
  explicit Reader(absl::Span<const uint8_t> message) : msg_(message) {}

  size_t pos() const { return pos_; }
  bool AtEnd() const { return pos_ == msg_.size(); }

  bool U16(uint16_t& out) {
    if (msg_.size() - pos_ < 2) return false;
    out = static_cast<uint16_t>(msg_[pos_] << 8 | msg_[pos_ + 1]);
    pos_ += 2;
    return true;
  }
  bool U32(uint32_t& out) {
    uint16_t hi, lo;
    if (!U16(hi) || !U16(lo)) return false;
    out = uint32_t{hi} << 16 | lo;
    return true;
  }
  bool Skip(size_t n) {
    if (msg_.size() - pos_ < n) return false;
    pos_ += n;
    return true;
  }

  // A name at the current position, following compression pointers (RFC 1035 4.1.4). Every
  // pointer must point before the label sequence it interrupts, so no chain can loop.
  absl::Status ReadName(Name& name) {
    name.labels.clear();
    size_t cur = pos_;
    size_t floor = pos_;  // pointers must go below this
    size_t wire = 1;      // the root's zero octet
    bool jumped = false;
    int pointers = 0;
    while (true) {
      if (cur >= msg_.size()) return Malformed("name runs past the end");
      uint8_t len = msg_[cur];
      if ((len & 0xC0) == 0xC0) {
        if (cur + 1 >= msg_.size()) return Malformed("pointer runs past the end");
        size_t target = size_t{len & 0x3Fu} << 8 | msg_[cur + 1];
        if (target >= floor) return Malformed("pointer does not point backwards");
        if (target < kHeaderSize) return Malformed("pointer into the header");
        if (++pointers > kMaxPointers) return Malformed("too many pointers in a name");
        if (!jumped) pos_ = cur + 2;
        jumped = true;
        floor = target;
        cur = target;
        continue;
      }
      if ((len & 0xC0) != 0) return Malformed("reserved label type");
      if (len == 0) {
        if (!jumped) pos_ = cur + 1;
        return absl::OkStatus();
      }
      if (msg_.size() - cur - 1 < len) return Malformed("label runs past the end");
      wire += 1 + len;
      if (wire > kMaxNameWire) return Malformed("name longer than 255 octets");
      name.labels.emplace_back(reinterpret_cast<const char*>(&msg_[cur + 1]), len);
      cur += 1 + len;
    }
  }

 private:
  absl::Span<const uint8_t> msg_;
  size_t pos_ = 0;
};

struct Header {
  uint16_t id, flags, qdcount, ancount, nscount, arcount;
};

bool ReadHeader(Reader& r, Header& h) {
  return r.U16(h.id) && r.U16(h.flags) && r.U16(h.qdcount) && r.U16(h.ancount) &&
         r.U16(h.nscount) && r.U16(h.arcount);
}

absl::Status ReadQuestion(Reader& r, Question& q) {
  if (absl::Status s = r.ReadName(q.name); !s.ok()) return s;
  if (!r.U16(q.type) || !r.U16(q.klass)) return Malformed("question runs past the end");
  return absl::OkStatus();
}

// One resource record; A and CNAME rdata are decoded, others skipped.
absl::Status ReadRecord(Reader& r, Record& rec, uint16_t& rdlength) {
  if (absl::Status s = r.ReadName(rec.name); !s.ok()) return s;
  if (!r.U16(rec.type) || !r.U16(rec.klass) || !r.U32(rec.ttl) || !r.U16(rdlength))
    return Malformed("record runs past the end");
  if (rec.ttl > uint32_t{std::numeric_limits<int32_t>::max()}) rec.ttl = 0;
  size_t start = r.pos();
  if (rec.klass == kClassIn && rec.type == kTypeA) {
    if (rdlength != 4 || !r.U32(rec.addr)) return Malformed("A record is not 4 octets");
  } else if (rec.klass == kClassIn && rec.type == kTypeCname) {
    if (absl::Status s = r.ReadName(rec.target); !s.ok()) return s;
    if (r.pos() - start != rdlength) return Malformed("CNAME rdata length mismatch");
  } else if (!r.Skip(rdlength)) {
    return Malformed("rdata runs past the end");
  }
  return absl::OkStatus();
}

bool IsHostnameByte(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_';
}

// Appends big-endian integers and names (compressed against names written before).
class Writer {
 public:
  void U16(uint16_t v) {
    out_.push_back(static_cast<uint8_t>(v >> 8));
    out_.push_back(static_cast<uint8_t>(v));
  }
  void U32(uint32_t v) {
    U16(static_cast<uint16_t>(v >> 16));
    U16(static_cast<uint16_t>(v));
  }
  // Writes `name`, as a pointer if the same name (any case) was written whole before.
  void WriteName(const Name& name) {
    // The lower-cased wire form: unlike the dotted one, a label holding a dot cannot collide.
    std::string key;
    for (const std::string& label : name.labels) {
      key.push_back(static_cast<char>(label.size()));
      key += absl::AsciiStrToLower(label);
    }
    if (auto it = written_.find(key); it != written_.end()) {
      U16(static_cast<uint16_t>(0xC000 | it->second));
      return;
    }
    if (out_.size() < 0x4000 && !name.labels.empty()) written_.emplace(key, out_.size());
    for (const std::string& label : name.labels) {
      out_.push_back(static_cast<uint8_t>(label.size()));
      out_.insert(out_.end(), label.begin(), label.end());
    }
    out_.push_back(0);
  }
  void SetU16(size_t at, uint16_t v) {
    out_[at] = static_cast<uint8_t>(v >> 8);
    out_[at + 1] = static_cast<uint8_t>(v);
  }
  size_t size() const { return out_.size(); }
  std::vector<uint8_t> Take() { return std::move(out_); }

 private:
  std::vector<uint8_t> out_;
  std::map<std::string, size_t> written_;
};

void WriteOpt(Writer& w, uint16_t udp_size) {
  w.WriteName(Name{});
  w.U16(kTypeOpt);
  w.U16(udp_size);
  w.U32(0);  // extended rcode 0, version 0, no DO bit
  w.U16(0);  // no options
}

void WriteRecord(Writer& w, const Record& rec) {
  w.WriteName(rec.name);
  w.U16(rec.type);
  w.U16(kClassIn);
  w.U32(rec.ttl);
  if (rec.type == kTypeA) {
    w.U16(4);
    w.U32(rec.addr);
    return;
  }
  size_t length_at = w.size();
  w.U16(0);
  w.WriteName(rec.target);
  w.SetU16(length_at, static_cast<uint16_t>(w.size() - length_at - 2));
}

}  // namespace

bool SameName(const Name& a, const Name& b) {
  if (a.labels.size() != b.labels.size()) return false;
  for (size_t i = 0; i < a.labels.size(); ++i) {
    if (!absl::EqualsIgnoreCase(a.labels[i], b.labels[i])) return false;
  }
  return true;
}

std::string Dotted(const Name& name) {
  if (name.labels.empty()) return ".";
  return absl::AsciiStrToLower(absl::StrJoin(name.labels, "."));
}

bool IsHostname(const Name& name) {
  if (name.labels.empty()) return false;
  for (const std::string& label : name.labels) {
    if (label.empty() || !std::all_of(label.begin(), label.end(), IsHostnameByte)) return false;
  }
  return true;
}

absl::StatusOr<Name> NameFromDotted(const std::string& dotted) {
  std::string text = dotted;
  if (!text.empty() && text.back() == '.') text.pop_back();
  Name name;
  if (!text.empty()) name.labels = absl::StrSplit(text, '.');
  size_t wire = 1;
  for (const std::string& label : name.labels) wire += 1 + label.size();
  bool labels_ok = std::all_of(name.labels.begin(), name.labels.end(),
                               [](const std::string& l) { return l.size() <= kMaxLabel; });
  if (!IsHostname(name) || !labels_ok || wire > kMaxNameWire)
    return absl::InvalidArgumentError("not a host name: \"" + dotted + "\"");
  return name;
}

absl::StatusOr<Query> ParseQuery(absl::Span<const uint8_t> message) {
  if (message.size() < kHeaderSize || message.size() > kMaxMessage)
    return Malformed("wrong size");
  Reader r(message);
  Header h;
  ReadHeader(r, h);
  if (h.flags & kFlagQr) return Malformed("not a query");
  if (h.flags & kFlagTc) return Malformed("truncated query");
  if (h.qdcount != 1 || h.ancount != 0 || h.nscount != 0 || h.arcount > 1)
    return Malformed("not exactly one question");
  Query q;
  q.id = h.id;
  q.opcode = (h.flags >> 11) & 0xF;
  q.recursion_desired = h.flags & kFlagRd;
  if (absl::Status s = ReadQuestion(r, q.question); !s.ok()) return s;
  if (h.arcount == 1) {
    Record opt;
    uint16_t rdlength;
    if (absl::Status s = ReadRecord(r, opt, rdlength); !s.ok()) return s;
    if (opt.type != kTypeOpt || !opt.name.labels.empty())
      return Malformed("additional record is not an OPT");
    q.edns = true;
    // The OPT record's class field is the sender's UDP payload size (RFC 6891 6.2.3).
    q.udp_size = std::clamp<size_t>(opt.klass, kClassicUdpSize, kMaxEdnsUdpSize);
  }
  if (!r.AtEnd()) return Malformed("bytes after the last record");
  return q;
}

absl::StatusOr<Response> ParseResponse(absl::Span<const uint8_t> message, uint16_t id,
                                       const Question& question) {
  if (message.size() < kHeaderSize || message.size() > kMaxMessage)
    return Malformed("wrong size");
  Reader r(message);
  Header h;
  ReadHeader(r, h);
  if (!(h.flags & kFlagQr)) return Malformed("not a response");
  if (h.id != id) return absl::NotFoundError("reply to another query (id)");
  Response resp;
  resp.id = h.id;
  resp.truncated = h.flags & kFlagTc;
  resp.rcode = h.flags & 0xF;
  // A truncated reply may end anywhere after its question (RFC 2181 9); only TC matters then.
  if (h.qdcount != 1) return Malformed("not exactly one question");
  Question q;
  if (absl::Status s = ReadQuestion(r, q); !s.ok()) return s;
  if (!SameName(q.name, question.name) || q.type != question.type || q.klass != question.klass)
    return absl::NotFoundError("reply to another query (question)");
  if (resp.truncated) return resp;
  size_t records = size_t{h.ancount} + h.nscount + h.arcount;
  for (size_t i = 0; i < records; ++i) {
    Record rec;
    uint16_t rdlength;
    if (absl::Status s = ReadRecord(r, rec, rdlength); !s.ok()) return s;
    bool answer = i < h.ancount;
    bool wanted = rec.klass == kClassIn && (rec.type == kTypeA || rec.type == kTypeCname);
    if (answer && wanted && resp.answers.size() < kMaxAnswers) resp.answers.push_back(std::move(rec));
  }
  if (!r.AtEnd()) return Malformed("bytes after the last record");
  return resp;
}

Chain FollowChain(const Name& name, const std::vector<Record>& answers) {
  Chain chain;
  uint32_t ttl = std::numeric_limits<uint32_t>::max();
  const Name* current = &name;
  for (size_t step = 0; step <= kMaxChain; ++step) {
    bool any_a = false;
    for (const Record& rec : answers) {
      if (rec.type != kTypeA || !SameName(rec.name, *current)) continue;
      chain.records.push_back(rec);
      chain.addrs.push_back(rec.addr);
      ttl = std::min(ttl, rec.ttl);
      any_a = true;
    }
    if (any_a || step == kMaxChain) break;
    auto cname = std::find_if(answers.begin(), answers.end(), [&](const Record& rec) {
      return rec.type == kTypeCname && SameName(rec.name, *current);
    });
    if (cname == answers.end()) break;
    chain.records.push_back(*cname);
    ttl = std::min(ttl, cname->ttl);
    current = &cname->target;
  }
  chain.ttl = chain.records.empty() ? 0 : ttl;
  return chain;
}

std::vector<uint8_t> BuildQuery(uint16_t id, const Question& question, uint16_t edns_udp_size) {
  Writer w;
  w.U16(id);
  w.U16(kFlagRd);
  w.U16(1);
  w.U16(0);
  w.U16(0);
  w.U16(edns_udp_size ? 1 : 0);
  w.WriteName(question.name);
  w.U16(question.type);
  w.U16(question.klass);
  if (edns_udp_size) WriteOpt(w, edns_udp_size);
  return w.Take();
}

std::vector<uint8_t> BuildResponse(const Query& query, uint8_t rcode,
                                   const std::vector<Record>& answers, size_t max_size) {
  auto build = [&](bool with_answers) {
    uint16_t flags = kFlagQr | uint16_t(query.opcode & 0xF) << 11 | kFlagRa | (rcode & 0xF);
    if (query.recursion_desired) flags |= kFlagRd;
    if (!with_answers && !answers.empty()) flags |= kFlagTc;
    Writer w;
    w.U16(query.id);
    w.U16(flags);
    w.U16(1);
    w.U16(with_answers ? static_cast<uint16_t>(answers.size()) : 0);
    w.U16(0);
    w.U16(query.edns ? 1 : 0);
    w.WriteName(query.question.name);
    w.U16(query.question.type);
    w.U16(query.question.klass);
    if (with_answers) {
      for (const Record& rec : answers) WriteRecord(w, rec);
    }
    if (query.edns) WriteOpt(w, kMaxEdnsUdpSize);
    return w.Take();
  };
  std::vector<uint8_t> full = build(true);
  if (full.size() <= max_size) return full;
  return build(false);
}

}  // namespace paseo::network::dns
