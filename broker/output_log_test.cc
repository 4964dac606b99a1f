#include "broker/output_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace paseo {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::string Pattern(size_t n, int seed) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 131 + seed + i / 1000) & 0xff);
  return s;
}

TEST(OutputLogTest, SplicesPipeBytesAndNumbersThem) {
  std::string path = TempPath("splice.log");
  unlink(path.c_str());
  auto log = OutputLog::Open(path, 1 << 20);
  ASSERT_TRUE(log.ok()) << log.status();
  int p[2];
  ASSERT_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
  std::string data = Pattern(40000, 1);
  ASSERT_EQ(write(p[1], data.data(), data.size()), static_cast<ssize_t>(data.size()));
  bool eof = false, more = false;
  auto moved = (*log)->SpliceFrom(p[0], &eof, &more);
  ASSERT_TRUE(moved.ok());
  EXPECT_EQ(*moved, data.size());
  EXPECT_FALSE(eof);
  EXPECT_FALSE(more);
  moved = (*log)->SpliceFrom(p[0], &eof, &more);
  EXPECT_EQ(*moved, 0u) << "an empty pipe moves nothing";
  close(p[1]);
  moved = (*log)->SpliceFrom(p[0], &eof, &more);
  EXPECT_TRUE(eof);
  close(p[0]);
  EXPECT_EQ((*log)->end(), data.size());
  EXPECT_EQ((*log)->Read(0, 1 << 20), data);
  EXPECT_EQ((*log)->Read(100, 10), data.substr(100, 10));
}

TEST(OutputLogTest, KeepsExactlyTheNewestCapacityBytesAndFreesTheRest) {
  std::string path = TempPath("cap.log");
  unlink(path.c_str());
  auto log = OutputLog::Open(path, 4 << 20);
  ASSERT_TRUE(log.ok());
  std::string all = Pattern(32 << 20, 2);
  for (size_t off = 0; off < all.size(); off += 65536) {
    ASSERT_TRUE((*log)->Append(all.data() + off, 65536).ok());
  }
  EXPECT_EQ((*log)->end(), all.size());
  EXPECT_EQ((*log)->start(), all.size() - (4 << 20));
  EXPECT_EQ((*log)->Read((*log)->start(), 8 << 20), all.substr(all.size() - (4 << 20)));
  EXPECT_EQ((*log)->Read(0, 10), "") << "bytes before start() are gone";
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), all.size());
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, (6u << 20))
      << "old bytes were not released from the file";
}

TEST(OutputLogTest, AReopenedLogContinuesAtItsSize) {
  std::string path = TempPath("reopen.log");
  unlink(path.c_str());
  std::string first = Pattern(5000, 3), second = Pattern(7000, 4);
  {
    auto log = OutputLog::Open(path, 1 << 20);
    ASSERT_TRUE((*log)->Append(first.data(), first.size()).ok());
  }
  auto log = OutputLog::Open(path, 1 << 20);
  ASSERT_TRUE(log.ok());
  EXPECT_EQ((*log)->end(), first.size());
  ASSERT_TRUE((*log)->Append(second.data(), second.size()).ok());
  EXPECT_EQ((*log)->Read(0, 1 << 20), first + second);
}

TEST(OutputLogTest, RefusesSymlinks) {
  std::string target = TempPath("target.log"), link = TempPath("link.log");
  unlink(link.c_str());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  EXPECT_FALSE(OutputLog::Open(link, 1 << 20).ok());
}

}  // namespace
}  // namespace paseo
