#include "common/search_path.h"

#include "gtest/gtest.h"

namespace paseo {
namespace {

TEST(SearchPath, ToolDirectoriesComeBeforeTheEnvironmentsPath) {
  EXPECT_EQ(SearchPath({"/opt/paseo/bin", "/opt/t"}, {"A=1", "PATH=/usr/bin:/bin"}),
            "/opt/paseo/bin:/opt/t:/usr/bin:/bin");
}

TEST(SearchPath, AnEnvironmentWithoutPathGetsTheFixedDefault) {
  // The empty env Paseo's daemon sends its helper exec (docs/paseo.md).
  EXPECT_EQ(SearchPath({"/opt/paseo/bin"}, {}), std::string("/opt/paseo/bin:") + kDefaultSearchPath);
  EXPECT_EQ(SearchPath({}, {"PATHX=/nope", "XPATH=/no"}), kDefaultSearchPath);
}

TEST(SearchPath, TheFirstPathEntryWinsAndAnEmptyOneStaysEmpty) {
  EXPECT_EQ(SearchPath({}, {"PATH=/a", "PATH=/b"}), "/a");
  EXPECT_EQ(SearchPath({}, {"PATH="}), "");
  EXPECT_EQ(SearchPath({"/t"}, {"PATH="}), "/t");  // no trailing ':' (the working directory)
}

}  // namespace
}  // namespace paseo
