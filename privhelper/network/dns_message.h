// DNS messages (RFC 1035) as the supervisor's per-sandbox forwarder needs them: a strict,
// bounded parser for the one-question queries a sandbox sends and for upstream replies, and
// builders for the few responses the forwarder ever sends. Everything here is pure (no I/O):
// every byte comes from a sandbox or the network, so a parse either yields checked values or
// fails, never reads past the input, follows compression pointers only backwards and a bounded
// number of times, and never allocates more than the input's size allows.
//
//   ASSIGN_OR_RETURN(dns::Query q, dns::ParseQuery(bytes));        // from the sandbox
//   std::vector<uint8_t> up = dns::BuildQuery(id, q.question, 1232);   // to the upstream
//   ASSIGN_OR_RETURN(dns::Response r, dns::ParseResponse(reply, id, q.question));
//   dns::Chain chain = dns::FollowChain(q.question.name, r.answers);
//   std::vector<uint8_t> out = dns::BuildResponse(q, r.rcode, chain.records, q.udp_size);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace paseo::network::dns {

constexpr uint16_t kTypeA = 1;
constexpr uint16_t kTypeCname = 5;
constexpr uint16_t kTypeAaaa = 28;
constexpr uint16_t kTypeOpt = 41;
constexpr uint16_t kClassIn = 1;

constexpr uint8_t kNoError = 0;
constexpr uint8_t kFormErr = 1;
constexpr uint8_t kServFail = 2;
constexpr uint8_t kNxDomain = 3;
constexpr uint8_t kNotImp = 4;
constexpr uint8_t kRefused = 5;

constexpr size_t kMaxNameWire = 255;  // RFC 1035 3.1, counting length octets and the root
constexpr size_t kMaxLabel = 63;
constexpr size_t kClassicUdpSize = 512;   // without EDNS (RFC 1035 4.2.1)
constexpr size_t kMaxEdnsUdpSize = 1232;  // the DNS flag day 2020 size: no IP fragmentation
constexpr size_t kMaxMessage = 65535;     // TCP's two-octet length
constexpr size_t kMaxAnswers = 256;       // records of an upstream answer section we look at
constexpr size_t kMaxChain = 8;           // CNAMEs followed from the question's name

// A domain name as its labels, case as received (the root name has none).
struct Name {
  std::vector<std::string> labels;
};
// ASCII case-insensitive equality (RFC 4343), label by label.
bool SameName(const Name& a, const Name& b);
// "api.example.com": lower case, no trailing dot; "." for the root.
std::string Dotted(const Name& name);
// Whether every label is letters, digits, '-' or '_' (no dot, no byte a dotted form or a
// rule comparison could misread) and the name is not the root.
bool IsHostname(const Name& name);
// Parses "api.example.com" (a trailing dot allowed); nullopt-like error when not a hostname.
absl::StatusOr<Name> NameFromDotted(const std::string& dotted);

struct Question {
  Name name;
  uint16_t type = 0;
  uint16_t klass = 0;
};

// A query from a client. Only the forms a stub resolver sends are accepted: QR clear, not
// truncated, exactly one question, no answer or authority records, at most one additional
// record which must be an EDNS OPT at the root, and nothing after the last record.
struct Query {
  uint16_t id = 0;
  uint8_t opcode = 0;
  bool recursion_desired = false;
  Question question;
  bool edns = false;
  // The largest UDP response the client accepts: 512 without EDNS, else its advertised size
  // clamped to [512, 1232].
  size_t udp_size = kClassicUdpSize;
};
absl::StatusOr<Query> ParseQuery(absl::Span<const uint8_t> message);

struct Record {
  Name name;
  uint16_t type = 0;
  uint16_t klass = 0;
  uint32_t ttl = 0;     // RFC 2181 8: a value with the top bit set counts as 0
  uint32_t addr = 0;    // type A: the address, host byte order
  Name target;          // type CNAME: the canonical name
};

// An upstream's reply to the query with `id` and `question`: anything else (a different id,
// another question, QR clear, a malformed record) is an error, so a spoofed or stray datagram
// is never taken for the answer. Only the answer section is kept (A and CNAME records of class
// IN, at most kMaxAnswers); authority and additional sections are checked for framing only.
struct Response {
  uint16_t id = 0;
  bool truncated = false;
  uint8_t rcode = 0;
  std::vector<Record> answers;
};
absl::StatusOr<Response> ParseResponse(absl::Span<const uint8_t> message, uint16_t id,
                                       const Question& question);

// The records that answer `name`: the CNAMEs leading from it (at most kMaxChain, each owned
// by the previous one's target) and then the A records of the last name; nothing else in the
// answer section. ttl is the smallest TTL among them (0 if there are none).
struct Chain {
  std::vector<Record> records;
  std::vector<uint32_t> addrs;
  uint32_t ttl = 0;
};
Chain FollowChain(const Name& name, const std::vector<Record>& answers);

// A query with one question, RD set and, if edns_udp_size is non-zero, an OPT record.
std::vector<uint8_t> BuildQuery(uint16_t id, const Question& question, uint16_t edns_udp_size);

// The response to `query`: its id, opcode, RD and question (as the client spelled it), RA set,
// `rcode`, and `answers` (A and CNAME records only). If it would exceed `max_size`, the
// answers are left out and TC is set, so the client retries over TCP. An OPT record is added
// when the query had one.
std::vector<uint8_t> BuildResponse(const Query& query, uint8_t rcode,
                                   const std::vector<Record>& answers, size_t max_size);

}  // namespace paseo::network::dns
