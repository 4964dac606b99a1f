#include "client/stats_view.h"

#include <capnp/message.h>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

namespace paseo::client {
namespace {

// A sample of one measured sandbox at `at_ns` with `cpu_ns` used so far.
void Fill(api::SandboxStats::Builder s, const char* id, uint64_t at_ns, uint64_t cpu_ns) {
  s.setSandboxId(id);
  s.setDeploymentId("alpha");
  s.setState("running");
  s.setSampledAtNs(at_ns);
  s.setMeasured(true);
  s.setCpuNs(cpu_ns);
  s.setMemoryBytes(uint64_t{45} << 20);
  s.setMemoryLimitBytes(uint64_t{2} << 30);
  s.setHostTasks(61);
  s.setHostTasksLimit(512);
  s.setProcesses(2);
  s.setOutputBytes(3 << 20);
  s.setOutputBufferedBytes(1 << 20);
}

TEST(StatsViewTest, CpuIsTheRateBetweenTwoSamplesInCores) {
  capnp::MallocMessageBuilder a, b;
  auto before = a.initRoot<api::Supervisor::StatsResults>().initStats(2);
  Fill(before[0], "sb-busy", 1'000'000'000, 5'000'000'000);
  Fill(before[1], "sb-idle", 1'000'000'000, 7'000'000'000);
  auto now = b.initRoot<api::Supervisor::StatsResults>().initStats(3);
  Fill(now[0], "sb-busy", 3'000'000'000, 8'000'000'000);  // 3 s of CPU in 2 s: 1.5 cores
  Fill(now[1], "sb-idle", 3'000'000'000, 7'000'000'000);
  Fill(now[2], "sb-new", 3'000'000'000, 1'000'000);       // no earlier sample
  auto rows = StatsRows(before.asReader(), now.asReader());
  ASSERT_EQ(rows.size(), 3u);
  ASSERT_TRUE(rows[0].cpu_cores.has_value());
  EXPECT_DOUBLE_EQ(*rows[0].cpu_cores, 1.5);
  EXPECT_DOUBLE_EQ(*rows[1].cpu_cores, 0.0);
  EXPECT_FALSE(rows[2].cpu_cores.has_value());
  EXPECT_DOUBLE_EQ(rows[0].cpu_seconds, 8.0);

  std::string table = StatsTable(rows);
  EXPECT_TRUE(absl::StartsWith(table, "SANDBOX")) << table;
  EXPECT_TRUE(absl::StrContains(table, "1.50")) << table;
  EXPECT_TRUE(absl::StrContains(table, "45MiB / 2GiB")) << table;
  EXPECT_TRUE(absl::StrContains(table, "61 / 512")) << table;
  EXPECT_TRUE(absl::StrContains(table, "3MiB / 1MiB")) << table;

  std::string json = StatsJson(rows);
  EXPECT_TRUE(absl::StrContains(json, "\"id\":\"sb-busy\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"cpuCores\":1.500")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"cpuCores\":null")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"network\":null")) << json;
}

TEST(StatsViewTest, AnUnmeasuredOrRestartedSandboxHasNoRate) {
  capnp::MallocMessageBuilder a, b;
  auto before = a.initRoot<api::Supervisor::StatsResults>().initStats(2);
  Fill(before[0], "sb-stopped", 1'000'000'000, 5'000'000'000);
  Fill(before[1], "sb-back", 1'000'000'000, 5'000'000'000);
  auto now = b.initRoot<api::Supervisor::StatsResults>().initStats(2);
  Fill(now[0], "sb-stopped", 2'000'000'000, 0);
  now[0].setMeasured(false);
  now[0].setState("stopped");
  Fill(now[1], "sb-back", 2'000'000'000, 1'000);  // a counter that went back: no rate
  now[1].setNetworked(true);
  now[1].setNetworkInBytes(1536);
  now[1].setNetworkOutBytes(10);
  auto rows = StatsRows(before.asReader(), now.asReader());
  EXPECT_FALSE(rows[0].cpu_cores.has_value());
  EXPECT_FALSE(rows[1].cpu_cores.has_value());
  std::string table = StatsTable(rows);
  // sb-stopped's CPU, memory and tasks are not known: "-", not 0.
  std::vector<std::string> lines = absl::StrSplit(table, '\n');
  ASSERT_GE(lines.size(), 3u);
  std::vector<std::string> fields = absl::StrSplit(lines[1], ' ', absl::SkipEmpty());
  ASSERT_GE(fields.size(), 6u) << lines[1];
  EXPECT_EQ(fields[0], "sb-stopped");
  EXPECT_EQ(fields[2], "stopped");
  EXPECT_EQ(fields[3], "-") << lines[1];
  EXPECT_EQ(fields[4], "-") << lines[1];
  EXPECT_EQ(fields[5], "-") << lines[1];
  EXPECT_TRUE(absl::StrContains(table, "1.5KiB / 10B")) << table;
  std::string json = StatsJson(rows);
  EXPECT_TRUE(absl::StrContains(json, "\"network\":{\"inBytes\":1536,\"outBytes\":10}")) << json;
}

TEST(StatsViewTest, HumanBytes) {
  EXPECT_EQ(HumanBytes(0), "0B");
  EXPECT_EQ(HumanBytes(1023), "1023B");
  EXPECT_EQ(HumanBytes(1024), "1KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5KiB");
  EXPECT_EQ(HumanBytes(uint64_t{45} << 20 | (200 << 10)), "45.2MiB");
  EXPECT_EQ(HumanBytes(uint64_t{2} << 30), "2GiB");
}

}  // namespace
}  // namespace paseo::client
