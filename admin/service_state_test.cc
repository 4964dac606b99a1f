#include "admin/service_state.h"

#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace paseo::admin {
namespace {

namespace fs = std::filesystem;

class ServiceStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string tmpl = absl::StrCat(base != nullptr && *base ? base : "/tmp", "/state.XXXXXX");
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void Write(const std::string& rel, const std::string& text) {
    fs::create_directories(fs::path(dir_ + "/" + rel).parent_path());
    std::ofstream(dir_ + "/" + rel, std::ios::binary | std::ios::trunc) << text;
  }
  std::string dir_;
};

TEST_F(ServiceStateTest, NoPidFileMeansNoPrivhelper) {
  auto pid = RunningPrivhelper(dir_);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(pid.status().message(), "privhelper.pid is missing"));
}

// A stale pid file naming some other live process (this test) must never get it signalled.
TEST_F(ServiceStateTest, APidFileNamingAnotherProgramIsRefused) {
  Write("privhelper.pid", absl::StrCat(getpid(), "\n"));
  auto pid = RunningPrivhelper(dir_);
  EXPECT_EQ(pid.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(pid.status().message(), "not a paseo-sandbox-privhelper"))
      << pid.status();
  Write("privhelper.pid", "garbage\n");
  EXPECT_FALSE(RunningPrivhelper(dir_).ok());
}

// /proc is injectable: a fake whose <pid>/exe points at a privhelper binary.
TEST_F(ServiceStateTest, APidFileNamingAPrivhelperIsAccepted) {
  Write("privhelper.pid", "4321\n");
  fs::create_directories(dir_ + "/proc/4321");
  fs::create_symlink("/usr/libexec/paseo-sandbox/paseo-sandbox-privhelper",
                     dir_ + "/proc/4321/exe");
  auto pid = RunningPrivhelper(dir_, dir_ + "/proc");
  ASSERT_TRUE(pid.ok()) << pid.status();
  EXPECT_EQ(*pid, 4321);
}

TEST_F(ServiceStateTest, GenerationLines) {
  auto loaded = ParseGeneration("1 loaded\n");
  ASSERT_TRUE(loaded.ok());
  EXPECT_EQ(loaded->number, 1u);
  EXPECT_TRUE(loaded->applied());
  auto refused = ParseGeneration("7 refused: deployments/x.json: id: must be an id\n");
  ASSERT_TRUE(refused.ok());
  EXPECT_EQ(refused->number, 7u);
  EXPECT_FALSE(refused->applied());
  EXPECT_EQ(refused->outcome, "refused: deployments/x.json: id: must be an id");
  EXPECT_FALSE(ParseGeneration("").ok());
  EXPECT_FALSE(ParseGeneration("x applied").ok());
  Write("config-generation", "3 applied\n");
  EXPECT_EQ(ReadGeneration(dir_)->number, 3u);
}

TEST_F(ServiceStateTest, SandboxRecordsAreListedAndJunkSkipped) {
  Write("bundles/sb-b/sandbox.json",
        R"({"id": "sb-b", "deploymentId": "alpha", "profile": "default", "uid": 4242, "gid": 4242, "createdAtUnixMs": "5"})");
  Write("bundles/sb-a/sandbox.json",
        R"({"id": "sb-a", "deploymentId": "beta", "profile": "small", "uid": 4343, "gid": 4343, "deleting": true})");
  Write("bundles/sb-c/config.json", "{}");          // mid-create: no record yet
  Write("bundles/sb-d/sandbox.json", "{not json");  // unreadable
  Write("bundles/..hidden/sandbox.json", "{}");     // not an id
  auto records = ListSandboxRecords(dir_);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[0].id, "sb-a");
  EXPECT_EQ((*records)[0].deployment, "beta");
  EXPECT_TRUE((*records)[0].deleting);
  EXPECT_EQ((*records)[1].deployment, "alpha");
  EXPECT_EQ((*records)[1].uid, 4242u);
  EXPECT_FALSE((*records)[1].deleting);
  EXPECT_TRUE(ListSandboxRecords(dir_ + "/missing")->empty());
}

TEST_F(ServiceStateTest, DiskUsageCountsFilesUnderTheDir) {
  EXPECT_EQ(DiskUsage(dir_ + "/missing"), 0u);
  Write("broker/sb/p.stdout", std::string(1 << 20, 'x'));
  EXPECT_GE(DiskUsage(dir_ + "/broker"), 1u << 20);
}

}  // namespace
}  // namespace paseo::admin
