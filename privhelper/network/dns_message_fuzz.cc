// Fuzzes the DNS codec in both directions the forwarder parses: a query from a sandbox
// (ParseQuery) and an upstream's reply (ParseResponse, to a question the first input byte
// picks: the reply must match it to be read at all). Checks what callers rely on: an accepted
// name is within the wire bounds and its dotted form parses back to it; an accepted query
// re-built and parsed again is the same question; every response built from what was accepted
// fits the size it was given and reads back as the same answers; a chain stays within its
// bounds.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "absl/types/span.h"
#include "privhelper/network/dns_message.h"

namespace {

namespace dns = paseo::network::dns;

void Check(bool ok) {
  if (!ok) abort();
}

void CheckName(const dns::Name& name) {
  size_t wire = 1;
  for (const auto& l : name.labels) {
    Check(!l.empty() && l.size() <= dns::kMaxLabel);
    wire += 1 + l.size();
  }
  Check(wire <= dns::kMaxNameWire);
  if (dns::IsHostname(name)) {
    auto back = dns::NameFromDotted(dns::Dotted(name));
    Check(back.ok() && dns::SameName(*back, name));
  }
}

bool SameRecords(const std::vector<dns::Record>& a, const std::vector<dns::Record>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!dns::SameName(a[i].name, b[i].name) || a[i].type != b[i].type || a[i].addr != b[i].addr ||
        !dns::SameName(a[i].target, b[i].target))
      return false;
  }
  return true;
}

// A response to `query` from `records`, at `max_size`: within it, and read back the same unless
// it had to be truncated.
void RoundTrip(const dns::Query& query, const std::vector<dns::Record>& records, size_t max_size) {
  std::vector<uint8_t> out = dns::BuildResponse(query, dns::kNoError, records, max_size);
  Check(out.size() <= std::max<size_t>(max_size, 512));
  auto back = dns::ParseResponse(out, query.id, query.question);
  Check(back.ok());
  if (!back->truncated) Check(SameRecords(back->answers, records));
}

const dns::Question& Picked(uint8_t which) {
  static const std::vector<dns::Question> questions = [] {
    std::vector<dns::Question> q;
    for (const char* name : {"api.example.com", "a.b.example", "example"}) {
      for (uint16_t type : {dns::kTypeA, dns::kTypeAaaa}) {
        q.push_back(dns::Question{*dns::NameFromDotted(name), type, dns::kClassIn});
      }
    }
    return q;
  }();
  return questions[which % questions.size()];
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > dns::kMaxMessage + 1) return 0;
  absl::Span<const uint8_t> message(data + 1, size - 1);

  // From a sandbox.
  if (auto q = dns::ParseQuery(message); q.ok()) {
    CheckName(q->question.name);
    Check(q->udp_size >= dns::kClassicUdpSize && q->udp_size <= dns::kMaxEdnsUdpSize);
    auto again = dns::ParseQuery(dns::BuildQuery(q->id, q->question, q->edns ? 1232 : 0));
    Check(again.ok() && dns::SameName(again->question.name, q->question.name) &&
          again->question.type == q->question.type && again->question.klass == q->question.klass);
    RoundTrip(*q, {}, q->udp_size);
  }

  // From an upstream, answering the question the first byte picks (with its id: the message's
  // own first two bytes, so a mutation that keeps them is read).
  const dns::Question& question = Picked(data[0]);
  uint16_t id = message.size() >= 2 ? static_cast<uint16_t>(message[0] << 8 | message[1]) : 0;
  if (auto r = dns::ParseResponse(message, id, question); r.ok()) {
    Check(r->answers.size() <= dns::kMaxAnswers);
    for (const auto& rec : r->answers) {
      Check(rec.type == dns::kTypeA || rec.type == dns::kTypeCname);
      Check(rec.klass == dns::kClassIn);
      CheckName(rec.name);
      if (rec.type == dns::kTypeCname) CheckName(rec.target);
    }
    dns::Chain chain = dns::FollowChain(question.name, r->answers);
    size_t cnames = 0;
    for (const auto& rec : chain.records) cnames += rec.type == dns::kTypeCname;
    Check(cnames <= dns::kMaxChain);
    Check(chain.addrs.size() <= chain.records.size());
    dns::Query query;
    query.id = id;
    query.recursion_desired = true;
    query.question = question;
    RoundTrip(query, chain.records, dns::kClassicUdpSize);
    RoundTrip(query, chain.records, dns::kMaxMessage);
  }
  return 0;
}
