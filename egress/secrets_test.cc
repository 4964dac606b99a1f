#include "egress/secrets.h"

#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace paseo::egress {
namespace {

BoundSecret Secret(std::string name, std::string header, std::string placeholder, std::string value) {
  return {std::move(name), {"api.example.com"}, std::move(header), std::move(placeholder),
          std::make_shared<SecretBytes>(value)};
}

std::string Inject(const std::string& head, const std::vector<BoundSecret>& secrets,
                   std::vector<std::string>* used) {
  std::vector<const BoundSecret*> bound;
  for (const auto& s : secrets) bound.push_back(&s);
  return std::string(InjectSecrets(head, bound, used).view());
}

TEST(InjectSecretsTest, OnlyTheBoundHeadersValueChanges) {
  std::vector<BoundSecret> secrets = {Secret("anthropic", "x-api-key", "PH1", "real-1")};
  std::vector<std::string> used;
  std::string out = Inject(
      "GET /PH1 HTTP/1.1\r\nHost: api.example.com\r\nX-API-KEY: PH1\r\nx-api-key-2: PH1\r\n"
      "x-other: PH1\r\n\r\n",
      secrets, &used);
  EXPECT_EQ(out,
            "GET /PH1 HTTP/1.1\r\nHost: api.example.com\r\nX-API-KEY: real-1\r\nx-api-key-2: PH1\r\n"
            "x-other: PH1\r\n\r\n");
  EXPECT_EQ(used, std::vector<std::string>{"anthropic"});
}

TEST(InjectSecretsTest, APrefixedValueKeepsItsPrefixAndEveryOccurrenceIsReplaced) {
  std::vector<BoundSecret> secrets = {Secret("openai", "authorization", "PH2", "sk-real")};
  std::vector<std::string> used;
  EXPECT_EQ(Inject("GET / HTTP/1.1\r\nAuthorization: Bearer PH2\r\nauthorization: PH2PH2\r\n\r\n",
                   secrets, &used),
            "GET / HTTP/1.1\r\nAuthorization: Bearer sk-real\r\nauthorization: sk-realsk-real\r\n\r\n");
}

TEST(InjectSecretsTest, WithoutThePlaceholderNothingIsUsed) {
  std::vector<BoundSecret> secrets = {Secret("anthropic", "x-api-key", "PH1", "real-1")};
  std::vector<std::string> used;
  std::string head = "GET / HTTP/1.1\r\nHost: a\r\nx-api-key: someone-elses-key\r\n\r\n";
  EXPECT_EQ(Inject(head, secrets, &used), head);
  EXPECT_TRUE(used.empty());
}

TEST(InjectSecretsTest, TwoSecretsInTheirOwnHeaders) {
  std::vector<BoundSecret> secrets = {Secret("a", "x-api-key", "PHA", "va"),
                                      Secret("b", "authorization", "PHB", "vb")};
  std::vector<std::string> used;
  EXPECT_EQ(Inject("GET / HTTP/1.1\r\nx-api-key: PHA PHB\r\nauthorization: PHB PHA\r\n\r\n", secrets, &used),
            "GET / HTTP/1.1\r\nx-api-key: va PHB\r\nauthorization: vb PHA\r\n\r\n");
  EXPECT_EQ(used.size(), 2u);
}

TEST(SecretsForTest, OnlyItsHosts) {
  std::vector<BoundSecret> secrets = {Secret("a", "x-api-key", "PHA", "va")};
  EXPECT_EQ(SecretsFor(secrets, "api.example.com").size(), 1u);
  EXPECT_TRUE(SecretsFor(secrets, "api.example.com.evil").empty());
  EXPECT_TRUE(SecretsFor(secrets, "x.api.example.com").empty());
}

// The kernel's own view of the mapping: VmFlags "dd" (MADV_DONTDUMP) in /proc/self/smaps.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  auto at = reinterpret_cast<uintptr_t>(p);
  while (std::getline(smaps, line)) {
    std::vector<std::string> fields = absl::StrSplit(line, ' ');
    if (!fields.empty() && fields[0].find('-') != std::string::npos && !absl::EndsWith(fields[0], ":")) {
      std::vector<std::string> range = absl::StrSplit(fields[0], '-');
      uint64_t lo = 0, hi = 0;
      inside = range.size() == 2 && absl::SimpleHexAtoi(range[0], &lo) &&
               absl::SimpleHexAtoi(range[1], &hi) && at >= lo && at < hi;
    } else if (inside && absl::StartsWith(line, "VmFlags:")) {
      return line;
    }
  }
  return "";
}

TEST(SecretBytesTest, ItsMemoryIsLeftOutOfCoreDumps) {
  SecretBytes value("sk-ant-real");
  std::string flags = VmFlagsOf(value.data());
  EXPECT_NE(flags.find(" dd"), std::string::npos) << flags;
  value.Append(std::string(10000, 'x'));  // grown into a new mapping: still out of dumps
  EXPECT_NE(VmFlagsOf(value.data()).find(" dd"), std::string::npos);
  EXPECT_EQ(value.view().substr(0, 11), "sk-ant-real");
  EXPECT_EQ(value.size(), 10011u);
}

}  // namespace
}  // namespace paseo::egress
