// `paseo-sandbox stats` and `paseo-sandbox-admin metrics` against a real service and runsc: a
// busy sandbox's CPU shows and an idle one's does not; memory, host tasks, processes and output
// are its own; the JSON matches docs/stats.schema.json; a client of another deployment sees none
// of it; the operator socket is root's alone, its metrics name every sandbox and the service's
// health (a killed broker counts as a restart), and Debian's node_exporter reads the textfile.
// Cost: about 30 s.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

Service* g_service = nullptr;

Identity Alpha(const Service& svc) { return {4242, 4242, {4242, svc.socket_gid()}}; }
Identity Beta(const Service& svc) { return {4343, 4343, {4343, svc.socket_gid()}}; }

// One sandbox of a `stats --json` sample (testing/stats_json.py's line).
struct Row {
  std::string state;
  bool measured = false;
  double cpu_cores = -1;
  uint64_t processes = 0, memory = 0, memory_limit = 0, host_tasks = 0, output = 0;
  int64_t net_in = -1, net_out = -1;
};

// `stats --json ARGS...` as `who`, checked against the schema; its sandboxes by id. A run that
// fails or does not validate fails the test and gives nothing.
std::map<std::string, Row> Stats(const Service& svc, const Identity& who,
                                 std::vector<std::string> args) {
  args.insert(args.begin(), {"--json", "stats", "--interval", "1"});
  CliResult r = svc.Cli(who, args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string doc = svc.base() + "/stats.json";
  WriteText(doc, r.out);
  std::string checked = Capture(absl::StrCat("python3 ", Runfile("testing/stats_json.py"), " ",
                                             Runfile("docs/stats.schema.json"), " ", doc,
                                             " || echo INVALID"));
  EXPECT_FALSE(absl::StrContains(checked, "INVALID")) << checked << "\n" << r.out;
  std::map<std::string, Row> rows;
  for (absl::string_view line : absl::StrSplit(checked, '\n', absl::SkipEmpty())) {
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    if (f.size() != 11) continue;
    Row& row = rows[f[0]];
    row.state = f[1];
    row.measured = f[2] == "1";
    EXPECT_TRUE(absl::SimpleAtod(f[3], &row.cpu_cores)) << line;
    EXPECT_TRUE(absl::SimpleAtoi(f[4], &row.processes) && absl::SimpleAtoi(f[5], &row.memory) &&
                absl::SimpleAtoi(f[6], &row.memory_limit) && absl::SimpleAtoi(f[7], &row.host_tasks) &&
                absl::SimpleAtoi(f[8], &row.output) && absl::SimpleAtoi(f[9], &row.net_in) &&
                absl::SimpleAtoi(f[10], &row.net_out))
        << line;
  }
  return rows;
}

std::string Create(const Service& svc, const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"create"};
  args.insert(args.end(), extra.begin(), extra.end());
  CliResult r = svc.Cli(Alpha(svc), args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.out.substr(0, r.out.find('\n'));
  EXPECT_TRUE(absl::StartsWith(id, "sb-")) << r.out;
  return id;
}

// paseo-sandbox-admin, as root or (with setpriv) as uid 4242, against this service's run dir.
CliResult Admin(const Service& svc, std::vector<std::string> args, bool as_root = true) {
  std::string admin = svc.base() + "/paseo-sandbox-admin";
  if (access(admin.c_str(), X_OK) != 0) CopyExecutable(Runfile("admin/paseo-sandbox-admin"), admin);
  std::vector<std::string> argv;
  if (!as_root) argv = {"/usr/bin/setpriv", "--reuid=4242", "--regid=4242", "--clear-groups"};
  argv.push_back(admin);
  argv.push_back("--config-dir=" + svc.base() + "/etc");
  argv.insert(argv.end(), args.begin(), args.end());
  std::string out = svc.base() + "/admin.out", err = svc.base() + "/admin.err";
  std::string cmd;
  for (const std::string& a : argv) cmd += "'" + a + "' ";
  int status = system((cmd + "> " + out + " 2> " + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, ReadFile(out), ReadFile(err)};
}

// The value of the sample line starting with `series` ("name{labels}" or "name"), or -1.
double Sample(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!absl::StartsWith(line, series + " ")) continue;
    double v = -1;
    return absl::SimpleAtod(line.substr(series.size() + 1), &v) ? v : -1;
  }
  return -1;
}

TEST(StatsTest, ABusySandboxsCpuShowsAndAnotherDeploymentSeesNothing) {
  Service& svc = *g_service;
  std::string busy = Create(svc), idle = Create(svc);
  ASSERT_FALSE(busy.empty());
  ASSERT_FALSE(idle.empty());
  // A process that spins, left running (the CLI is killed; the process is the service's), and
  // one that writes 300000 bytes and ends.
  CliResult spin = svc.Cli(Alpha(svc), {"exec", busy, "--", "sh", "-c", "while :; do :; done"},
                           std::chrono::milliseconds(1500));
  ASSERT_EQ(spin.exit_code, -1) << "the spinning process ended: " << spin.err;
  CliResult wrote = svc.Cli(Alpha(svc), {"exec", idle, "--", "head", "-c", "300000", "/dev/zero"});
  ASSERT_EQ(wrote.exit_code, 0) << wrote.err;
  EXPECT_EQ(wrote.out.size(), 300000u);

  auto rows = Stats(svc, Alpha(svc), {});
  ASSERT_TRUE(rows.count(busy) && rows.count(idle)) << "both are the caller's";
  const Row& b = rows[busy];
  const Row& i = rows[idle];
  EXPECT_EQ(b.state, "running");
  EXPECT_TRUE(b.measured);
  EXPECT_GT(b.cpu_cores, 0.3) << "a spinning process uses most of a core";
  EXPECT_LT(i.cpu_cores, 0.15) << "an idle sandbox uses next to none";
  EXPECT_GT(b.cpu_cores, i.cpu_cores + 0.25);
  EXPECT_EQ(b.processes, 1u);
  EXPECT_EQ(i.processes, 0u) << "its process ended";
  EXPECT_GE(i.output, 300000u) << "the ended process's output still counts";
  EXPECT_LT(b.output, 1000u);
  for (const Row* r : {&b, &i}) {
    EXPECT_GT(r->memory, uint64_t{4} << 20) << "a gVisor kernel's working set";
    EXPECT_GT(r->host_tasks, 3u);
    EXPECT_EQ(r->net_in, -1) << "network mode none: no link to count";
  }

  // Named ones only; and of another deployment, nothing: not in its listing, not by id.
  auto only = Stats(svc, Alpha(svc), {idle});
  EXPECT_EQ(only.size(), 1u);
  EXPECT_TRUE(only.count(idle));
  auto theirs = Stats(svc, Beta(svc), {});
  EXPECT_FALSE(theirs.count(busy) || theirs.count(idle)) << "beta sees alpha's sandboxes";
  CliResult by_id = svc.Cli(Beta(svc), {"stats", "--interval", "1", busy});
  EXPECT_EQ(by_id.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(by_id.err, "not-found")) << by_id.err;
  EXPECT_TRUE(by_id.out.empty()) << by_id.out;
  CliResult stranger = svc.Cli({4949, 4949, {4949, svc.socket_gid()}}, {"stats", "--interval", "1"});
  EXPECT_EQ(stranger.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(stranger.err, "permission-denied")) << stranger.err;

  // The table a person reads: a header and one line per sandbox.
  CliResult table = svc.Cli(Alpha(svc), {"stats", "--no-stream", "--interval", "0.5"});
  EXPECT_EQ(table.exit_code, 0) << table.err;
  EXPECT_TRUE(absl::StartsWith(table.out, "SANDBOX ")) << table.out;
  EXPECT_TRUE(absl::StrContains(table.out, busy) && absl::StrContains(table.out, idle)) << table.out;

  // The operator's view: both sandboxes, the CPU of the busy one, and the refusals above.
  CliResult metrics = Admin(svc, {"metrics", "--run-dir=" + svc.base() + "/run"});
  ASSERT_EQ(metrics.exit_code, 0) << metrics.err;
  EXPECT_EQ(Sample(metrics.out, "paseo_sandbox_up"), 1);
  std::string labels = "{sandbox=\"" + busy + "\",deployment=\"alpha\"}";
  EXPECT_GT(Sample(metrics.out, "paseo_sandbox_sandbox_cpu_seconds_total" + labels), 0.3)
      << metrics.out;
  EXPECT_EQ(Sample(metrics.out, "paseo_sandbox_sandbox_processes" + labels), 1);
  EXPECT_GE(Sample(metrics.out, "paseo_sandbox_sandbox_output_bytes_total{sandbox=\"" + idle +
                                    "\",deployment=\"alpha\"}"),
            300000);
  EXPECT_GE(Sample(metrics.out, "paseo_sandbox_sandboxes{deployment=\"alpha\",state=\"running\"}"), 2);
  EXPECT_GE(Sample(metrics.out, "paseo_sandbox_refused_requests_total{reason=\"not-found\"}"), 1);
  EXPECT_GE(Sample(metrics.out, "paseo_sandbox_refused_requests_total{reason=\"permission-denied\"}"), 1);
  EXPECT_GT(Sample(metrics.out, "paseo_sandbox_service_memory_bytes"), uint64_t{8} << 20);
  EXPECT_GT(Sample(metrics.out, "paseo_sandbox_audit_lines_total"), 5);

  for (const std::string& id : {busy, idle}) {
    CliResult rm = svc.Cli(Alpha(svc), {"rm", id});
    EXPECT_EQ(rm.exit_code, 0) << rm.err;
  }
}

TEST(StatsTest, TheOperatorSocketIsRootsAloneAndABrokerRestartCounts) {
  Service& svc = *g_service;
  std::string sock = svc.base() + "/run/operator.sock";
  struct stat st;
  ASSERT_EQ(lstat(sock.c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 0u);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  // Not root: the socket cannot be reached, and the answer says the service could not be asked.
  CliResult other = Admin(svc, {"metrics", "--run-dir=" + svc.base() + "/run"}, false);
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_EQ(Sample(other.out, "paseo_sandbox_up"), 0) << other.out;
  EXPECT_FALSE(absl::StrContains(other.out, "paseo_sandbox_sandbox")) << other.out;

  auto restarts = [&] {
    CliResult m = Admin(svc, {"metrics", "--run-dir=" + svc.base() + "/run"});
    return m.exit_code == 0 ? Sample(m.out, "paseo_sandbox_broker_restarts_total") : -1;
  };
  double before = restarts();
  ASSERT_GE(before, 0);
  pid_t broker = svc.broker_pid();
  ASSERT_GT(broker, 0);
  ASSERT_EQ(kill(broker, SIGKILL), 0);
  double after = -1;
  for (int i = 0; i < 100 && after != before + 1; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    after = restarts();
  }
  EXPECT_EQ(after, before + 1) << "the killed broker's restart is counted";
}

TEST(StatsTest, NodeExporterReadsTheTextfile) {
  Service& svc = *g_service;
  std::string dir = svc.base() + "/textfile";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  CliResult written =
      Admin(svc, {"metrics", "--run-dir=" + svc.base() + "/run", "--textfile-dir=" + dir});
  ASSERT_EQ(written.exit_code, 0) << written.err;
  EXPECT_TRUE(written.out.empty()) << written.out;
  std::string prom = ReadFile(dir + "/paseo_sandbox.prom");
  EXPECT_EQ(Sample(prom, "paseo_sandbox_up"), 1) << prom;
  // Debian's node_exporter on this test's own loopback (the harness gave the process a network
  // namespace of its own), with only its textfile collector.
  LoopbackUp();
  std::string log = svc.base() + "/node-exporter.log";
  pid_t exporter = fork();
  ASSERT_GE(exporter, 0);
  if (exporter == 0) {
    freopen(log.c_str(), "w", stderr);
    execl("/usr/bin/prometheus-node-exporter", "prometheus-node-exporter",
          "--web.listen-address=127.0.0.1:19100", "--collector.disable-defaults",
          "--collector.textfile", ("--collector.textfile.directory=" + dir).c_str(), nullptr);
    _exit(127);
  }
  std::string scraped;
  for (int i = 0; i < 100 && !absl::StrContains(scraped, "paseo_sandbox_up"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    scraped = Capture("curl -s --max-time 2 http://127.0.0.1:19100/metrics || true");
  }
  kill(exporter, SIGTERM);
  int status = 0;
  WaitPidWithin(exporter, 10, &status);
  EXPECT_EQ(Sample(scraped, "paseo_sandbox_up"), 1) << scraped << ReadFile(log);
  EXPECT_EQ(Sample(scraped, "node_textfile_scrape_error"), 0) << scraped;
  EXPECT_TRUE(absl::StrContains(scraped, "# TYPE paseo_sandbox_broker_restarts_total counter"))
      << scraped;
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  return paseo::testing::RunTestsWithOwnService(argc, argv, paseo::testing::ServiceOptions{},
                                                &paseo::testing::g_service);
}
