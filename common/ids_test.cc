#include "common/ids.h"

#include <set>
#include <vector>

#include "gtest/gtest.h"

namespace paseo {
namespace {

TEST(IdsTest, NewIdsAreValidDistinctAndPrefixed) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    std::string id = NewId("sb-");
    EXPECT_TRUE(IsValidId(id)) << id;
    EXPECT_EQ(id.rfind("sb-", 0), 0u);
    EXPECT_EQ(id.size(), 3u + 24u);
    EXPECT_TRUE(seen.insert(id).second) << "duplicate id " << id;
  }
}

TEST(IdsTest, RejectsAnythingThatCouldBeMoreThanOnePathComponent) {
  for (const std::string& bad : std::vector<std::string>{"", ".", "..", "a/b", "/", "-rf", "A", "a b", "a.b", "a\n",
                          std::string("a\0b", 3), std::string(65, 'a'), "é"}) {
    EXPECT_FALSE(IsValidId(bad)) << "accepted: " << bad;
  }
  EXPECT_TRUE(IsValidId("default"));
  EXPECT_TRUE(IsValidId(std::string(64, 'a')));
}

}  // namespace
}  // namespace paseo
