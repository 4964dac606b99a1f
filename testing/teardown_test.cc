// Teardown that makes nobody wait (issue 14, docs/decisions.md 39), against the real privhelper,
// broker and runsc: a delete answers once nothing runs in the sandbox; runsc's state, mounts,
// cgroups, network and bundle are released in the background. 200 deletes in a row leave
// nothing behind and never hold up an exec in another sandbox for longer than a request takes;
// a privhelper SIGKILLed during a background teardown has it finished by its next start (restart
// policy keep, so only the persisted "deleting" marker can make it do so).
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <kj/async-io.h>

#include "absl/strings/match.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "testing/await.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::time_point since) {
  return std::chrono::duration<double, std::milli>(Clock::now() - since).count();
}

double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

Identity Alpha(const Service& svc) { return {4242, 4242, {4242, svc.socket_gid()}}; }

api::Sandbox::Client NewSandbox(client::Connection& conn, const Service& svc) {
  auto req = conn.supervisor().createSandboxRequest();
  auto spec = req.initSpec();
  spec.setDeploymentId("io");
  auto ws = spec.initWorkspaces(1);
  ws[0].setPath(svc.base() + "/ws-io");
  return Await(req.send(), "createSandbox").getSandbox();
}

// startProcess(`true`) with a pipelined wait: one exec, start to exit status.
kj::Promise<double> TimedExec(api::Sandbox::Client& sandbox) {
  auto start = Clock::now();
  auto req = sandbox.startProcessRequest();
  req.initSpec().initArgv(1).set(0, "true");
  auto started = req.send();
  return started.getProcess().waitRequest().send().then(
      [start, started = kj::mv(started)](auto&& waited) mutable {
        EXPECT_EQ(waited.getStatus().which(), api::ExitStatus::EXIT_CODE);
        return Ms(start);
      });
}

// Execs one after another until `*done`, each latency into `out`.
kj::Promise<void> ExecUntil(api::Sandbox::Client& sandbox, const bool* done,
                            std::vector<double>* out) {
  if (*done) return kj::READY_NOW;
  return TimedExec(sandbox).then([&sandbox, done, out](double ms) {
    out->push_back(ms);
    return ExecUntil(sandbox, done, out);
  });
}

// Creates and deletes `left` sandboxes one after another, each delete's answer time into `out`.
kj::Promise<void> CreateDelete(client::Connection& conn, const Service& svc, int left,
                               std::vector<double>* out) {
  if (left == 0) return kj::READY_NOW;
  auto req = conn.supervisor().createSandboxRequest();
  auto spec = req.initSpec();
  spec.setDeploymentId("io");
  spec.initWorkspaces(1)[0].setPath(svc.base() + "/ws-io");
  return req.send().then([&conn, &svc, left, out](auto&& created) {
    auto sandbox = created.getSandbox();
    auto start = Clock::now();
    auto del = sandbox.deleteRequest();
    del.setForce(true);
    return del.send().then([&conn, &svc, left, out, start, sandbox](auto&&) mutable {
      out->push_back(Ms(start));
      return CreateDelete(conn, svc, left - 1, out);
    });
  });
}

TEST(TeardownTest, TwoHundredDeletesLeaveNothingAndNeverHoldUpAnExecElsewhere) {
  Service& svc = Service::Get();
  client::Connection conn(Io(), svc.socket());
  auto busy = NewSandbox(conn, svc);
  // Baseline: execs in `busy` with nothing else going on.
  std::vector<double> baseline;
  for (int i = 0; i < 30; ++i) baseline.push_back(TimedExec(busy).wait(Io().waitScope));

  std::vector<double> during, deletes;
  bool done = false;
  auto deleting = CreateDelete(conn, svc, 200, &deletes).then([&done] { done = true; });
  auto probing = ExecUntil(busy, &done, &during);
  deleting.wait(Io().waitScope);
  probing.wait(Io().waitScope);

  std::printf("exec in another sandbox: baseline median %.1f ms p90 %.1f ms max %.1f ms (n=%zu); "
              "during 200 create+delete: median %.1f ms p90 %.1f ms max %.1f ms (n=%zu)\n",
              Quantile(baseline, 0.5), Quantile(baseline, 0.9), Quantile(baseline, 1),
              baseline.size(), Quantile(during, 0.5), Quantile(during, 0.9), Quantile(during, 1),
              during.size());
  std::printf("delete answered after: median %.1f ms p90 %.1f ms max %.1f ms\n",
              Quantile(deletes, 0.5), Quantile(deletes, 0.9), Quantile(deletes, 1));
  ASSERT_EQ(deletes.size(), 200u);
  ASSERT_GE(during.size(), 20u) << "execs kept running during the deletes";
  // A delete that held the privhelper's (or broker's) loop for its whole teardown (runsc delete
  // takes about 1.2 s here, under this VM's init) would push an exec by that much. The creates
  // running alongside do cost their own synchronous part (mounts), hence the generous factors.
  EXPECT_LE(Quantile(during, 0.5), 3 * Quantile(baseline, 0.5) + 20);
  EXPECT_LE(Quantile(during, 0.9), 4 * Quantile(baseline, 0.9) + 100);
  // The caller is answered once nothing runs, not after runsc delete (1.2-1.8 s here).
  EXPECT_LE(Quantile(deletes, 0.5), 600);

  auto del = busy.deleteRequest();
  del.setForce(true);
  Await(del.send(), "delete");
  EXPECT_EQ(svc.LeaksAfter(15), std::vector<std::string>{});
}

TEST(TeardownTest, ADeleteAnswersWithTheSandboxDeletingAndASecondDeleteAnswersToo) {
  Service& svc = Service::Get();
  client::Connection conn(Io(), svc.socket());
  auto sandbox = NewSandbox(conn, svc);
  std::string id = Await(sandbox.inspectRequest().send(), "inspect").getInfo().getId();
  auto first = sandbox.deleteRequest();
  first.setForce(true);
  auto second = sandbox.deleteRequest();
  second.setForce(true);
  auto a = first.send();
  auto b = second.send();
  Await(kj::mv(a), "first delete");
  Await(kj::mv(b), "second delete");
  auto ps = svc.Cli({0, 0, {0, svc.socket_gid()}}, {"--json", "ps"});
  std::printf("ps right after the delete: %s", ps.out.c_str());
  // Either still being torn down (and shown so) or already gone; never anything else.
  if (absl::StrContains(ps.out, id)) {
    EXPECT_TRUE(absl::StrContains(ps.out, "\"state\":\"deleting\"")) << ps.out;
  }
  auto third = sandbox.deleteRequest();
  third.setForce(true);
  auto again = third.send().then([](auto&&) { return std::string(); },
                                 [](kj::Exception&& e) { return std::string(e.getDescription().cStr()); });
  std::string error = again.wait(Io().waitScope);
  EXPECT_TRUE(error.empty() || absl::StartsWith(error, "not-found: ")) << error;
  EXPECT_EQ(svc.LeaksAfter(15), std::vector<std::string>{});
}

// Own service (restart policy keep): only the record's "deleting" marker makes the next
// privhelper destroy a sandbox it would otherwise adopt.
TEST(TeardownTest, APrivhelperKilledDuringABackgroundTeardownHasItFinishedByTheNextStart) {
  ServiceOptions options;
  options.helper_json_extra = ", \"onRestart\": \"keep\"";
  Service svc(options);
  int caught = 0;
  for (int attempt = 0; attempt < 5 && caught == 0; ++attempt) {
    auto run = svc.Cli(Alpha(svc), {"run", "--keep", "--workspace",
                                    svc.base() + "/ws-alpha:/workspace:rw", "--", "true"});
    ASSERT_EQ(run.exit_code, 0) << run.err;
    auto pos = run.err.find("sb-");
    ASSERT_NE(pos, std::string::npos) << run.err;
    std::string id = run.err.substr(pos, 27);
    auto rm = svc.Cli(Alpha(svc), {"rm", id});
    ASSERT_EQ(rm.exit_code, 0) << rm.err;
    // At once: the teardown (runsc delete, unmounts, bundle) is still under way.
    svc.Crash();
    struct stat st;
    bool mid = stat((svc.bundles() + "/" + id).c_str(), &st) == 0;
    std::printf("attempt %d: privhelper killed %s the background teardown\n", attempt,
                mid ? "during" : "after");
    if (mid) ++caught;
    svc.Restart();
    EXPECT_EQ(svc.LeaksAfter(15), std::vector<std::string>{});
    auto ps = svc.Cli(Alpha(svc), {"--json", "ps"});
    EXPECT_FALSE(absl::StrContains(ps.out, id)) << ps.out;
  }
  EXPECT_GT(caught, 0) << "never killed it during a teardown: nothing was tested";
  svc.Stop();
  EXPECT_EQ(svc.Leaks(), std::vector<std::string>{});
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  return paseo::testing::RunTestsWithSharedService(argc, argv);
}
