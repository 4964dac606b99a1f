#include "common/message_check.h"

#include <capnp/message.h>
#include <capnp/pretty-print.h>
#include <capnp/serialize.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>

#include "absl/strings/match.h"
#include "schema/api.capnp.h"

namespace paseo {
namespace {

// A ProcessSpec with every pointer field set, as the flat words a client sends (one segment:
// word 0 is the segment table, segment word k is words[1 + k]).
kj::Array<capnp::word> SpecWords() {
  capnp::MallocMessageBuilder builder;
  auto spec = builder.initRoot<api::ProcessSpec>();
  auto argv = spec.initArgv(2);
  argv.set(0, "sh");
  argv.set(1, "-c");
  spec.initEnv(1).set(0, "A=b");
  spec.setCwd("/workspace");
  spec.setKey("k");
  spec.setWorkspaceCwd("sub");
  return capnp::messageToFlatArray(builder);
}

// The segment word holding the root struct's pointer number `index`.
uint64_t* PointerWord(kj::Array<capnp::word>& words, unsigned index) {
  auto node = capnp::Schema::from<api::ProcessSpec>().getProto().getStruct();
  // Root pointer at segment word 0; the struct it points at right after it (as built above).
  return reinterpret_cast<uint64_t*>(&words[1 + 1 + node.getDataWordCount() + index]);
}

absl::Status Check(kj::ArrayPtr<const capnp::word> words, capnp::ReaderOptions options = {}) {
  capnp::FlatArrayMessageReader reader(words, options);
  return CheckReadable(reader.getRoot<capnp::AnyPointer>(),
                       capnp::Schema::from<api::ProcessSpec>());
}

TEST(MessageCheckTest, AWellFormedMessageIsReadable) {
  auto words = SpecWords();
  EXPECT_TRUE(Check(words).ok()) << Check(words);
}

TEST(MessageCheckTest, APointerOutOfBoundsIsNamedWithItsField) {
  auto words = SpecWords();
  // A list pointer's offset (bits 2..31) far past the segment's end.
  *PointerWord(words, 0) = (*PointerWord(words, 0) & ~uint64_t{0xfffffffc}) | (uint64_t{1} << 28);
  absl::Status s = Check(words);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "malformed request: a pointer out of bounds at argv");
}

TEST(MessageCheckTest, APointerOfTheWrongKindIsNamedWithItsField) {
  auto words = SpecWords();
  // env (pointer 1): a struct pointer (kind 0) where a list is expected.
  *PointerWord(words, 1) &= ~uint64_t{3};
  absl::Status s = Check(words);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "malformed request: a pointer of the wrong kind at env");
}

TEST(MessageCheckTest, TextWithoutItsNulIsNamedWithItsElement) {
  auto words = SpecWords();
  auto bytes = words.asBytes();
  // "-c\0", argv[1]'s text: its NUL becomes a letter.
  std::string_view all(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
  size_t at = all.find(std::string_view("-c\0", 3));
  ASSERT_NE(at, std::string_view::npos);
  bytes[at + 2] = 'x';
  absl::Status s = Check(words);
  EXPECT_EQ(s.message(), "malformed request: text without its terminating NUL at argv[1]");
}

TEST(MessageCheckTest, TheReadersLimitsAreReasonsOfTheirOwn) {
  auto words = SpecWords();
  capnp::ReaderOptions tiny;
  tiny.traversalLimitInWords = 4;
  absl::Status s = Check(words, tiny);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(s.message(),
                               "malformed request: more data than the message may hold at "))
      << s;
  capnp::ReaderOptions shallow;
  shallow.nestingLimit = 1;
  s = Check(words, shallow);
  EXPECT_EQ(s.message(), "malformed request: nesting too deep at argv") << s;
}

// Whatever a message's words are: either the check passes and then reading every field (as
// prettyPrint does) cannot fail, or it fails with our words alone.
TEST(MessageCheckTest, ARandomlyCorruptedMessageIsReadableOrRefusedInOurWords) {
  auto good = SpecWords();
  std::mt19937_64 rng(20261202);
  int refused = 0;
  for (int round = 0; round < 20000; ++round) {
    auto words = kj::heapArray<capnp::word>(good.size());
    memcpy(words.begin(), good.begin(), good.size() * sizeof(capnp::word));
    auto* raw = reinterpret_cast<uint64_t*>(words.begin());
    // Leave the segment table alone (a bad one is the transport's to refuse).
    for (int flips = 1 + static_cast<int>(rng() % 3); flips > 0; --flips)
      raw[1 + rng() % (words.size() - 1)] ^= uint64_t{1} << (rng() % 64);
    capnp::FlatArrayMessageReader reader(words);
    auto root = reader.getRoot<capnp::AnyPointer>();
    absl::Status s = CheckReadable(root, capnp::Schema::from<api::ProcessSpec>());
    if (s.ok()) {
      auto read = kj::runCatchingExceptions(
          [&] { capnp::prettyPrint(root.getAs<api::ProcessSpec>()).flatten(); });
      EXPECT_EQ(read, nullptr) << "checked readable, but reading failed: "
                               << KJ_ASSERT_NONNULL(read).getDescription().cStr();
    } else {
      ++refused;
      ASSERT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      ASSERT_TRUE(absl::StartsWith(s.message(), "malformed request: ")) << s;
      ASSERT_EQ(s.message().find("boundsCheck"), std::string::npos) << s;
      ASSERT_EQ(s.message().find("Message"), std::string::npos) << s;
    }
  }
  EXPECT_GT(refused, 100) << "the corruptions never made an unreadable message";
}

}  // namespace
}  // namespace paseo
