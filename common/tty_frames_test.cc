#include "common/tty_frames.h"

#include <random>

#include "gtest/gtest.h"

namespace paseo::tty {
namespace {

TEST(TtyFrames, DataIsSplitIntoPipeAtomicFramesAndReassembled) {
  std::string data;
  std::mt19937 rng(3);
  for (int i = 0; i < 3 * 4096 + 17; ++i) data.push_back(static_cast<char>(rng()));
  auto frames = EncodeData(data);
  ASSERT_EQ(frames.size(), 4u);
  std::string stream;
  for (const auto& f : frames) {
    EXPECT_LE(f.size(), kMaxFrameBytes);
    stream += f;
  }
  stream += EncodeWinsize(50, 132) + EncodeEof();

  // Fed in odd-sized pieces, the frames come back in order and unchanged.
  FrameReader reader;
  std::string got;
  std::vector<Frame> others;
  for (size_t at = 0; at < stream.size(); at += 1000) {
    reader.Feed(std::string_view(stream).substr(at, 1000));
    while (auto f = reader.Next()) {
      if (f->type == FrameType::kData) got += f->payload;
      else others.push_back(*f);
    }
  }
  EXPECT_EQ(got, data);
  ASSERT_EQ(others.size(), 2u);
  EXPECT_EQ(others[0].type, FrameType::kWinsize);
  EXPECT_EQ(DecodeWinsize(others[0].payload), std::make_pair(uint16_t{50}, uint16_t{132}));
  EXPECT_EQ(others[1].type, FrameType::kEof);
  EXPECT_EQ(reader.buffered(), 0u);
}

TEST(TtyFrames, UnknownFramesAreSkippedAndBadWinsizesRefused) {
  FrameReader reader;
  reader.Feed(std::string("x\0\3abc", 6) + EncodeData("hi")[0]);
  auto f = reader.Next();
  ASSERT_TRUE(f.has_value());
  EXPECT_EQ(f->payload, "hi");
  EXPECT_EQ(DecodeWinsize("abc"), std::nullopt);
  EXPECT_TRUE(EncodeData("").empty());
}

}  // namespace
}  // namespace paseo::tty
