// A sandbox that dies underneath the service (attack run, item 5): its sentry (runsc-sandbox)
// or its gofer (runsc-gofer) SIGKILLed from outside. Within a bounded time the service shows it
// `stopped` with why, ends its processes' waits and streams, refuses new processes (the CLI
// exits 125 with the reason), deletes it quickly and leaves nothing; a broker restarted after
// the death shows it the same way. Drives the API in-process as root (deployment "io", agents
// run as 4242) and the CLI as root.
#include <signal.h>
#include <unistd.h>

#include <chrono>
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

using Clock = std::chrono::steady_clock;



void Sleep(int ms) {
  Io().provider->getTimer().afterDelay(ms * kj::MILLISECONDS).wait(Io().waitScope);
}

// Counts what one stream delivered and how it ended.
class EndSink final : public api::OutputSink::Server {
 public:
  explicit EndSink(kj::Own<kj::PromiseFulfiller<void>> done) : done_(kj::mv(done)) {}
  bool ended = false;
  api::ExitStatus::Which status = api::ExitStatus::RUNNING;

 protected:
  kj::Promise<void> write(WriteContext) override { return kj::READY_NOW; }
  kj::Promise<void> gap(GapContext) override { return kj::READY_NOW; }
  kj::Promise<void> end(EndContext context) override {
    ended = true;
    status = context.getParams().getStatus().which();
    done_->fulfill();
    return kj::READY_NOW;
  }

 private:
  kj::Own<kj::PromiseFulfiller<void>> done_;
};

Identity Root(const Service& svc) { return {0, 0, {0, svc.socket_gid()}}; }

api::Sandbox::Client SandboxById(client::Connection& conn, const std::string& id) {
  auto get = conn.supervisor().getSandboxRequest();
  get.setId(id);
  return get.send().getSandbox();
}

struct State {
  std::string state, reason;
};

// The sandbox's state as a new connection sees it (empty while no broker serves).
State Inspect(const Service& svc, const std::string& id) {
  State out;
  auto error = kj::runCatchingExceptions([&] {
    client::Connection conn(Io(), svc.socket());
    auto inspected = Await(SandboxById(conn, id).inspectRequest().send(), "inspect");
    out = {inspected.getInfo().getState().cStr(), inspected.getInfo().getStateReason().cStr()};
  });
  KJ_IF_MAYBE(e, error) { out.reason = e->getDescription().cStr(); }
  return out;
}

// Polls until the sandbox is no longer "running" (or `seconds` pass); how long it took.
State AwaitStopped(const Service& svc, const std::string& id, double* took, int seconds = 20) {
  auto start = Clock::now();
  State s;
  while (Clock::now() - start < std::chrono::seconds(seconds)) {
    s = Inspect(svc, id);
    if (!s.state.empty() && s.state != "running") break;
    Sleep(100);
  }
  *took = std::chrono::duration<double>(Clock::now() - start).count();
  return s;
}

// The reason names the process that died and, when the kernel could tell in time, how.
void ExpectReason(const std::string& reason, const std::string& who, const std::string& how) {
  EXPECT_TRUE(absl::StartsWith(reason, who)) << reason;
  std::string rest = reason.substr(std::min(reason.size(), who.size()));
  EXPECT_TRUE(rest.empty() || rest == how) << reason;
  if (rest.empty()) std::printf("note: no exit status within the patience: %s\n", reason.c_str());
}

class SandboxDeathTest : public ::testing::Test {
 protected:
  Service& svc = Service::Get();

  std::string NewSandbox(client::Connection& conn) {
    auto req = conn.supervisor().createSandboxRequest();
    auto spec = req.initSpec();
    spec.setDeploymentId("io");
    auto ws = spec.initWorkspaces(1);
    ws[0].setPath(svc.base() + "/ws-io");
    return Await(req.send(), "createSandbox").getInfo().getId();
  }

  api::Process::Client Start(api::Sandbox::Client sandbox, std::vector<std::string> argv,
                             std::string* id = nullptr) {
    auto req = sandbox.startProcessRequest();
    auto a = req.initSpec().initArgv(static_cast<unsigned>(argv.size()));
    for (size_t i = 0; i < argv.size(); ++i) a.set(static_cast<unsigned>(i), argv[i]);
    auto res = Await(req.send(), "startProcess");
    if (id != nullptr) *id = res.getInfo().getId();
    return res.getProcess();
  }

  // A subscriber to the process's stdout: its sink and the promise of its end.
  struct Subscriber {
    EndSink* sink;
    api::OutputSink::Client sink_ref;
    api::Subscription::Client subscription;
    kj::Promise<void> ended;
  };
  Subscriber Subscribe(api::Process::Client process) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    auto sink = kj::heap<EndSink>(kj::mv(paf.fulfiller));
    EndSink* raw = sink.get();
    api::OutputSink::Client sink_ref = kj::mv(sink);
    auto req = process.subscribeRequest();
    req.setStream(api::Stream::STDOUT);
    req.setFromOffset(0);
    req.setSink(sink_ref);
    auto sub = Await(req.send(), "subscribe").getSubscription();
    return {raw, sink_ref, kj::mv(sub), kj::mv(paf.promise)};
  }

  // What every death must look like from the outside, once the service has noticed.
  // The sandbox becomes stopped because `who` was killed by SIGKILL; then it refuses new
  // processes and deletes cleanly.
  void ExpectStoppedByKillThenDeletable(const std::string& id, const std::string& who) {
    double took = 0;
    State s = AwaitStopped(svc, id, &took);
    std::printf("stopped after %.2f s: %s\n", took, s.reason.c_str());
    ASSERT_EQ(s.state, "stopped") << s.reason;
    ExpectReason(s.reason, who, " (killed by signal 9)");
    ExpectRefusedAndDeletable(id, s.reason);
  }

  void ExpectRefusedAndDeletable(const std::string& id, const std::string& reason) {
    auto exec = svc.Cli(Root(svc), {"exec", id, "--", "true"}, std::chrono::seconds(30));
    EXPECT_EQ(exec.exit_code, 125) << exec.err;
    EXPECT_TRUE(absl::StrContains(exec.err, "failed-precondition: sandbox " + id +
                                                " is stopped: " + reason))
        << exec.err;
    auto ps = svc.Cli(Root(svc), {"--json", "ps"}, std::chrono::seconds(30));
    EXPECT_TRUE(absl::StrContains(ps.out, "\"state\":\"stopped\",\"stateReason\":\"" + reason))
        << ps.out;
    auto start = Clock::now();
    auto rm = svc.Cli(Root(svc), {"rm", id}, std::chrono::seconds(30));
    double took = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_EQ(rm.exit_code, 0) << rm.err;
    std::printf("rm of the stopped sandbox: %.2f s\n", took);
    EXPECT_LT(took, 10.0);
  }

  void TearDown() override {
    client::Connection conn(Io(), svc.socket());
    auto list = Await(conn.supervisor().listSandboxesRequest().send(), "listSandboxes");
    for (auto info : list.getSandboxes()) {
      // A sandbox deleted by the test is `deleting` until its background teardown ends.
      if (info.getState() == "deleting") continue;
      auto del = SandboxById(conn, info.getId()).deleteRequest();
      del.setForce(true);
      Await(del.send(), "delete");
      ADD_FAILURE() << "test left sandbox " << info.getId().cStr();
    }
    EXPECT_EQ(svc.LeaksAfter(5), std::vector<std::string>{});
  }
};

TEST_F(SandboxDeathTest, AKilledSentryStopsTheSandboxEndsItsProcessesAndIsRefused) {
  client::Connection conn(Io(), svc.socket());
  std::string id = NewSandbox(conn);
  auto sandbox = SandboxById(conn, id);
  auto sleeper = Start(sandbox, {"sleep", "1000"});
  auto subscriber = Subscribe(sleeper);
  auto waited = sleeper.waitRequest().send();

  pid_t sentry = svc.SandboxProcess("runsc-sandbox", id);
  ASSERT_GT(sentry, 0);
  ASSERT_EQ(kill(sentry, SIGKILL), 0);

  auto status = Await(kj::mv(waited), "the process's wait after the sentry died", 20);
  EXPECT_EQ(status.getStatus().which(), api::ExitStatus::UNKNOWN);
  Await(kj::mv(subscriber.ended), "the subscriber's end after the sentry died", 20);
  EXPECT_EQ(subscriber.sink->status, api::ExitStatus::UNKNOWN);
  ExpectStoppedByKillThenDeletable(id, "its gVisor kernel (runsc-sandbox) exited");
}

// The attack run's steps: `run --keep -- true`, then the gofer killed.
TEST_F(SandboxDeathTest, AKilledGoferStopsTheSandbox) {
  auto run = svc.Cli(Root(svc), {"run", "--deployment", "io", "--keep", "--", "true"},
                     std::chrono::seconds(60));
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto at = run.err.find("sb-");
  ASSERT_NE(at, std::string::npos) << run.err;
  std::string id = run.err.substr(at, 27);
  pid_t gofer = svc.SandboxProcess("runsc-gofer", id);
  ASSERT_GT(gofer, 0);
  ASSERT_EQ(kill(gofer, SIGKILL), 0);
  ExpectStoppedByKillThenDeletable(id, "its gVisor file server (runsc-gofer) exited");
}

// The sentry dies while no broker runs: the restarted broker learns it from the privhelper's
// inventory, and the process it reattaches ends.
TEST_F(SandboxDeathTest, ABrokerRestartedAfterTheDeathShowsItStopped) {
  std::string id, process_id;
  {
    client::Connection conn(Io(), svc.socket());
    id = NewSandbox(conn);
    Start(SandboxById(conn, id), {"sleep", "1000"}, &process_id);
  }
  pid_t broker = svc.broker_pid();
  ASSERT_GT(broker, 0);
  pid_t sentry = svc.SandboxProcess("runsc-sandbox", id);
  ASSERT_GT(sentry, 0);
  ASSERT_EQ(kill(broker, SIGKILL), 0);
  ASSERT_EQ(kill(sentry, SIGKILL), 0);
  double took = 0;
  State s = AwaitStopped(svc, id, &took, 30);
  std::printf("a restarted broker shows it %s after %.2f s: %s\n", s.state.c_str(), took,
              s.reason.c_str());
  EXPECT_NE(svc.broker_pid(), broker);
  ASSERT_EQ(s.state, "stopped") << s.reason;
  ExpectReason(s.reason, "its gVisor kernel (runsc-sandbox) exited", " (killed by signal 9)");
  {
    client::Connection conn(Io(), svc.socket());
    auto get = SandboxById(conn, id).getProcessRequest();
    get.setId(process_id);
    auto status = Await(get.send().getProcess().waitRequest().send(), "the reattached wait", 20);
    EXPECT_EQ(status.getStatus().which(), api::ExitStatus::UNKNOWN);
  }
  ExpectRefusedAndDeletable(id, s.reason);
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  return paseo::testing::RunTestsWithSharedService(argc, argv);
}
