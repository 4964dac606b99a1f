// The DNS codec against well-formed messages, a table of hostile ones (truncated, looping,
// oversized, forward pointers, stray records) and a deterministic random mutation loop: a bad
// message is an error, never a crash, a read past the input or an unbounded name.
#include "privhelper/network/dns_message.h"

#include <random>

#include "gtest/gtest.h"

namespace paseo::network::dns {
namespace {

using Bytes = std::vector<uint8_t>;

// Hand-written messages, so the tests do not trust the builders they test.
struct Msg {
  Bytes b;
  Msg& U8(uint8_t v) {
    b.push_back(v);
    return *this;
  }
  Msg& U16(uint16_t v) { return U8(v >> 8).U8(v & 0xFF); }
  Msg& U32(uint32_t v) { return U16(v >> 16).U16(v & 0xFFFF); }
  Msg& Header(uint16_t id, uint16_t flags, uint16_t qd, uint16_t an, uint16_t ns, uint16_t ar) {
    return U16(id).U16(flags).U16(qd).U16(an).U16(ns).U16(ar);
  }
  Msg& Label(const std::string& l) {
    U8(static_cast<uint8_t>(l.size()));
    b.insert(b.end(), l.begin(), l.end());
    return *this;
  }
  Msg& Name(const std::string& dotted) {  // "a.b" -> 1a1b0
    size_t start = 0;
    while (start < dotted.size()) {
      size_t dot = dotted.find('.', start);
      if (dot == std::string::npos) dot = dotted.size();
      Label(dotted.substr(start, dot - start));
      start = dot + 1;
    }
    return U8(0);
  }
  Msg& Ptr(uint16_t offset) { return U16(0xC000 | offset); }
  Msg& Question(const std::string& name, uint16_t type = kTypeA) {
    return Name(name).U16(type).U16(kClassIn);
  }
  Msg& A(uint32_t addr, uint32_t ttl) { return U16(kTypeA).U16(kClassIn).U32(ttl).U16(4).U32(addr); }
};

Question Q(const std::string& dotted, uint16_t type = kTypeA) {
  return Question{*NameFromDotted(dotted), type, kClassIn};
}

constexpr uint32_t kAddr = 0xC0000201;  // 192.0.2.1

TEST(DnsQueryTest, ParsesAPlainQuery) {
  Msg m;
  m.Header(0x1234, 0x0100, 1, 0, 0, 0).Question("Api.Example.com");
  auto q = ParseQuery(m.b);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->id, 0x1234);
  EXPECT_TRUE(q->recursion_desired);
  EXPECT_EQ(q->opcode, 0);
  EXPECT_EQ(Dotted(q->question.name), "api.example.com");
  EXPECT_EQ(q->question.name.labels[0], "Api") << "case kept for the echo";
  EXPECT_EQ(q->question.type, kTypeA);
  EXPECT_FALSE(q->edns);
  EXPECT_EQ(q->udp_size, 512u);
}

TEST(DnsQueryTest, EdnsSizeIsClampedTo512Through1232) {
  for (auto [advertised, expected] : {std::pair<uint16_t, size_t>{4096, 1232},
                                      {1232, 1232}, {700, 700}, {100, 512}}) {
    Msg m;
    m.Header(1, 0, 1, 0, 0, 1).Question("a.example").U8(0).U16(kTypeOpt).U16(advertised).U32(0).U16(0);
    auto q = ParseQuery(m.b);
    ASSERT_TRUE(q.ok()) << q.status();
    EXPECT_TRUE(q->edns);
    EXPECT_EQ(q->udp_size, expected) << advertised;
  }
}

// Messages a sandbox could send that must be refused without reading out of bounds.
TEST(DnsQueryTest, HostileQueriesAreErrors) {
  std::vector<std::pair<std::string, Bytes>> cases;
  auto add = [&](std::string what, Msg m) { cases.emplace_back(std::move(what), std::move(m.b)); };
  add("empty", Msg{});
  add("short header", Msg{}.U16(1).U16(0).U16(1));
  add("response bit", Msg{}.Header(1, 0x8000, 1, 0, 0, 0).Question("a.example"));
  add("truncated bit", Msg{}.Header(1, 0x0200, 1, 0, 0, 0).Question("a.example"));
  add("no question", Msg{}.Header(1, 0, 0, 0, 0, 0));
  add("two questions", Msg{}.Header(1, 0, 2, 0, 0, 0).Question("a.example").Question("b.example"));
  add("answer in a query", Msg{}.Header(1, 0, 1, 1, 0, 0).Question("a.example").Name("a.example").A(1, 1));
  add("authority in a query", Msg{}.Header(1, 0, 1, 0, 1, 0).Question("a.example"));
  add("two additionals", Msg{}.Header(1, 0, 1, 0, 0, 2).Question("a.example"));
  add("question cut in the name", Msg{}.Header(1, 0, 1, 0, 0, 0).U8(5).U8('a'));
  add("question without type", Msg{}.Header(1, 0, 1, 0, 0, 0).Name("a.example").U8(0));
  add("no terminating label", Msg{}.Header(1, 0, 1, 0, 0, 0).Label("a"));
  add("reserved label type 0x40", Msg{}.Header(1, 0, 1, 0, 0, 0).U8(0x41).U8('a').U8(0).U16(1).U16(1));
  add("reserved label type 0x80", Msg{}.Header(1, 0, 1, 0, 0, 0).U8(0x81).U8('a').U8(0).U16(1).U16(1));
  add("pointer to itself", Msg{}.Header(1, 0, 1, 0, 0, 0).Ptr(12).U16(1).U16(1));
  add("forward pointer", Msg{}.Header(1, 0, 1, 0, 0, 0).Ptr(14).Name("a").U16(1).U16(1));
  add("pointer into the header", Msg{}.Header(1, 0, 1, 0, 0, 0).Ptr(2).U16(1).U16(1));
  add("pointer past the end", Msg{}.Header(1, 0, 1, 0, 0, 0).Ptr(0x3FFF).U16(1).U16(1));
  add("half a pointer", Msg{}.Header(1, 0, 1, 0, 0, 0).U8(0xC0));
  // "a" then a pointer back to "a": a two-step loop, refused since the pointer is not below
  // the sequence it interrupts.
  add("pointer loop", Msg{}.Header(1, 0, 1, 0, 0, 0).Label("a").Ptr(12).U16(1).U16(1));
  Msg long_name;
  long_name.Header(1, 0, 1, 0, 0, 0);
  for (int i = 0; i < 5; ++i) long_name.Label(std::string(60, 'a'));
  long_name.U8(0).U16(1).U16(1);
  add("name over 255 octets", long_name);
  add("OPT not at the root", Msg{}.Header(1, 0, 1, 0, 0, 1).Question("a.example").Name("x").U16(kTypeOpt).U16(512).U32(0).U16(0));
  add("additional not an OPT", Msg{}.Header(1, 0, 1, 0, 0, 1).Question("a.example").U8(0).A(1, 1));
  add("OPT rdata past the end", Msg{}.Header(1, 0, 1, 0, 0, 1).Question("a.example").U8(0).U16(kTypeOpt).U16(512).U32(0).U16(40));
  add("bytes after the question", Msg{}.Header(1, 0, 1, 0, 0, 0).Question("a.example").U8(0));
  Msg huge;
  huge.Header(1, 0, 1, 0, 0, 0).Question("a.example");
  huge.b.resize(70000);
  add("over 64 KiB", huge);
  for (const auto& [what, bytes] : cases) {
    EXPECT_FALSE(ParseQuery(bytes).ok()) << what;
  }
}

TEST(DnsQueryTest, LongestLegalNameIsAccepted) {
  Msg m;
  m.Header(1, 0, 1, 0, 0, 0);
  // 3 * 64 + 62 + 1 = 255 octets on the wire.
  for (int i = 0; i < 3; ++i) m.Label(std::string(63, 'a'));
  m.Label(std::string(61, 'b')).U8(0).U16(1).U16(1);
  EXPECT_TRUE(ParseQuery(m.b).ok());
}

TEST(DnsNameTest, HostnamesAndDottedForms) {
  EXPECT_TRUE(NameFromDotted("api.example.com").ok());
  EXPECT_TRUE(NameFromDotted("api.example.com.").ok());
  EXPECT_TRUE(NameFromDotted("_acme-challenge.x-1.example").ok());
  EXPECT_FALSE(NameFromDotted("").ok());
  EXPECT_FALSE(NameFromDotted(".").ok());
  EXPECT_FALSE(NameFromDotted("a..b").ok());
  EXPECT_FALSE(NameFromDotted("a b.example").ok());
  EXPECT_FALSE(NameFromDotted(std::string(64, 'a') + ".example").ok());
  EXPECT_TRUE(SameName(*NameFromDotted("API.example.COM"), *NameFromDotted("api.EXAMPLE.com")));
  EXPECT_FALSE(SameName(*NameFromDotted("a.example"), *NameFromDotted("a.example.com")));
  // A label holding a dot is not a host name, so it can never pass for two labels.
  EXPECT_FALSE(IsHostname(Name{{"a.example", "com"}}));
  EXPECT_FALSE(IsHostname(Name{{"a", std::string("b\0c", 3)}}));
  EXPECT_EQ(Dotted(Name{}), ".");
}

// An upstream answer: api.example.com CNAME edge.cdn.example -> 192.0.2.1, 192.0.2.2, with
// compression pointers and unrelated records that must be dropped.
Msg CnameAnswer(uint16_t id) {
  Msg m;
  m.Header(id, 0x8180, 1, 5, 1, 1);
  m.Question("API.example.com");                              // at 12
  m.Ptr(12).U16(kTypeCname).U16(kClassIn).U32(300).U16(11);  // rdata: "edge.cdn" + ptr
  size_t edge = m.b.size();
  m.Label("edge").Label("cdn").Ptr(12 + 4);  // edge.cdn.example.com
  m.Ptr(static_cast<uint16_t>(edge)).A(kAddr, 60);
  m.Ptr(static_cast<uint16_t>(edge)).A(kAddr + 1, 120);
  m.Name("evil.example").A(0x06060606, 60);  // not in the chain
  m.Ptr(12).U16(kTypeAaaa).U16(kClassIn).U32(60).U16(16).U32(0).U32(0).U32(0).U32(0);
  m.Name("example.com").U16(2).U16(kClassIn).U32(60).U16(2).Ptr(12);  // authority NS
  m.U8(0).U16(kTypeOpt).U16(1232).U32(0).U16(0);
  return m;
}

TEST(DnsResponseTest, ParsesAnswersAndFollowsTheCnameChain) {
  Msg m = CnameAnswer(7);
  auto r = ParseResponse(m.b, 7, Q("api.example.com"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rcode, kNoError);
  EXPECT_FALSE(r->truncated);
  ASSERT_EQ(r->answers.size(), 4u) << "A and CNAME records of the answer section only";
  Chain chain = FollowChain(Q("api.example.com").name, r->answers);
  ASSERT_EQ(chain.records.size(), 3u);
  EXPECT_EQ(chain.records[0].type, kTypeCname);
  EXPECT_EQ(Dotted(chain.records[0].target), "edge.cdn.example.com");
  EXPECT_EQ(chain.addrs, (std::vector<uint32_t>{kAddr, kAddr + 1}));
  EXPECT_EQ(chain.ttl, 60u);
}

TEST(DnsResponseTest, ReplyToAnotherQueryIsRefused) {
  Msg m = CnameAnswer(7);
  EXPECT_TRUE(absl::IsNotFound(ParseResponse(m.b, 8, Q("api.example.com")).status()));
  EXPECT_TRUE(absl::IsNotFound(ParseResponse(m.b, 7, Q("api.example.org")).status()));
  EXPECT_TRUE(absl::IsNotFound(ParseResponse(m.b, 7, Q("api.example.com", kTypeAaaa)).status()));
  Msg query;
  query.Header(7, 0x0100, 1, 0, 0, 0).Question("api.example.com");
  EXPECT_FALSE(ParseResponse(query.b, 7, Q("api.example.com")).ok()) << "QR clear";
}

TEST(DnsResponseTest, TruncatedReplyNeedsOnlyItsQuestion) {
  Msg m;
  m.Header(9, 0x8380, 1, 3, 0, 0).Question("a.example").Name("a.example");  // cut mid-record
  auto r = ParseResponse(m.b, 9, Q("a.example"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->truncated);
}

TEST(DnsResponseTest, HostileRepliesAreErrors) {
  std::vector<std::pair<std::string, Msg>> cases = {
      {"A record of 5 octets", Msg{}.Header(1, 0x8180, 1, 1, 0, 0).Question("a.example").Ptr(12).U16(1).U16(1).U32(1).U16(5).U32(1).U8(0)},
      {"rdata past the end", Msg{}.Header(1, 0x8180, 1, 1, 0, 0).Question("a.example").Ptr(12).U16(16).U16(1).U32(1).U16(300)},
      {"CNAME rdata shorter than its name", Msg{}.Header(1, 0x8180, 1, 1, 0, 0).Question("a.example").Ptr(12).U16(5).U16(1).U32(1).U16(1).Name("b")},
      {"more records than bytes", Msg{}.Header(1, 0x8180, 1, 60000, 0, 0).Question("a.example")},
      {"trailing bytes", Msg{}.Header(1, 0x8180, 1, 0, 0, 0).Question("a.example").U8(1)},
      {"CNAME target points at itself", Msg{}.Header(1, 0x8180, 1, 1, 0, 0).Question("a.example").Ptr(12).U16(5).U16(1).U32(1).U16(2).Ptr(39)},
  };
  for (const auto& [what, m] : cases) {
    EXPECT_FALSE(ParseResponse(m.b, 1, Q("a.example")).ok()) << what;
  }
}

TEST(DnsResponseTest, TopBitTtlCountsAsZero) {
  Msg m;
  m.Header(1, 0x8180, 1, 1, 0, 0).Question("a.example").Ptr(12).A(kAddr, 0x80000000);
  auto r = ParseResponse(m.b, 1, Q("a.example"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->answers[0].ttl, 0u);
}

TEST(DnsChainTest, LoopsAndLongChainsEndWithinTheBound) {
  Record ab{*NameFromDotted("a.example"), kTypeCname, kClassIn, 60, 0, *NameFromDotted("b.example")};
  Record ba{*NameFromDotted("b.example"), kTypeCname, kClassIn, 60, 0, *NameFromDotted("a.example")};
  Chain loop = FollowChain(ab.name, {ab, ba});
  EXPECT_TRUE(loop.addrs.empty());
  EXPECT_LE(loop.records.size(), kMaxChain + 1);

  std::vector<Record> long_chain;
  for (size_t i = 0; i < 20; ++i) {
    long_chain.push_back(Record{*NameFromDotted("n" + std::to_string(i) + ".example"), kTypeCname,
                                kClassIn, 60, 0,
                                *NameFromDotted("n" + std::to_string(i + 1) + ".example")});
  }
  long_chain.push_back(Record{*NameFromDotted("n20.example"), kTypeA, kClassIn, 60, kAddr, {}});
  Chain chain = FollowChain(long_chain[0].name, long_chain);
  EXPECT_TRUE(chain.addrs.empty()) << "an address beyond the chain bound is not followed";

  Chain none = FollowChain(*NameFromDotted("other.example"), long_chain);
  EXPECT_TRUE(none.records.empty());
  EXPECT_EQ(none.ttl, 0u);
}

TEST(DnsBuildTest, ResponseRoundTripsAndEchoesTheQuestion) {
  Msg m;
  m.Header(0xBEEF, 0x0100, 1, 0, 0, 0).Question("Api.Example.com");
  Query q = *ParseQuery(m.b);
  auto r = ParseResponse(CnameAnswer(7).b, 7, Q("api.example.com"));
  Chain chain = FollowChain(q.question.name, r->answers);
  Bytes out = BuildResponse(q, kNoError, chain.records, 512);
  EXPECT_EQ(out[0], 0xBE);
  EXPECT_EQ(out[1], 0xEF);
  EXPECT_TRUE(out[2] & 0x01) << "RD echoed";
  auto back = ParseResponse(out, 0xBEEF, q.question);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->answers.size(), 3u);
  EXPECT_EQ(FollowChain(q.question.name, back->answers).addrs, chain.addrs);
  // The question is echoed as spelled.
  EXPECT_EQ(std::string(out.begin() + 13, out.begin() + 16), "Api");
}

TEST(DnsBuildTest, ErrorsAndTruncation) {
  Msg m;
  m.Header(5, 0x0100, 1, 0, 0, 0).Question("a.example");
  Query q = *ParseQuery(m.b);
  Bytes nx = BuildResponse(q, kNxDomain, {}, 512);
  auto back = ParseResponse(nx, 5, q.question);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->rcode, kNxDomain);
  EXPECT_TRUE(back->answers.empty());

  std::vector<Record> many;
  for (uint32_t i = 0; i < 40; ++i) many.push_back(Record{q.question.name, kTypeA, kClassIn, 60, kAddr + i, {}});
  Bytes big = BuildResponse(q, kNoError, many, 512);
  EXPECT_LE(big.size(), 512u);
  auto cut = ParseResponse(big, 5, q.question);
  ASSERT_TRUE(cut.ok());
  EXPECT_TRUE(cut->truncated) << "too big for UDP: TC so the client asks over TCP";
  Bytes whole = BuildResponse(q, kNoError, many, 65535);
  auto full = ParseResponse(whole, 5, q.question);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->answers.size(), 40u);
}

TEST(DnsBuildTest, QueryRoundTripsWithEdns) {
  Bytes query = BuildQuery(0x4242, Q("a.example"), 1232);
  auto q = ParseQuery(query);
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->id, 0x4242);
  EXPECT_TRUE(q->edns);
  EXPECT_EQ(q->udp_size, 1232u);
  EXPECT_TRUE(q->recursion_desired);
  Bytes reply = BuildResponse(*q, kNoError, {}, 512);
  auto r = ParseResponse(reply, 0x4242, q->question);
  ASSERT_TRUE(r.ok()) << "an OPT in the additional section is fine";
}

// Random damage to valid messages: every parse ends, and whatever is accepted is bounded.
TEST(DnsFuzzTest, MutatedMessagesNeverCrash) {
  std::mt19937 rng(20261201);  // fixed seed: a failure reproduces
  std::vector<Bytes> seeds = {CnameAnswer(1).b, BuildQuery(1, Q("a.b.example"), 1232),
                              Msg{}.Header(1, 0, 1, 0, 0, 0).Question("x.example").b};
  size_t accepted = 0;
  for (int i = 0; i < 30000; ++i) {
    Bytes m = seeds[i % seeds.size()];
    int edits = 1 + rng() % 4;
    for (int e = 0; e < edits && !m.empty(); ++e) {
      size_t at = rng() % m.size();
      switch (rng() % 4) {
        case 0: m[at] = static_cast<uint8_t>(rng()); break;
        case 1: m.resize(at); break;                       // truncate
        case 2: m.insert(m.begin() + at, static_cast<uint8_t>(rng())); break;
        case 3: m[at] = 0xC0; break;                       // plant a pointer
      }
    }
    auto q = ParseQuery(m);
    auto r = ParseResponse(m, 1, Q("a.b.example"));
    for (const auto* name : {q.ok() ? &q->question.name : nullptr}) {
      if (name == nullptr) continue;
      size_t wire = 1;
      for (const auto& l : name->labels) wire += 1 + l.size();
      EXPECT_LE(wire, kMaxNameWire);
    }
    if (r.ok()) {
      EXPECT_LE(r->answers.size(), kMaxAnswers);
      FollowChain(Q("a.b.example").name, r->answers);
    }
    accepted += q.ok() + r.ok();
  }
  EXPECT_GT(accepted, 0u) << "the mutations should leave some messages valid";
}

}  // namespace
}  // namespace paseo::network::dns
