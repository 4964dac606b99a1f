#include "privhelper/runsc_platform.h"

#include <fcntl.h>
#include <unistd.h>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paseo {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// `runsc flags` of the runsc Debian 12 ships (0.0~20221219.0), as printed.
constexpr char kRunsc2022[] =
    "  -pod-init-config string\n"
    "    \tpath to configuration file with additional steps to take during pod creation.\n"
    "  -platform string\n"
    "    \tspecifies which platform to use: ptrace (default), kvm. (default \"ptrace\")\n"
    "  -platform_device_path string\n"
    "    \tpath to a platform-specific device file (e.g. /dev/kvm for KVM platform).\n";
// The same flag of gVisor since systrap became the default (2023).
constexpr char kRunsc2024[] =
    "  -platform string\n"
    "    \tspecifies which platform to use: systrap (default), ptrace, kvm. (default \"systrap\")\n";

TEST(ParseRunscPlatforms, ReadsBothKnownFormats) {
  EXPECT_THAT(ParseRunscPlatforms(kRunsc2022), ElementsAre("ptrace", "kvm"));
  EXPECT_THAT(ParseRunscPlatforms(kRunsc2024), ElementsAre("systrap", "ptrace", "kvm"));
}

TEST(ParseRunscPlatforms, NamesNothingForOtherText) {
  EXPECT_TRUE(ParseRunscPlatforms("").empty());
  EXPECT_TRUE(ParseRunscPlatforms("  -platform_device_path string\n    \tpath to a device.\n").empty());
  // The phrase on a later flag's line is not the platform flag's.
  EXPECT_TRUE(ParseRunscPlatforms("  -platform string\n    \tsomething else.\n  -x string\n"
                                  "    \tplatform to use: ptrace.\n")
                  .empty());
  // Only plain names are taken (no shell or path characters from a strange binary).
  EXPECT_THAT(ParseRunscPlatforms("  -platform string\n    \tplatform to use: ptrace, $(x), a/b.\n"),
              ElementsAre("ptrace"));
}

TEST(ChoosePlatform, AutoMeasuresSystrapAgainstPtraceAndNeverKvm) {
  auto c = ChoosePlatform("auto", {"systrap", "ptrace", "kvm"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->measure, ElementsAre("systrap", "ptrace"));
  EXPECT_EQ(c->platform, "systrap");  // only if measuring fails
  EXPECT_THAT(c->why, HasSubstr("auto"));
  c = ChoosePlatform("auto", {"ptrace", "kvm"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->platform, "ptrace");
  EXPECT_TRUE(c->measure.empty());
  c = ChoosePlatform("ptrace", {"systrap", "ptrace"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->measure.empty()) << "an explicit platform is never measured";
  c = ChoosePlatform("auto", {"kvm"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("neither systrap nor ptrace"));
}

TEST(ChoosePlatform, AConfiguredPlatformMustBeThere) {
  auto c = ChoosePlatform("kvm", {"ptrace", "kvm"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->platform, "kvm");
  c = ChoosePlatform("systrap", {"ptrace", "kvm"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(c.status().message(), HasSubstr("does not have it (it has ptrace, kvm)"));
  c = ChoosePlatform("host", {"ptrace"});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChoosePlatformFromProbe, AnUnreadableHelpKeepsAnExplicitPlatformButNotAuto) {
  absl::StatusOr<std::vector<std::string>> unknown = absl::InternalError("names no platform");
  auto c = ChoosePlatformFromProbe("ptrace", unknown);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->platform, "ptrace");
  EXPECT_THAT(c->why, HasSubstr("unknown"));
  c = ChoosePlatformFromProbe("auto", unknown);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kFailedPrecondition);
  c = ChoosePlatformFromProbe("host", unknown);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
  c = ChoosePlatformFromProbe("auto", std::vector<std::string>{"systrap", "ptrace"});
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->platform, "systrap");
}

TEST(RunscHasFlag, FindsAGlobalFlagByItsExactName) {
  const char help[] =
      "  -directfs\n    \tdirectly access the container filesystems from the sentry. (default true)\n"
      "  -directfs-extra string\n    \tnot it\n"
      "  -platform string\n    \tspecifies which platform to use: systrap (default).\n";
  EXPECT_TRUE(RunscHasFlag(help, "directfs"));
  EXPECT_TRUE(RunscHasFlag(help, "platform"));
  EXPECT_FALSE(RunscHasFlag(help, "direct"));
  EXPECT_FALSE(RunscHasFlag(kRunsc2022, "directfs"));
  // A flag's name mentioned in another's usage text is not the flag.
  EXPECT_FALSE(RunscHasFlag("  -x string\n    \t  -directfs is elsewhere\n", "directfs"));
}

// The real runsc of this machine, when installed: what it says it has includes ptrace.
TEST(RunscPlatforms, ReadsTheInstalledRunsc) {
  int fd = open("/usr/bin/runsc", O_RDONLY | O_CLOEXEC);
  if (fd < 0) GTEST_SKIP() << "no /usr/bin/runsc";
  auto have = RunscPlatforms(fd);
  close(fd);
  ASSERT_TRUE(have.ok()) << have.status();
  EXPECT_THAT(*have, ::testing::Contains("ptrace"));
}

TEST(RunscPlatforms, AProgramWithoutThePlatformFlagIsAnError) {
  int fd = open("/bin/true", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  auto have = RunscPlatforms(fd);
  close(fd);
  ASSERT_FALSE(have.ok());
  EXPECT_THAT(have.status().message(), HasSubstr("names no platform"));
}

}  // namespace
}  // namespace paseo
