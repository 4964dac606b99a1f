// The spawner channel's frames: round trips, and the strict decoding of what a spawner (inside
// the sandbox, so untrusted) may send.
#include "common/spawner_frames.h"

#include <random>

#include "gtest/gtest.h"

namespace paseo::spawner {
namespace {

std::vector<Frame> ReadAll(const std::string& stream, size_t piece, bool* error) {
  FrameReader reader(kMaxDownPayload);
  std::vector<Frame> frames;
  for (size_t at = 0; at < stream.size(); at += piece) {
    reader.Feed(std::string_view(stream).substr(at, piece));
    while (auto f = reader.Next(error)) frames.push_back(*f);
  }
  return frames;
}

TEST(SpawnerFrames, StartRoundTripsThroughAnySplitOfTheStream) {
  StartRequest start{true, "/work", {"sh", "-c", "echo hi"}, {"PATH=/bin", "A="},
                     "/opt/paseo/bin:/bin", true, "p-1"};
  auto encoded = EncodeStart(7, start);
  ASSERT_TRUE(encoded);
  std::string stream = *encoded + EncodeU32(Type::kSignal, 7, 15) + Encode(Type::kCloseInput, 7, "");
  for (size_t piece : {1, 2, 9, 10, 4096}) {
    bool error = false;
    auto frames = ReadAll(stream, piece, &error);
    ASSERT_FALSE(error);
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[0].type, Type::kStart);
    EXPECT_EQ(frames[0].id, 7u);
    auto decoded = DecodeStart(frames[0].payload);
    ASSERT_TRUE(decoded);
    EXPECT_TRUE(decoded->merge_stderr);
    EXPECT_EQ(decoded->cwd, "/work");
    EXPECT_EQ(decoded->argv, start.argv);
    EXPECT_EQ(decoded->env, start.env);
    EXPECT_EQ(decoded->search_path, "/opt/paseo/bin:/bin");
    EXPECT_TRUE(decoded->drop_oldest);
    EXPECT_EQ(decoded->name, "p-1");
    EXPECT_EQ(frames[1].type, Type::kSignal);
    EXPECT_EQ(frames[2].type, Type::kCloseInput);
  }
}

TEST(SpawnerFrames, AnOversizedStartIsNotEncoded) {
  StartRequest start{false, "/", {std::string(kMaxDownPayload, 'a')}, {}, "/bin", false, ""};
  EXPECT_FALSE(EncodeStart(1, start));
}

TEST(SpawnerFrames, MalformedStartsAreRefused) {
  auto good = *EncodeStart(1, {false, "/", {"true"}, {}, "/bin", false, ""});
  std::string payload = good.substr(kHeaderBytes);
  ASSERT_TRUE(DecodeStart(payload));
  EXPECT_FALSE(DecodeStart(""));
  EXPECT_FALSE(DecodeStart(payload.substr(0, payload.size() - 1)));  // truncated
  EXPECT_FALSE(DecodeStart(payload + "x"));                          // trailing bytes
  std::string bad_flag = payload;
  bad_flag[0] = 4;
  EXPECT_FALSE(DecodeStart(bad_flag));
  EXPECT_FALSE(
      DecodeStart(EncodeStart(1, {false, "/", {}, {}, "/bin", false, ""})->substr(kHeaderBytes)));  // no argv
  EXPECT_FALSE(DecodeStart(EncodeStart(1, {false, "/", {"true"}, {}, std::string("/b\0n", 4), false, ""})
                               ->substr(kHeaderBytes)));  // a NUL in the search path
  EXPECT_FALSE(DecodeStart(EncodeStart(1, {false, "/", {std::string("a\0b", 3)}, {}, "/bin", false, ""})
                               ->substr(kHeaderBytes)));  // a NUL
  // A count that promises more strings than bytes remain.
  std::string lying = payload;
  lying[1 + 4 + 1 + 3] = '\x7f';  // argc's low byte after cwd "/" (length 4 + 1 byte)
  EXPECT_FALSE(DecodeStart(lying));
}

TEST(SpawnerFrames, HeldProcessesGrantsAndOffsetsRoundTripAndAreCheckedStrictly) {
  HeldProcess h;
  h.pid = 77;
  h.merged = true;
  h.drop_oldest = true;
  h.err_eof = true;
  h.out_base = (uint64_t{1} << 40) + 3;
  h.out_end = h.out_base + 1000;
  h.name = "p-42";
  Frame f{Type::kHeld, 9, EncodeHeld(9, h).substr(kHeaderBytes)};
  auto up = DecodeUp(f);
  ASSERT_TRUE(up);
  EXPECT_EQ(up->held.pid, 77u);
  EXPECT_TRUE(up->held.merged && up->held.drop_oldest && up->held.err_eof);
  EXPECT_FALSE(up->held.input_closed || up->held.out_eof);
  EXPECT_EQ(up->held.out_base, h.out_base);
  EXPECT_EQ(up->held.out_end, h.out_end);
  EXPECT_EQ(up->held.name, "p-42");
  std::string p = f.payload;
  EXPECT_FALSE(DecodeHeld(p.substr(0, 37)));                  // no name
  EXPECT_FALSE(DecodeHeld(p + std::string(kMaxNameBytes, 'x')));  // a name too long
  std::string flags = p;
  flags[4] = 32;
  EXPECT_FALSE(DecodeHeld(flags));
  HeldProcess backwards = h;
  backwards.out_end = h.out_base - 1;
  EXPECT_FALSE(DecodeHeld(EncodeHeld(9, backwards).substr(kHeaderBytes)));
  EXPECT_FALSE(DecodeUp({Type::kHeld, 0, p}));          // id 0 is the channel's
  EXPECT_FALSE(DecodeUp({Type::kHeldEnd, 3, ""}));      // and the list's end is id 0's
  EXPECT_TRUE(DecodeUp({Type::kHeldEnd, 0, ""}));

  auto g = DecodeGrant(EncodeGrant(4, kStderr, 5000, uint64_t{1} << 33).substr(kHeaderBytes));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->stream, kStderr);
  EXPECT_EQ(g->bytes, 5000u);
  EXPECT_EQ(g->logged, uint64_t{1} << 33);
  EXPECT_FALSE(DecodeGrant(EncodeGrant(4, 3, 1, 0).substr(kHeaderBytes)));
  auto resumed = DecodeUp({Type::kResumed, 4,
                           EncodeOffsets(Type::kResumed, 4, 10, uint64_t{1} << 50).substr(kHeaderBytes)});
  ASSERT_TRUE(resumed);
  EXPECT_EQ(resumed->out_offset, 10u);
  EXPECT_EQ(resumed->err_offset, uint64_t{1} << 50);
  EXPECT_FALSE(DecodeUp({Type::kResumed, 4, "short"}));
}

TEST(SpawnerFrames, AHeaderAnnouncingTooMuchIsAnError) {
  FrameReader reader(kMaxUpPayload);
  std::string header = Encode(Type::kOutput, 1, std::string(kMaxUpPayload + 1, 'x')).substr(0, 9);
  reader.Feed(header);
  bool error = false;
  EXPECT_FALSE(reader.Next(&error));
  EXPECT_TRUE(error);
}

TEST(SpawnerFrames, UpFramesDecodeOnlyInTheirExactShape) {
  auto up = [](const std::string& bytes) -> std::optional<UpEvent> {
    FrameReader reader(kMaxUpPayload);
    reader.Feed(bytes);
    bool error = false;
    auto f = reader.Next(&error);
    if (!f) return std::nullopt;
    return DecodeUp(*f);
  };
  auto hello = up(EncodeU32(Type::kHello, 0, kVersion));
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->value, kVersion);
  EXPECT_FALSE(up(EncodeU32(Type::kHello, 3, kVersion)));  // hello belongs to id 0
  EXPECT_FALSE(up(EncodeU32(Type::kStarted, 0, 5)));       // id 0 is no process
  auto started = up(EncodeU32(Type::kStarted, 3, 41));
  ASSERT_TRUE(started);
  EXPECT_EQ(started->value, 41u);
  auto out = up(Encode(Type::kOutput, 3, std::string("\2err")));
  ASSERT_TRUE(out);
  EXPECT_EQ(out->stream, kStderr);
  EXPECT_EQ(out->data, "err");
  EXPECT_FALSE(out->starved);
  auto last = up(Encode(Type::kOutput, 3, std::string("\x81out")));  // its last credit
  ASSERT_TRUE(last);
  EXPECT_EQ(last->stream, kStdout);
  EXPECT_TRUE(last->starved);
  EXPECT_FALSE(up(Encode(Type::kOutput, 3, std::string("\x83x"))));  // no such stream either way
  EXPECT_FALSE(up(Encode(Type::kEnd, 3, std::string("\x81"))));      // only output says so
  EXPECT_FALSE(up(Encode(Type::kOutput, 3, std::string("\3x"))));  // no such stream
  EXPECT_FALSE(up(Encode(Type::kOutput, 3, std::string("\1"))));   // empty chunk
  EXPECT_FALSE(up(Encode(Type::kEnd, 3, std::string("\0", 1))));
  EXPECT_TRUE(up(Encode(Type::kEnd, 3, std::string("\1"))));
  EXPECT_FALSE(up(Encode(Type::kExit, 3, "abc")));  // wrong size
  EXPECT_FALSE(up(Encode(Type::kFailed, 3, std::string("\0\0\0\2\3", 5))));  // no stage 3
  // Frames only the privhelper sends, and unknown types.
  EXPECT_FALSE(up(EncodeU32(Type::kSignal, 3, 9)));
  EXPECT_FALSE(up(Encode(Type::kStart, 3, "")));
  EXPECT_FALSE(up(Encode(static_cast<Type>('q'), 3, "")));
}

TEST(SpawnerFrames, RandomBytesNeverCrashTheDecoder) {
  std::mt19937 rng(11);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes(rng() % 64, '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    // Half the rounds start with a plausible header so the payload checks are reached.
    if (round % 2 == 0 && bytes.size() >= 9) {
      bytes[0] = "HPFOZXWSIKG"[rng() % 11];
      bytes[5] = bytes[6] = bytes[7] = 0;
      bytes[8] = static_cast<char>(bytes.size() - 9);
    }
    FrameReader reader(kMaxUpPayload);
    reader.Feed(bytes);
    bool error = false;
    while (auto f = reader.Next(&error)) {
      auto event = DecodeUp(*f);
      if (event && event->type == Type::kOutput) {
        EXPECT_FALSE(event->data.empty());
        EXPECT_LE(event->data.size(), kMaxOutputChunk);
      }
      (void)DecodeStart(f->payload);
    }
  }
}

}  // namespace
}  // namespace paseo::spawner
