#include "broker/output_buffer.h"

#include <string>

#include "gtest/gtest.h"

namespace paseo {
namespace {

TEST(OutputBufferTest, NumbersEveryByteAndReadsAcrossChunks) {
  OutputBuffer buf(1 << 20);
  buf.Append("hello ", 6);
  buf.Append("world", 5);
  EXPECT_EQ(buf.start(), 0u);
  EXPECT_EQ(buf.end(), 11u);
  EXPECT_EQ(buf.Read(0, 100), "hello world");
  EXPECT_EQ(buf.Read(4, 4), "o wo");
  EXPECT_EQ(buf.Read(11, 4), "");
}

TEST(OutputBufferTest, StaysBoundedAndKeepsTheNewestBytes) {
  OutputBuffer buf(4096);
  std::string all;
  for (int i = 0; i < 1000; ++i) {
    std::string chunk(100, static_cast<char>('a' + i % 26));
    buf.Append(chunk.data(), chunk.size());
    all += chunk;
    EXPECT_LE(buf.kept(), 4096u);
    EXPECT_GE(buf.kept(), std::min<uint64_t>(4096u, all.size()));
  }
  EXPECT_EQ(buf.end(), all.size());
  EXPECT_EQ(buf.Read(buf.start(), 1 << 20), all.substr(buf.start()));
  EXPECT_EQ(buf.Read(0, 10), "") << "bytes older than start() are gone";
}

TEST(OutputBufferTest, ByteAtATimeWritersAreCoalescedAndTrimmedExactly) {
  OutputBuffer buf(1000);
  std::string all;
  for (int i = 0; i < 100000; ++i) {
    char c = static_cast<char>(i * 7);
    buf.Append(&c, 1);
    all.push_back(c);
  }
  EXPECT_EQ(buf.kept(), 1000u);
  EXPECT_EQ(buf.start(), all.size() - 1000);
  EXPECT_EQ(buf.Read(buf.start(), 5000), all.substr(all.size() - 1000));
  EXPECT_EQ(buf.Read(all.size() - 10, 5000), all.substr(all.size() - 10));
}

TEST(OutputBufferTest, BinaryBytesPassUnchanged) {
  OutputBuffer buf(1 << 16);
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes.push_back(static_cast<char>(i));
  buf.Append(bytes.data(), bytes.size());
  EXPECT_EQ(buf.Read(0, 1000), bytes);
}

}  // namespace
}  // namespace paseo
