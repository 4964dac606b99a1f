// ParseRequestHead and ChunkedBody on what clients send and on a table of smuggling-shaped
// and malformed requests, as a hostile sandbox would send them.
#include "egress/http_head.h"

#include <string>

#include "absl/strings/escaping.h"
#include "gtest/gtest.h"

namespace paseo::egress {
namespace {

absl::Span<const uint8_t> Span(const std::string& s) {
  return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

TEST(RequestHeadTest, CurlsRequest) {
  std::string req =
      "GET /v1/models?x=1 HTTP/1.1\r\nHost: API.example.com:8080\r\nUser-Agent: curl/7.88.1\r\n"
      "Accept: */*\r\n\r\nleft";
  auto r = ParseRequestHead(Span(req));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  const RequestHead& h = **r;
  EXPECT_EQ(h.method, "GET");
  EXPECT_EQ(h.target, "/v1/models?x=1");
  EXPECT_EQ(h.host, "api.example.com");
  EXPECT_EQ(h.port, 8080);
  EXPECT_EQ(h.head_size, req.size() - 4);
  EXPECT_FALSE(h.chunked);
  EXPECT_EQ(h.content_length, 0u);
}

TEST(RequestHeadTest, BodiesAreFramed) {
  auto r = ParseRequestHead(Span("POST / HTTP/1.1\r\nhost: a.example.com\r\ncontent-length:  12 \r\n\r\n"));
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->content_length, 12u);
  EXPECT_FALSE((*r)->port.has_value());
  r = ParseRequestHead(Span("POST / HTTP/1.1\r\nHost: a.example.com\r\nTransfer-Encoding: Chunked\r\n\r\n"));
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_TRUE((*r)->chunked);
}

TEST(RequestHeadTest, AnAbsoluteTargetForTheSameHostIsAccepted) {
  auto r = ParseRequestHead(
      Span("GET http://A.example.com:81/x HTTP/1.1\r\nHost: a.example.com:81\r\n\r\n"));
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->host, "a.example.com");
  r = ParseRequestHead(Span("OPTIONS * HTTP/1.1\r\nHost: a.example.com\r\n\r\n"));
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
}

TEST(RequestHeadTest, EveryPrefixAsksForMore) {
  std::string req = "PUT /a HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 3\r\n\r\n";
  for (size_t n = 0; n < req.size(); ++n) {
    auto r = ParseRequestHead(Span(req.substr(0, n)));
    ASSERT_TRUE(r.ok()) << n << ": " << r.status();
    EXPECT_FALSE(r->has_value()) << n;
  }
}

TEST(RequestHeadTest, MalformedAndSmugglingShapedHeadsAreRefused) {
  using namespace std::string_literals;
  const std::string cases[] = {
      "\x16\x03\x01\x00\x05",  // TLS on a plain port: refused before any blank line
      "GET / HTTP/1.1\nHost: a.example.com\n\n",
      "GET / HTTP/1.1\r\nHost: a.example.com\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example.com\r\nX: a\0b\r\n\r\n"s,
      "GET / HTTP/2.0\r\nHost: a.example.com\r\n\r\n",
      "GET / HTTP/1.1 extra\r\nHost: a.example.com\r\n\r\n",
      "GET  / HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
      "G(T / HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
      "GET / HTTP/1.1\r\n\r\n",                                              // no Host
      "GET / HTTP/1.0\r\n\r\n",                                              // no Host either
      "GET / HTTP/1.1\r\nHost: a.example.com\r\nHost: b.example.com\r\n\r\n",
      "GET / HTTP/1.1\r\nHost : a.example.com\r\n\r\n",                      // space before colon
      "GET / HTTP/1.1\r\nHost: a.example.com\r\n b.example.com\r\n\r\n",     // folded
      "GET / HTTP/1.1\r\nX-A: 1\r\n\tHost: b.example.com\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: [::1]:80\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example.com:0\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example.com:65536\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example.com:+80\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example.com.\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: user@a.example.com\r\n\r\n",
      "GET / HTTP/1.1\r\nHost:\r\n\r\n",
      "GET http://b.example.com/ HTTP/1.1\r\nHost: a.example.com\r\n\r\n",  // target names another
      "GET http://a.example.com:81/ HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
      "GET http://x@a.example.com/ HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
      "GET https://a.example.com/ HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
      "GET a.example.com/ HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
      "GET * HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
      "CONNECT a.example.com:443 HTTP/1.1\r\nHost: a.example.com:443\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 1, 2\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: -1\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 99999999999999999999\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
      "POST / HTTP/1.0\r\nHost: a.example.com\r\nTransfer-Encoding: chunked\r\n\r\n",
      "GET /\x7f HTTP/1.1\r\nHost: a.example.com\r\n\r\n",
      "GET / HTTP/1.1\r\nHost: a.example.com\r\r\n\r\n",                    // a bare CR
      "GET / HTTP/1.1\r\nHost: a.example.com\rX: 1\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nTransfer-Encoding: chunked\x0b\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nContent-Length: \x0c5\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nContent_Length: 5\r\n\r\n",
      "POST / HTTP/1.1\r\nHost: a.example.com\r\nTransfer_Encoding: chunked\r\n\r\n",
  };
  for (const std::string& req : cases) {
    auto r = ParseRequestHead(Span(req));
    EXPECT_FALSE(r.ok()) << "accepted or awaited: " << absl::CEscape(req);
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(r.status().message().find("malformed HTTP request"), std::string::npos);
    }
  }
}

TEST(RequestHeadTest, AHeadPastTheBoundIsRefusedNotAwaited) {
  std::string req = "GET / HTTP/1.1\r\nHost: a.example.com\r\nX: " + std::string(kMaxRequestHead, 'a');
  auto r = ParseRequestHead(Span(req));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("longer than the proxy reads"), std::string::npos);
}

// The body's bytes, fed in pieces of every size: where it ends does not depend on how it came.
TEST(ChunkedBodyTest, FindsTheEndHoweverTheBytesArrive) {
  std::string body = "5;name=value\r\nhello\r\n1A\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX-T: 1\r\n\r\n";
  std::string next = "GET / HTTP/1.1\r\n";
  std::string all = body + next;
  for (size_t piece = 1; piece <= all.size(); ++piece) {
    ChunkedBody chunked;
    size_t consumed = 0;
    for (size_t at = 0; at < all.size() && !chunked.done(); at += piece) {
      std::string part = all.substr(at, piece);
      auto n = chunked.Feed(Span(part));
      ASSERT_TRUE(n.ok()) << piece << ": " << n.status();
      consumed += *n;
      if (!chunked.done()) {
        EXPECT_EQ(*n, part.size()) << piece;
      }
    }
    EXPECT_TRUE(chunked.done()) << piece;
    EXPECT_EQ(consumed, body.size()) << piece;
  }
}

TEST(ChunkedBodyTest, MalformedChunksAreRefused) {
  for (const char* c : {"x\r\n", "\r\n", "5\nhello\r\n", "80000000\r\n", "000000001\r\n", "5\r\nhelloX\r\n", "5\r\nhello\n",
                        "11111111111111111\r\n", "0\r\nbad\ntrailer\r\n\r\n", "-1\r\n",
                        "5 \r\nhello\r\n", "0\r\n\n"}) {
    ChunkedBody chunked;
    auto n = chunked.Feed(Span(c));
    EXPECT_FALSE(n.ok()) << absl::CEscape(c);
  }
  // A chunk extension or trailer line cannot grow without bound.
  ChunkedBody chunked;
  auto n = chunked.Feed(Span("1;" + std::string(5000, 'a')));
  EXPECT_FALSE(n.ok());
}

TEST(ChunkedBodyTest, AHugeChunkIsCountedNotBuffered) {
  ChunkedBody chunked;
  ASSERT_TRUE(chunked.Feed(Span("7fffffff\r\n")).ok());
  std::string megabyte(1 << 20, 'x');
  for (int i = 0; i < 4; ++i) {
    auto n = chunked.Feed(Span(megabyte));
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(*n, megabyte.size());
  }
  EXPECT_FALSE(chunked.done());
}

}  // namespace
}  // namespace paseo::egress
