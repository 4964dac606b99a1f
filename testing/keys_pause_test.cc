// Sandbox keys and pause/resume on the real privhelper, broker and runsc: a paused sandbox's
// processes stop advancing and continue on resume, a signal sent while paused arrives on resume,
// nothing new starts while paused, a paused sandbox deletes without leaks; keyed creates are
// idempotent (concurrent ones too) and findSandbox answers after a broker SIGKILL and after a
// full service restart with policy keep (a paused sandbox comes back paused). One service with
// policy keep serves the suite; the API is driven in-process as root (deployment "io") and the
// CLI as uid 4242 (deployment "alpha").
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <memory>
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

void Sleep(int ms) {
  Io().provider->getTimer().afterDelay(ms * kj::MILLISECONDS).wait(Io().waitScope);
}

Identity Alpha(const Service& svc) { return {4242, 4242, {4242, svc.socket_gid()}}; }

std::string Reason(kj::Maybe<kj::Exception>& e) {
  KJ_IF_MAYBE(ex, e) { return ex->getDescription().cStr(); }
  return "(no error)";
}

class KeysPauseTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ServiceOptions options;
    options.helper_json_extra = ", \"onRestart\": \"keep\"";
    svc_ = new Service(options);
  }
  static void TearDownTestSuite() {
    svc_->Stop();
    EXPECT_EQ(svc_->Leaks(), std::vector<std::string>{});
    svc_->RemoveWorkArea();
    delete svc_;
  }

  Service& svc() { return *svc_; }

  api::Sandbox::Client NewSandbox(client::Connection& conn, std::string* id) {
    auto req = conn.supervisor().createSandboxRequest();
    auto spec = req.initSpec();
    spec.setDeploymentId("io");
    spec.setProfile("default");
    spec.initWorkspaces(1)[0].setPath(svc().base() + "/ws-io");
    auto res = Await(req.send(), "createSandbox");
    *id = res.getInfo().getId();
    return res.getSandbox();
  }

  api::Process::Client Start(api::Sandbox::Client sandbox, std::vector<std::string> argv) {
    auto req = sandbox.startProcessRequest();
    auto a = req.initSpec().initArgv(static_cast<unsigned>(argv.size()));
    for (size_t i = 0; i < argv.size(); ++i) a.set(static_cast<unsigned>(i), argv[i]);
    return Await(req.send(), "startProcess").getProcess();
  }

  static uint64_t StdoutBytes(api::Process::Client& p) {
    return Await(p.infoRequest().send(), "info").getInfo().getStdoutBytes();
  }
  static std::string State(api::Sandbox::Client& sb) {
    return Await(sb.inspectRequest().send(), "inspect").getInfo().getState().cStr();
  }

  // `paseo-sandbox find KEY` as Alpha, retried while no broker answers (after a crash).
  CliResult FindAfterRestart(const std::string& key) {
    CliResult r;
    for (int i = 0; i < 300; ++i) {
      r = svc().Cli(Alpha(svc()), {"find", "--deployment", "alpha", key});
      if (r.exit_code == 0 || absl::StrContains(r.err, "not-found")) break;
      usleep(100000);
    }
    return r;
  }

  static Service* svc_;
};

Service* KeysPauseTest::svc_ = nullptr;

TEST_F(KeysPauseTest, APausedSandboxsProcessesStopAndContinueOnResume) {
  client::Connection conn(Io(), svc().socket());
  std::string id;
  auto sandbox = NewSandbox(conn, &id);
  auto counter =
      Start(sandbox, {"sh", "-c", "i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done"});
  for (int i = 0; i < 100 && StdoutBytes(counter) == 0; ++i) Sleep(50);
  ASSERT_GT(StdoutBytes(counter), 0u) << "the counter never printed";

  Await(sandbox.pauseRequest().send(), "pause");
  EXPECT_EQ(State(sandbox), "paused");
  Sleep(300);  // what was in the pipe when it froze reaches the log
  uint64_t frozen = StdoutBytes(counter);
  Sleep(1500);
  EXPECT_EQ(StdoutBytes(counter), frozen) << "a paused counter advanced";
  Await(sandbox.pauseRequest().send(), "pause again");  // does nothing
  // Nothing new starts while paused.
  auto start = sandbox.startProcessRequest();
  start.initSpec().initArgv(1).set(0, "true");
  auto refused = kj::runCatchingExceptions([&] { Await(start.send(), "startProcess"); });
  EXPECT_TRUE(
      absl::StrContains(Reason(refused), "failed-precondition: sandbox " + id + " is paused"))
      << Reason(refused);

  Await(sandbox.resumeRequest().send(), "resume");
  EXPECT_EQ(State(sandbox), "running");
  Sleep(1000);
  EXPECT_GT(StdoutBytes(counter), frozen) << "the counter did not continue after resume";

  // A signal sent while paused arrives on resume (runsc itself refuses to signal a frozen
  // container).
  Await(sandbox.pauseRequest().send(), "pause");
  auto kill = counter.signalRequest();
  kill.setSignal(SIGKILL);
  Await(kill.send(), "signal");
  Sleep(500);
  EXPECT_EQ(Await(counter.infoRequest().send(), "info").getInfo().getStatus().which(),
            api::ExitStatus::RUNNING)
      << "the signal arrived while paused";
  Await(sandbox.resumeRequest().send(), "resume");
  auto status = Await(counter.waitRequest().send(), "wait").getStatus();
  ASSERT_EQ(status.which(), api::ExitStatus::SIGNAL);
  EXPECT_EQ(status.getSignal(), SIGKILL);

  auto del = sandbox.deleteRequest();
  Await(del.send(), "delete");
  EXPECT_EQ(svc().LeaksAfter(5), std::vector<std::string>{});
}

TEST_F(KeysPauseTest, APausedSandboxDeletesWithoutLeaks) {
  client::Connection conn(Io(), svc().socket());
  std::string id;
  auto sandbox = NewSandbox(conn, &id);
  auto sleeper = Start(sandbox, {"sleep", "1000"});
  Await(sandbox.pauseRequest().send(), "pause");
  ASSERT_EQ(State(sandbox), "paused");
  auto del = sandbox.deleteRequest();
  del.setForce(true);
  Await(del.send(), "delete");
  // Its process goes with it (not-found, like the sandbox, once its background teardown ends).
  std::string reason;
  for (int i = 0; i < 150 && !absl::StrContains(reason, "not-found"); ++i) {
    if (i > 0) usleep(100000);
    auto error = kj::runCatchingExceptions([&] { Await(sleeper.infoRequest().send(), "info"); });
    reason = Reason(error);
  }
  EXPECT_TRUE(absl::StrContains(reason, "not-found")) << reason;
  EXPECT_EQ(svc().LeaksAfter(5), std::vector<std::string>{});
}

TEST_F(KeysPauseTest, KeyedCreatesAreIdempotentAndSurviveBrokerAndServiceRestarts) {
  const Identity alpha = Alpha(svc());
  std::vector<std::string> create = {"create", "--key", "ws-a", "--workspace",
                                     svc().base() + "/ws-alpha:/workspace:rw"};
  CliResult made = svc().Cli(alpha, create);
  ASSERT_EQ(made.exit_code, 0) << made.err;
  std::string id = made.out.substr(0, made.out.find('\n'));
  ASSERT_TRUE(absl::StartsWith(id, "sb-")) << made.out;
  CliResult again = svc().Cli(alpha, create);
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, id + "\n");
  EXPECT_TRUE(absl::StrContains(again.err, "nothing was created")) << again.err;

  // Two creates with one key at once: one sandbox, both told its id.
  std::vector<std::string> create_b = {"create", "--key", "ws-b"};
  auto first = std::async(std::launch::async, [&] { return svc().Cli(alpha, create_b); });
  auto second = std::async(std::launch::async, [&] { return svc().Cli(alpha, create_b); });
  CliResult a = first.get(), b = second.get();
  ASSERT_EQ(a.exit_code, 0) << a.err;
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out);
  std::string id_b = a.out.substr(0, a.out.find('\n'));
  auto ps = svc().Cli(alpha, {"--json", "ps"});
  size_t listed = 0;
  for (size_t at = 0; (at = ps.out.find("\"id\":\"sb-", at)) != std::string::npos; ++at) ++listed;
  EXPECT_EQ(listed, 2u) << ps.out;

  // The broker dies (SIGKILL); the privhelper starts another, which still knows the keys.
  pid_t old = svc().broker_pid();
  ASSERT_GT(old, 0);
  kill(old, SIGKILL);
  CliResult found = FindAfterRestart("ws-a");
  EXPECT_EQ(found.exit_code, 0) << found.err;
  EXPECT_EQ(found.out, id + "\n");
  EXPECT_EQ(svc().Cli(alpha, {"find", "--deployment", "alpha", "ws-b"}).out, id_b + "\n");

  // The whole service restarts (policy keep) with ws-a paused: it comes back paused, with its key.
  CliResult paused = svc().Cli(alpha, {"pause", id});
  ASSERT_EQ(paused.exit_code, 0) << paused.err;
  svc().Crash();
  svc().Restart();
  found = FindAfterRestart("ws-a");
  EXPECT_EQ(found.exit_code, 0) << found.err;
  EXPECT_EQ(found.out, id + "\n");
  ps = svc().Cli(alpha, {"--json", "ps"});
  EXPECT_TRUE(absl::StrContains(ps.out, "\"id\":\"" + id + "\",\"deployment\":\"alpha\","
                                        "\"profile\":\"default\",\"state\":\"paused\","
                                        "\"key\":\"ws-a\""))
      << ps.out;
  CliResult refused = svc().Cli(alpha, {"exec", id, "--", "true"});
  EXPECT_EQ(refused.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(refused.err, "paused")) << refused.err;
  CliResult resumed = svc().Cli(alpha, {"resume", id});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  CliResult works = svc().Cli(alpha, {"exec", id, "--", "echo", "works"});
  EXPECT_EQ(works.exit_code, 0) << works.err;
  EXPECT_EQ(works.out, "works\n");
  // Still idempotent, and the key is free once its sandbox is deleted.
  EXPECT_EQ(svc().Cli(alpha, create).out, id + "\n");
  CliResult rm = svc().Cli(alpha, {"rm", id, id_b});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  CliResult gone = svc().Cli(alpha, {"find", "--deployment", "alpha", "ws-a"});
  EXPECT_EQ(gone.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(gone.err, "not-found")) << gone.err;
  EXPECT_EQ(svc().LeaksAfter(5), std::vector<std::string>{});
}

}  // namespace
}  // namespace paseo::testing
