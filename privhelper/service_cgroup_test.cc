// ServiceCgroup on fake cgroup trees in a temp dir: the files the kernel would make in a new
// cgroup are made by the test, so what Apply writes and Use reads can be checked without root.
// The real v1 hierarchy is covered by testing/resource_limits_test.
#include "privhelper/service_cgroup.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace paseo {
namespace {

namespace fs = std::filesystem;

class ServiceCgroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/service-cgroup-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }

  // An empty file, as the kernel shows a cgroup's control files.
  void Touch(const std::string& path) {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path).flush();
  }
  std::string Read(const std::string& path) {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

  // A unified hierarchy with `parent`'s cgroup already there (its control files made).
  void FakeV2(const std::string& parent) {
    Touch(root_ + "/cgroup.controllers");
    Touch(root_ + "/cgroup.subtree_control");
    std::string dir = root_;
    for (const auto& part : fs::path(parent).relative_path()) {
      dir += "/" + part.string();
      Touch(dir + "/cgroup.subtree_control");
    }
    for (const char* f : {"memory.max", "pids.max", "cpu.max", "memory.current", "pids.current"})
      Touch(dir + "/" + f);
    Write(dir + "/memory.stat", "anon 1\nfile 2\ninactive_file 0\n");
  }
  void FakeV1(const std::string& parent) {
    for (const char* f : {"memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes",
                          "pids/pids.max", "pids/pids.current", "cpu/cpu.cfs_period_us",
                          "cpu/cpu.cfs_quota_us"}) {
      std::string rel = f;
      size_t slash = rel.find('/');
      Touch(root_ + "/" + rel.substr(0, slash) + parent + rel.substr(slash));
    }
    Write(root_ + "/memory" + parent + "/memory.stat", "inactive_file 5\ntotal_inactive_file 0\n");
  }

  ServiceBounds Bounds() const {
    ServiceBounds b;
    b.memory_bytes = uint64_t{12} << 30;
    b.cpu_millis = 1500;
    b.max_host_tasks = 16384;
    return b;
  }

  std::string root_;
};

TEST_F(ServiceCgroupTest, V2WritesEveryBoundAndHandsTheControllersDown) {
  FakeV2("/a/paseo-sandbox");
  auto cg = ServiceCgroup::Open(root_, "/a/paseo-sandbox");
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_TRUE(cg->unified());
  ASSERT_TRUE(cg->Apply(Bounds()).ok());
  std::string dir = root_ + "/a/paseo-sandbox";
  EXPECT_EQ(Read(dir + "/memory.max"), "12884901888");
  EXPECT_EQ(Read(dir + "/pids.max"), "16384");
  EXPECT_EQ(Read(dir + "/cpu.max"), "150000 100000");
  // From the root to the parent, each level enables the controllers for the next.
  for (const std::string& level : {root_, root_ + "/a", dir})
    EXPECT_EQ(Read(level + "/cgroup.subtree_control"), "+memory +pids +cpu") << level;

  Write(dir + "/memory.current", "1048576\n");
  Write(dir + "/pids.current", "42\n");
  auto use = cg->Use();
  ASSERT_TRUE(use.ok()) << use.status();
  EXPECT_EQ(use->memory_bytes, 1048576u);
  EXPECT_EQ(use->host_tasks, 42u);
  // Inactive file cache is reclaimed before the bound: not counted as in use.
  Write(dir + "/memory.stat", "anon 4096\nactive_file 8192\ninactive_file 65536\n");
  EXPECT_EQ(cg->Use()->memory_bytes, 1048576u - 65536);
}

TEST_F(ServiceCgroupTest, V1WritesEachControllersHierarchy) {
  FakeV1("/paseo-sandbox");
  auto cg = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(cg.ok()) << cg.status();
  EXPECT_FALSE(cg->unified());
  ASSERT_TRUE(cg->Apply(Bounds()).ok());
  EXPECT_EQ(Read(root_ + "/memory/paseo-sandbox/memory.limit_in_bytes"), "12884901888");
  EXPECT_EQ(Read(root_ + "/pids/paseo-sandbox/pids.max"), "16384");
  EXPECT_EQ(Read(root_ + "/cpu/paseo-sandbox/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(Read(root_ + "/cpu/paseo-sandbox/cpu.cfs_quota_us"), "150000");

  Write(root_ + "/memory/paseo-sandbox/memory.usage_in_bytes", "4096\n");
  Write(root_ + "/pids/paseo-sandbox/pids.current", "7\n");
  auto use = cg->Use();
  ASSERT_TRUE(use.ok()) << use.status();
  EXPECT_EQ(use->memory_bytes, 4096u);
  EXPECT_EQ(use->host_tasks, 7u);
  // v1 counts the whole subtree's cache as total_*: more than the charge counts as none left.
  Write(root_ + "/memory/paseo-sandbox/memory.stat", "inactive_file 1\ntotal_inactive_file 8192\n");
  EXPECT_EQ(cg->Use()->memory_bytes, 0u);
}

// Every bound is tried even when one cannot be written (a sandbox left from before holding
// more than a lowered bound); the first failure is what Apply returns.
TEST_F(ServiceCgroupTest, ABoundThatCannotBeWrittenDoesNotStopTheOthers) {
  FakeV1("/paseo-sandbox");
  fs::remove(root_ + "/memory/paseo-sandbox/memory.limit_in_bytes");
  auto cg = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(cg.ok());
  EXPECT_FALSE(cg->HoldsSandboxes());
  fs::create_directories(root_ + "/pids/paseo-sandbox/sb-left");
  EXPECT_TRUE(cg->HoldsSandboxes());
  absl::Status applied = cg->Apply(Bounds());
  EXPECT_FALSE(applied.ok());
  EXPECT_NE(applied.message().find("memory.limit_in_bytes"), std::string::npos) << applied;
  EXPECT_EQ(Read(root_ + "/pids/paseo-sandbox/pids.max"), "16384");
  EXPECT_EQ(Read(root_ + "/cpu/paseo-sandbox/cpu.cfs_quota_us"), "150000");
}

TEST_F(ServiceCgroupTest, ARootWithNeitherLayoutIsRefused) {
  fs::create_directories(root_ + "/memory");
  fs::create_directories(root_ + "/pids");  // no cpu
  auto cg = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_FALSE(cg.ok());
  EXPECT_EQ(cg.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(cg.status().message().find("cpu"), std::string::npos) << cg.status();
}

TEST_F(ServiceCgroupTest, ASymlinkInPlaceOfTheParentIsNotFollowed) {
  FakeV1("/elsewhere");
  fs::create_symlink(root_ + "/pids/elsewhere", root_ + "/pids/paseo-sandbox");
  for (const char* c : {"memory", "cpu"}) fs::create_directories(root_ + "/" + c);
  auto cg = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(cg.ok()) << cg.status();
  absl::Status applied = cg->Apply(Bounds());
  EXPECT_FALSE(applied.ok());
  EXPECT_EQ(Read(root_ + "/pids/elsewhere/pids.max"), "");
}

TEST_F(ServiceCgroupTest, UnreadableUseIsAnErrorNotZero) {
  FakeV2("/paseo-sandbox");
  auto cg = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(cg.ok());
  Write(root_ + "/paseo-sandbox/memory.current", "lots\n");
  EXPECT_FALSE(cg->Use().ok());
  fs::remove(root_ + "/paseo-sandbox/memory.current");
  EXPECT_FALSE(cg->Use().ok());
}

TEST_F(ServiceCgroupTest, EnsureAppliedMakesAMissingParentAgainAndLeavesAPresentOneAlone) {
  FakeV1("/paseo-sandbox");
  auto cg = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(cg.ok());
  // Present: nothing is written.
  ASSERT_TRUE(cg->EnsureApplied(Bounds()).ok());
  EXPECT_EQ(Read(root_ + "/pids/paseo-sandbox/pids.max"), "");
  // Gone (in one hierarchy): made again, and the write then reaches the kernel's file (which
  // the fake cannot make, so the error is the proof that it was tried).
  fs::remove_all(root_ + "/memory/paseo-sandbox");
  absl::Status again = cg->EnsureApplied(Bounds());
  EXPECT_FALSE(again.ok());
  EXPECT_NE(again.message().find("memory.limit_in_bytes"), std::string::npos) << again;
  EXPECT_TRUE(fs::is_directory(root_ + "/memory/paseo-sandbox"));
}

// A sandbox's CPU weight: v1's cpu.shares as given, v2's cpu.weight as runsc converts shares.
TEST_F(ServiceCgroupTest, ASandboxsCpuWeightIsWrittenInItsLayoutsUnits) {
  FakeV1("/paseo-sandbox");
  Touch(root_ + "/cpu/paseo-sandbox/sb-a/cpu.shares");
  auto v1 = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(v1.ok()) << v1.status();
  ASSERT_TRUE(v1->SetSandboxCpuShares("sb-a", 262144).ok());
  EXPECT_EQ(Read(root_ + "/cpu/paseo-sandbox/sb-a/cpu.shares"), "262144");
  ASSERT_TRUE(v1->SetSandboxCpuShares("sb-a", 1u << 30).ok());
  EXPECT_EQ(Read(root_ + "/cpu/paseo-sandbox/sb-a/cpu.shares"), "262144") << "above v1's range";
  // No cgroup, no file made; and an id is one path component.
  EXPECT_EQ(v1->SetSandboxCpuShares("sb-none", 64).code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(root_ + "/cpu/paseo-sandbox/sb-none"));
  for (const char* bad : {"", ".", "..", "../paseo-sandbox", "sb-a/../sb-a"})
    EXPECT_EQ(v1->SetSandboxCpuShares(bad, 64).code(), absl::StatusCode::kInvalidArgument) << bad;
  // A symlink in place of the sandbox's cgroup is not followed.
  fs::create_directories(root_ + "/elsewhere");
  Touch(root_ + "/elsewhere/cpu.shares");
  fs::create_directory_symlink(root_ + "/elsewhere", root_ + "/cpu/paseo-sandbox/sb-link");
  EXPECT_FALSE(v1->SetSandboxCpuShares("sb-link", 64).ok());
  EXPECT_EQ(Read(root_ + "/elsewhere/cpu.shares"), "");

  fs::remove_all(root_);
  fs::create_directories(root_);
  FakeV2("/paseo-sandbox");
  Touch(root_ + "/paseo-sandbox/sb-a/cpu.weight");
  auto v2 = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(v2.ok()) << v2.status();
  ASSERT_TRUE(v2->SetSandboxCpuShares("sb-a", 64).ok());
  EXPECT_EQ(Read(root_ + "/paseo-sandbox/sb-a/cpu.weight"), "3");
  ASSERT_TRUE(v2->SetSandboxCpuShares("sb-a", 262144).ok());
  EXPECT_EQ(Read(root_ + "/paseo-sandbox/sb-a/cpu.weight"), "10000");
  EXPECT_EQ(ServiceCgroup::CpuWeightOfShares(2), 1u);
  EXPECT_EQ(ServiceCgroup::CpuWeightOfShares(1024), 39u);  // runsc's for the kernel's default
}

// What `stats` shows: CPU, working set and tasks with their bounds, in each layout's files and
// units ("max" and v1's "no limit" are no bound).
TEST_F(ServiceCgroupTest, ASandboxsUsageIsReadInItsLayoutsUnits) {
  FakeV2("/paseo-sandbox");
  const std::string sb = root_ + "/paseo-sandbox/sb-a";
  fs::create_directories(sb);
  Write(sb + "/cpu.stat", "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n");
  Write(sb + "/memory.current", "104857600\n");
  Write(sb + "/memory.stat", "anon 90000000\ninactive_file 4857600\n");
  Write(sb + "/memory.max", "2147483648\n");
  Write(sb + "/pids.current", "37\n");
  Write(sb + "/pids.max", "max\n");
  auto v2 = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(v2.ok());
  auto use = v2->Usage("sb-a");
  ASSERT_TRUE(use.ok()) << use.status();
  EXPECT_EQ(use->cpu_ns, 2500000000u);
  EXPECT_EQ(use->memory_bytes, 100000000u);
  EXPECT_EQ(use->memory_limit_bytes, 2147483648u);
  EXPECT_EQ(use->host_tasks, 37u);
  EXPECT_EQ(use->host_tasks_limit, 0u) << "max: no bound";
  EXPECT_EQ(v2->Usage("sb-none").status().code(), absl::StatusCode::kNotFound);
  for (const char* bad : {".", "..", "../x", "sb-a/.."})
    EXPECT_EQ(v2->Usage(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  fs::create_symlink(sb, root_ + "/paseo-sandbox/sb-link");
  EXPECT_EQ(v2->Usage("sb-link").status().code(), absl::StatusCode::kNotFound) << "not followed";
  Write(sb + "/pids.current", "many\n");
  EXPECT_FALSE(v2->Usage("sb-a").ok()) << "an unreadable figure is an error, not 0";

  fs::remove_all(root_);
  fs::create_directories(root_);
  FakeV1("/paseo-sandbox");
  const std::string cpu = root_ + "/cpu/paseo-sandbox/sb-b", memory = root_ + "/memory/paseo-sandbox/sb-b",
                    pids = root_ + "/pids/paseo-sandbox/sb-b";
  for (const auto& d : {cpu, memory, pids}) fs::create_directories(d);
  Write(cpu + "/cpuacct.usage", "123456789\n");
  Write(memory + "/memory.usage_in_bytes", "5000\n");
  Write(memory + "/memory.stat", "inactive_file 9\ntotal_inactive_file 1000\n");
  Write(memory + "/memory.limit_in_bytes", "9223372036854771712\n");
  Write(pids + "/pids.current", "3\n");
  Write(pids + "/pids.max", "512\n");
  auto v1 = ServiceCgroup::Open(root_, "/paseo-sandbox");
  ASSERT_TRUE(v1.ok());
  use = v1->Usage("sb-b");
  ASSERT_TRUE(use.ok()) << use.status();
  EXPECT_EQ(use->cpu_ns, 123456789u);
  EXPECT_EQ(use->memory_bytes, 4000u);
  EXPECT_EQ(use->memory_limit_bytes, 0u) << "v1's no limit";
  EXPECT_EQ(use->host_tasks, 3u);
  EXPECT_EQ(use->host_tasks_limit, 512u);
}

}  // namespace
}  // namespace paseo
