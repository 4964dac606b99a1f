// ParseClientHello on real ClientHellos (OpenSSL's, made on memory BIOs) and on a table of
// hand-built malformed ones, as a hostile sandbox would send them.
#include "egress/client_hello.h"

#include <string>
#include <vector>

#include "egress/openssl_hello.h"
#include "gtest/gtest.h"

namespace paseo::egress {
namespace {

using Bytes = std::vector<uint8_t>;

// A hand-built hello: the body's fields, then `extensions` (each type and data) in one or
// more records of at most `record_size` payload bytes.
struct Ext {
  uint16_t type;
  Bytes data;
};
void Put16(Bytes& b, size_t v) {
  b.push_back(static_cast<uint8_t>(v >> 8));
  b.push_back(static_cast<uint8_t>(v));
}
Bytes Body(const std::vector<Ext>& extensions, bool with_extensions = true) {
  Bytes b = {3, 3};
  b.insert(b.end(), 32, 0xab);  // random
  b.push_back(0);               // session id
  Put16(b, 2);
  b.insert(b.end(), {0x13, 0x01});  // TLS_AES_128_GCM_SHA256
  b.insert(b.end(), {1, 0});        // null compression
  if (!with_extensions) return b;
  Bytes ext;
  for (const Ext& e : extensions) {
    Put16(ext, e.type);
    Put16(ext, e.data.size());
    ext.insert(ext.end(), e.data.begin(), e.data.end());
  }
  Put16(b, ext.size());
  b.insert(b.end(), ext.begin(), ext.end());
  return b;
}
Bytes Handshake(const Bytes& body) {
  Bytes m = {1, static_cast<uint8_t>(body.size() >> 16), static_cast<uint8_t>(body.size() >> 8),
             static_cast<uint8_t>(body.size())};
  m.insert(m.end(), body.begin(), body.end());
  return m;
}
Bytes Records(const Bytes& message, size_t record_size = 16384) {
  Bytes r;
  for (size_t at = 0; at < message.size(); at += record_size) {
    size_t n = std::min(record_size, message.size() - at);
    r.insert(r.end(), {22, 3, 1});
    Put16(r, n);
    r.insert(r.end(), message.begin() + at, message.begin() + at + n);
  }
  return r;
}
Ext Sni(const std::vector<std::pair<uint8_t, std::string>>& names) {
  Bytes list;
  for (const auto& [type, name] : names) {
    list.push_back(type);
    Put16(list, name.size());
    list.insert(list.end(), name.begin(), name.end());
  }
  Bytes data;
  Put16(data, list.size());
  data.insert(data.end(), list.begin(), list.end());
  return {0, data};
}
Ext Sni(const std::string& name) { return Sni({{0, name}}); }
Bytes Hello(const std::vector<Ext>& extensions, size_t record_size = 16384) {
  return Records(Handshake(Body(extensions)), record_size);
}

std::optional<ClientHello> Parsed(const Bytes& bytes) {
  auto r = ParseClientHello(bytes);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::nullopt;
}

TEST(ClientHelloTest, OpenSslsHelloGivesItsNameAndProtocols) {
  Bytes bytes = OpenSslHello("API.Example.com", {"h2", "http/1.1"});
  std::optional<ClientHello> hello = Parsed(bytes);
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->server_name, "api.example.com");
  EXPECT_EQ(hello->alpn, (std::vector<std::string>{"h2", "http/1.1"}));
  EXPECT_EQ(hello->record_bytes, bytes.size());
}

TEST(ClientHelloTest, AHelloWithoutAServerNameHasAnEmptyOne) {
  std::optional<ClientHello> hello = Parsed(OpenSslHello(""));
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->server_name, "");
  hello = Parsed(Records(Handshake(Body({}, /*with_extensions=*/false))));
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->server_name, "");
}

// Every proper prefix of a valid hello asks for more, never fails: the proxy reads as the
// bytes come, and a slow client is not a malformed one.
TEST(ClientHelloTest, EveryPrefixAsksForMore) {
  for (const Bytes& bytes : {OpenSslHello("a.example.com", {"http/1.1"}),
                             Hello({Sni("b.example.com")}, 7)}) {
    for (size_t n = 0; n < bytes.size(); ++n) {
      auto r = ParseClientHello(absl::MakeConstSpan(bytes).subspan(0, n));
      ASSERT_TRUE(r.ok()) << n << ": " << r.status();
      EXPECT_FALSE(r->has_value()) << n;
    }
  }
}

TEST(ClientHelloTest, AHelloSplitOverManyRecordsIsPutTogether) {
  for (size_t size : {1, 2, 3, 5, 100}) {
    std::optional<ClientHello> hello = Parsed(Hello({Sni("split.example.com")}, size));
    ASSERT_TRUE(hello.has_value()) << size;
    EXPECT_EQ(hello->server_name, "split.example.com");
  }
}

TEST(ClientHelloTest, BytesAfterTheHelloAreLeftForTheCaller) {
  Bytes bytes = Hello({Sni("a.example.com")});
  size_t hello_size = bytes.size();
  bytes.insert(bytes.end(), {20, 3, 3, 0, 1, 1});  // a change_cipher_spec record after it
  std::optional<ClientHello> hello = Parsed(bytes);
  ASSERT_TRUE(hello.has_value());
  EXPECT_EQ(hello->record_bytes, hello_size);
}

TEST(ClientHelloTest, MalformedHellosAreRefused) {
  Bytes good_body = Body({Sni("a.example.com")});

  struct Case {
    const char* what;
    Bytes bytes;
  } cases[] = {
      {"plain HTTP", Bytes{'G', 'E', 'T', ' ', '/', ' ', 'H', 'T', 'T', 'P'}},
      {"an SSLv2 hello", Bytes{0x80, 0x2e, 0x01, 0x03, 0x01, 0, 0x15}},
      {"an alert record", Bytes{21, 3, 3, 0, 2, 2, 40}},
      {"record version 2", Bytes{22, 2, 0, 0, 4, 1, 0, 0, 0}},
      {"an empty record", Bytes{22, 3, 1, 0, 0}},
      {"a record over 2^14", Bytes{22, 3, 1, 0x40, 0x01}},
      {"a server hello", Records(Bytes{2, 0, 0, 0})},
      {"a message of 16 MiB", Records(Bytes{1, 0xff, 0xff, 0xff})},
      {"a message over the bound", Records(Bytes{1, 0, 0x40, 0x01}, 16384)},
      {"the body shorter than it says",
       Records(Bytes{1, 0, 0, 4, 3, 3, 0, 0})},
      {"two host names", Hello({Sni({{0, "a.example.com"}, {0, "b.example.com"}})})},
      {"an IPv4 literal", Hello({Sni("192.0.2.1")})},
      {"a trailing dot", Hello({Sni("a.example.com.")})},
      {"one label", Hello({Sni("localhost")})},
      {"an empty name", Hello({Sni("")})},
      {"a name with a NUL", Hello({Sni(std::string("a.example.com\0.evil.com", 24))})},
      {"a name with an underscore", Hello({Sni("a_b.example.com")})},
      {"a label of 64 bytes", Hello({Sni(std::string(64, 'a') + ".example.com")})},
      {"a name of 300 bytes", Hello({Sni(std::string(300, 'a'))})},
      {"an empty server name list", Hello({Ext{0, Bytes{0, 0}}})},
      {"a server name list longer than its extension", Hello({Ext{0, Bytes{0, 9, 0, 0, 1, 'a'}}})},
      {"server_name twice", Hello({Sni("a.example.com"), Sni("b.example.com")})},
      {"any extension twice", Hello({Ext{13, {0, 2, 4, 3}}, Ext{13, {0, 2, 4, 3}}})},
      {"an empty ALPN list", Hello({Ext{16, Bytes{0, 0}}})},
      {"an empty protocol name", Hello({Ext{16, Bytes{0, 1, 0}}})},
      {"extensions longer than the body",
       Records(Handshake([&] {
         Bytes b = Body({}, false);
         Put16(b, 100);
         return b;
       }()))},
      {"bytes after the extensions in the message",
       Records(Handshake([&] {
         Bytes b = good_body;
         b.push_back(0);
         return b;
       }()))},
      {"an odd cipher suite list",
       Records(Handshake([&] {
         Bytes b = {3, 3};
         b.insert(b.end(), 32, 0);
         b.insert(b.end(), {0, 0, 3, 0x13, 0x01, 0x13, 1, 0});
         return b;
       }()))},
      {"a session id of 33 bytes",
       Records(Handshake([&] {
         Bytes b = {3, 3};
         b.insert(b.end(), 32, 0);
         b.push_back(33);
         b.insert(b.end(), 33, 0);
         b.insert(b.end(), {0, 2, 0x13, 0x01, 1, 0});
         return b;
       }()))},
      {"a handshake record that ends inside the hello and then application data",
       [&] {
         Bytes m = Handshake(good_body);
         Bytes r = Records(Bytes(m.begin(), m.begin() + 10));
         r.insert(r.end(), {23, 3, 3, 0, 1, 0});
         return r;
       }()},
  };
  for (const Case& c : cases) {
    auto r = ParseClientHello(c.bytes);
    EXPECT_FALSE(r.ok() && r->has_value()) << c.what << ": accepted";
    if (r.ok()) {
      EXPECT_FALSE(r->has_value()) << c.what;
      ADD_FAILURE() << c.what << ": asks for more instead of refusing";
      continue;
    }
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.what;
    EXPECT_NE(r.status().message().find("malformed TLS ClientHello"), std::string::npos) << c.what;
  }
}

// ECH: an allowed outer name could carry another in the encrypted inner hello.
TEST(ClientHelloTest, AnEncryptedClientHelloIsRefused) {
  for (uint16_t type : {0xfe0d, 0xffce}) {
    auto r = ParseClientHello(Hello({Sni("allowed.example.com"), Ext{type, Bytes(40, 7)}}));
    ASSERT_FALSE(r.ok()) << type;
    EXPECT_NE(r.status().message().find("encrypted ClientHello"), std::string::npos);
  }
}

// A client that keeps sending handshake records never makes the parser wait past the bound.
TEST(ClientHelloTest, RecordsPastTheBoundAreRefusedNotAwaited) {
  Bytes message = Handshake(Body({Ext{21, Bytes(kMaxClientHello, 0)}}));  // a padding extension
  auto r = ParseClientHello(Records(message, 1000));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("longer than the proxy reads"), std::string::npos);
}

TEST(ClientHelloTest, HostNames) {
  for (const char* ok : {"a.b", "api.anthropic.com", "x-1.example.co", "1.example.com",
                         "a.b.c.d.e.f", "xn--bcher-kva.example"})
    EXPECT_TRUE(IsHostName(ok)) << ok;
  for (const char* bad : {"", "a", "a.", ".a", "a..b", "-a.b", "a-.b", "a.b-", "1.2.3.4", "a.123",
                          "a b.c", "a/b.c", "*.a.b", "a.b:443"})
    EXPECT_FALSE(IsHostName(bad)) << bad;
}

}  // namespace
}  // namespace paseo::egress
