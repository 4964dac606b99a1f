#include "admin/metrics.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>

#include <capnp/message.h>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace paseo::admin {
namespace {

using Results = operator_api::Operator::MetricsResults;

// Two sandboxes of two deployments (one networked, one stopped) and a service with history.
void Fill(Results::Builder r) {
  auto list = r.initSandboxes(2);
  list[0].setSandboxId("sb-a");
  list[0].setDeploymentId("alpha");
  list[0].setState("running");
  list[0].setMeasured(true);
  list[0].setCpuNs(2'500'000'000);
  list[0].setMemoryBytes(47185920);
  list[0].setMemoryLimitBytes(uint64_t{2} << 30);
  list[0].setHostTasks(61);
  list[0].setProcesses(2);
  list[0].setOutputBytes(1234);
  list[0].setNetworked(true);
  list[0].setNetworkInBytes(100);
  list[0].setNetworkOutBytes(200);
  list[1].setSandboxId("sb-b");
  list[1].setDeploymentId("be\"ta");
  list[1].setState("stopped");
  auto s = r.initService();
  s.setVersion("paseo-sandbox 0.1.0");
  s.setCpuNs(3'000'000'000);
  s.setCpuMillisLimit(1500);
  s.setBrokerRestarts(2);
  s.setAuditLines(17);
  auto not_ok = s.initNotOk(2);
  not_ok[0].setReason("permission-denied");
  not_ok[0].setCount(5);
  not_ok[1].setReason("invalid-argument");
  not_ok[1].setCount(1);
  s.setParkedCalls(3);
}

TEST(MetricsTest, EverySandboxAndTheServiceInTheTextFormat) {
  capnp::MallocMessageBuilder m;
  Fill(m.initRoot<Results>());
  std::string text = PrometheusText(m.getRoot<Results>().asReader());
  for (const char* line :
       {"paseo_sandbox_up 1\n", "paseo_sandbox_info{version=\"paseo-sandbox 0.1.0\"} 1\n",
        "paseo_sandbox_sandboxes{deployment=\"alpha\",state=\"running\"} 1\n",
        "paseo_sandbox_sandboxes{deployment=\"be\\\"ta\",state=\"stopped\"} 1\n",
        "paseo_sandbox_sandbox_cpu_seconds_total{sandbox=\"sb-a\",deployment=\"alpha\"} 2.500000000\n",
        "paseo_sandbox_sandbox_memory_bytes{sandbox=\"sb-a\",deployment=\"alpha\"} 47185920\n",
        "paseo_sandbox_sandbox_output_bytes_total{sandbox=\"sb-a\",deployment=\"alpha\"} 1234\n",
        "paseo_sandbox_sandbox_network_receive_bytes_total{sandbox=\"sb-a\",deployment=\"alpha\"} 100\n",
        "paseo_sandbox_sandbox_processes{sandbox=\"sb-b\",deployment=\"be\\\"ta\"} 0\n",
        "paseo_sandbox_service_cpu_seconds_total 3\n", "paseo_sandbox_service_cpu_limit_cores 1.500000000\n",
        "paseo_sandbox_broker_restarts_total 2\n", "paseo_sandbox_audit_lines_total 17\n",
        "paseo_sandbox_refused_requests_total{reason=\"permission-denied\"} 5\n",
        "paseo_sandbox_parked_calls 3\n", "# TYPE paseo_sandbox_sandbox_cpu_seconds_total counter\n"})
    EXPECT_TRUE(absl::StrContains(text, line)) << line << "\nin:\n" << text;
  // A stopped sandbox has no cgroup figures (not zeros), a sandbox without a link no network.
  EXPECT_FALSE(absl::StrContains(text, "cpu_seconds_total{sandbox=\"sb-b\"")) << text;
  EXPECT_FALSE(absl::StrContains(text, "network_receive_bytes_total{sandbox=\"sb-b\"")) << text;
  // Every sample line's family has a TYPE line before it.
  std::istringstream in(text);
  std::set<std::string> typed;
  for (std::string l; std::getline(in, l);) {
    if (absl::StartsWith(l, "# TYPE ")) typed.insert(l.substr(7, l.find(' ', 7) - 7));
    if (l.empty() || l[0] == '#') continue;
    std::string name = l.substr(0, l.find_first_of("{ "));
    EXPECT_TRUE(typed.count(name)) << l;
  }
}

TEST(MetricsTest, DownIsUpZeroAlone) {
  EXPECT_EQ(PrometheusDown(),
            "# HELP paseo_sandbox_up 1 if the service answered on its operator socket, 0 if it "
            "could not be asked.\n# TYPE paseo_sandbox_up gauge\npaseo_sandbox_up 0\n");
}

TEST(MetricsTest, TheTextfileIsReplacedWhole) {
  char tmpl[] = "/tmp/metrics-test-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  ASSERT_TRUE(WriteTextfile(dir, "a 1\n").ok());
  ASSERT_TRUE(WriteTextfile(dir, "b 2\n").ok());
  std::ifstream f(dir + "/paseo_sandbox.prom");
  std::stringstream got;
  got << f.rdbuf();
  EXPECT_EQ(got.str(), "b 2\n");
  struct stat st;
  ASSERT_EQ(stat((dir + "/paseo_sandbox.prom").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) entries += e.exists();
  EXPECT_EQ(entries, 1u) << "no temporary file left";
  EXPECT_FALSE(WriteTextfile(dir + "/missing", "c 3\n").ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace paseo::admin
