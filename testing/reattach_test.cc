// Processes survive a supervisor restart (docs/decisions.md 54): the privhelper and broker are
// SIGKILLed together, as an upgrade with onRestart "keep" does, and the new privhelper reattaches
// each sandbox's spawner through `shim attach`. Against the real service and runsc:
//   - a process that exits while the supervisor is down reports its own exit code afterwards,
//     its output arriving exactly once;
//   - a drop-oldest terminal process that writes more than the spawner keeps while no supervisor
//     runs shows one gap, with exact offsets, and still takes input afterwards;
//   - a sandbox that squats and floods the reattach socket loses at most its own processes, and
//     its neighbour's process carries on.
// A spawner of another protocol version is refused cleanly: spawner_channel_test's.
// The 256 MiB lossless transfer across two restarts is lossless_test's.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "testing/await.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

// One stream as a reconnecting client sees it: every byte at its offset, gaps where they are.
struct StreamView {
  std::string bytes;  // what arrived, gaps left out
  uint64_t next = 0;  // where the client resubscribes
  std::vector<std::pair<uint64_t, uint64_t>> gaps;  // (offset, lost bytes)
  bool ended = false;
  std::string errors;
};

class ViewSink final : public api::OutputSink::Server {
 public:
  explicit ViewSink(StreamView& view) : view_(view) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto p = context.getParams();
    if (p.getOffset() != view_.next && view_.errors.size() < 400)
      view_.errors += "write at " + std::to_string(p.getOffset()) + ", expected " +
                      std::to_string(view_.next) + "; ";
    view_.bytes.append(reinterpret_cast<const char*>(p.getData().begin()), p.getData().size());
    view_.next = p.getOffset() + p.getData().size();
    return kj::READY_NOW;
  }
  kj::Promise<void> gap(GapContext context) override {
    view_.gaps.emplace_back(view_.next, context.getParams().getLostBytes());
    view_.next += context.getParams().getLostBytes();
    return kj::READY_NOW;
  }
  kj::Promise<void> end(EndContext) override {
    view_.ended = true;
    return kj::READY_NOW;
  }

 private:
  StreamView& view_;
};

bool RunUntil(const std::function<bool()>& done, int seconds) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done() && std::chrono::steady_clock::now() < deadline)
    Io().provider->getTimer().afterDelay(20 * kj::MILLISECONDS).wait(Io().waitScope);
  return done();
}

// A connection, and one process's subscription on it.
struct Session {
  kj::Own<client::Connection> conn;
  api::Process::Client process = nullptr;
  api::Subscription::Client subscription = nullptr;
};

Session Follow(const Service& svc, const std::string& sandbox_id, const std::string& process_id,
               api::Stream stream, StreamView& view) {
  Session s;
  s.conn = kj::heap<client::Connection>(Io(), svc.socket());
  auto get = s.conn->supervisor().getSandboxRequest();
  get.setId(sandbox_id);
  auto find = get.send().getSandbox().getProcessRequest();
  find.setId(process_id);
  s.process = find.send().getProcess();
  auto sub = s.process.subscribeRequest();
  sub.setStream(stream);
  sub.setFromOffset(view.next);
  sub.setSink(kj::heap<ViewSink>(view));
  s.subscription = Await(sub.send(), "subscribe").getSubscription();
  return s;
}

class ReattachTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServiceOptions options;
    options.helper_json_extra = ", \"onRestart\": \"keep\"";
    svc_ = std::make_unique<Service>(options);
  }
  void TearDown() override {
    for (const auto& id : sandboxes_) svc_->Cli({0, 0, {0}}, {"rm", "--force", id});
    EXPECT_EQ(svc_->Stop(), 0);
    EXPECT_EQ(svc_->LeaksAfter(10), std::vector<std::string>{});
    svc_->RemoveWorkArea();
  }

  std::string Create(const std::string& workspace = "/ws-io") {
    client::Connection conn(Io(), svc_->socket());
    auto create = conn.supervisor().createSandboxRequest();
    create.initSpec().setDeploymentId("io");
    auto ws = create.getSpec().initWorkspaces(1);
    ws[0].setPath(svc_->base() + workspace);
    ws[0].setMode(api::AccessMode::READ_WRITE);  // the processes leave files for the test
    std::string id = Await(create.send(), "create").getInfo().getId().cStr();
    sandboxes_.push_back(id);
    return id;
  }

  std::string StartProcess(const std::string& sandbox_id, const std::string& script,
                           api::OutputMode output, bool tty = false) {
    client::Connection conn(Io(), svc_->socket());
    auto get = conn.supervisor().getSandboxRequest();
    get.setId(sandbox_id);
    auto start = get.send().getSandbox().startProcessRequest();
    auto spec = start.initSpec();
    auto argv = spec.initArgv(3);
    argv.set(0, "sh");
    argv.set(1, "-c");
    argv.set(2, script);
    spec.setOutput(output);
    spec.setTty(tty);
    return Await(start.send(), "start").getInfo().getId().cStr();
  }

  // The process's exit code; -1 if it did not end with one.
  static int ExitCode(Session& s) {
    auto waited = Await(s.process.waitRequest().send(), "wait", 120);
    auto status = waited.getStatus();
    return status.which() == api::ExitStatus::EXIT_CODE ? status.getExitCode() : -1;
  }

  // Both daemons die at once (the privhelper is SIGKILLed, its broker follows), then a new
  // privhelper starts on the same state with onRestart "keep".
  void RestartSupervisor(const std::function<void()>& while_down = [] {}) {
    svc_->Crash();
    while_down();
    svc_->Restart();
  }

  std::string SandboxState(const std::string& id) {
    auto ps = svc_->Cli({0, 0, {0}}, {"--json", "ps"});
    auto at = ps.out.find("\"id\":\"" + id + "\"");
    if (at == std::string::npos) return "absent";
    auto state = ps.out.find("\"state\":\"", at);
    return state == std::string::npos
               ? "?"
               : ps.out.substr(state + 9, ps.out.find('"', state + 9) - state - 9);
  }

  std::unique_ptr<Service> svc_;
  std::vector<std::string> sandboxes_;
};

TEST_F(ReattachTest, AProcessThatExitsWhileTheSupervisorIsDownReportsItsOwnExitCode) {
  std::string sb = Create();
  std::string go = svc_->base() + "/ws-io/go-exit";
  std::string p = StartProcess(
      sb, "echo before; while [ ! -e /workspace/go-exit ]; do sleep 0.05; done; echo after; exit 42",
      api::OutputMode::LOSSLESS);
  StreamView out;
  {
    Session s = Follow(*svc_, sb, p, api::Stream::STDOUT, out);
    ASSERT_TRUE(RunUntil([&] { return out.bytes == "before\n"; }, 60)) << out.bytes;
  }
  RestartSupervisor([&] {
    WriteText(go, "");
    sleep(2);  // it ends while nothing supervises it
  });
  EXPECT_EQ(SandboxState(sb), "running") << "its spawner was reattached";
  Session s = Follow(*svc_, sb, p, api::Stream::STDOUT, out);
  ASSERT_TRUE(RunUntil([&] { return out.ended; }, 60)) << out.bytes;
  EXPECT_EQ(ExitCode(s), 42);
  EXPECT_EQ(out.bytes, "before\nafter\n") << "every byte once, in order";
  EXPECT_EQ(out.errors, "");
  EXPECT_TRUE(out.gaps.empty());
  unlink(go.c_str());
}

TEST_F(ReattachTest, ATerminalProcessShowsAnExactGapAndStillTakesInput) {
  std::string sb = Create();
  std::string go = svc_->base() + "/ws-io/go-tty";
  std::string written = svc_->base() + "/ws-io/tty-written";
  // 4 MiB while nobody supervises it: far more than the spawner keeps of a drop-oldest
  // stream (spawner_frames.h kMaxRetainedBytes), then a line typed after the restart.
  std::string p = StartProcess(
      sb,
      "stty -echo; echo ready; while [ ! -e /workspace/go-tty ]; do sleep 0.05; done; "
      "yes 0123456789abcdef | head -c 4194304; echo; echo end-of-flood; "
      "touch /workspace/tty-written; read line; echo got:$line",
      api::OutputMode::DROP_OLDEST, /*tty=*/true);
  StreamView pty;
  {
    Session s = Follow(*svc_, sb, p, api::Stream::PTY, pty);
    ASSERT_TRUE(RunUntil([&] { return absl::StrContains(pty.bytes, "ready"); }, 60)) << pty.bytes;
  }
  uint64_t before = pty.next;
  struct stat st;
  RestartSupervisor([&] {
    WriteText(go, "");
    for (int i = 0; i < 1800 && stat(written.c_str(), &st) != 0; ++i) usleep(100000);
  });
  ASSERT_EQ(stat(written.c_str(), &st), 0) << "the flood ran while the supervisor was down";
  Session s = Follow(*svc_, sb, p, api::Stream::PTY, pty);
  ASSERT_TRUE(RunUntil([&] { return absl::StrContains(pty.bytes, "end-of-flood"); }, 60));
  EXPECT_EQ(pty.errors, "");
  ASSERT_EQ(pty.gaps.size(), 1u) << "one gap, where the spawner's newest bytes begin";
  EXPECT_GE(pty.gaps[0].first, before) << "nothing the client had is reported lost";
  EXPECT_GT(pty.gaps[0].second, 1u << 20) << "the flood outran what the spawner keeps";
  // What follows the gap is the flood's newest bytes, whole lines from some point on.
  std::string tail = pty.bytes.substr(pty.bytes.size() - 200);
  EXPECT_TRUE(absl::StrContains(tail, "0123456789abcdef")) << tail;
  // Input still reaches it.
  auto input = s.process.writeInputRequest();
  std::string line = "hello\n";
  input.setData(kj::arrayPtr(reinterpret_cast<const capnp::byte*>(line.data()), line.size()));
  Await(input.send(), "input");
  ASSERT_TRUE(RunUntil([&] { return absl::StrContains(pty.bytes, "got:hello"); }, 60))
      << pty.bytes.substr(pty.bytes.size() > 300 ? pty.bytes.size() - 300 : 0);
  EXPECT_EQ(ExitCode(s), 0);
  unlink(go.c_str());
  unlink(written.c_str());
}

TEST_F(ReattachTest, ASandboxThatSquatsAndFloodsTheReattachSocketHarmsOnlyItself) {
  CopyExecutable(Runfile("testing/attach_intruder"), svc_->base() + "/ws-io/attach_intruder");
  std::string hostile = Create();
  std::string neighbour = Create();
  // The spawner holds its socket's name from the sandbox's start: nobody takes it.
  std::string squat = StartProcess(hostile, "/workspace/attach_intruder squat",
                                   api::OutputMode::LOSSLESS);
  StreamView squatted;
  {
    Session s = Follow(*svc_, hostile, squat, api::Stream::STDOUT, squatted);
    ASSERT_TRUE(RunUntil([&] { return squatted.ended; }, 60)) << squatted.bytes;
  }
  EXPECT_EQ(squatted.bytes, "squat: Address already in use\n");
  // A flood of fake reattaches, running through the restart.
  std::string flood = StartProcess(hostile, "/workspace/attach_intruder flood",
                                   api::OutputMode::DROP_OLDEST);
  std::string go = svc_->base() + "/ws-io/go-neighbour";
  std::string mine = StartProcess(
      neighbour,
      "echo before; while [ ! -e /workspace/go-neighbour ]; do sleep 0.05; done; echo after; exit 4",
      api::OutputMode::LOSSLESS);
  StreamView out;
  {
    Session s = Follow(*svc_, neighbour, mine, api::Stream::STDOUT, out);
    ASSERT_TRUE(RunUntil([&] { return out.bytes == "before\n"; }, 60)) << out.bytes;
    StreamView flooding;
    Session f = Follow(*svc_, hostile, flood, api::Stream::STDOUT, flooding);
    ASSERT_TRUE(RunUntil([&] { return flooding.bytes == "flooding\n"; }, 60)) << flooding.bytes;
    sleep(1);
  }
  RestartSupervisor([&] { WriteText(go, ""); });
  EXPECT_EQ(SandboxState(neighbour), "running") << "the neighbour's spawner was reattached";
  Session s = Follow(*svc_, neighbour, mine, api::Stream::STDOUT, out);
  ASSERT_TRUE(RunUntil([&] { return out.ended; }, 60)) << out.bytes;
  EXPECT_EQ(ExitCode(s), 4);
  EXPECT_EQ(out.bytes, "before\nafter\n");
  // Whatever became of the hostile sandbox's own processes, the service still serves it and
  // everyone else: a new process runs in each.
  for (const std::string& sb : {hostile, neighbour}) {
    auto echo = svc_->Cli({0, 0, {0}}, {"exec", sb, "--", "echo", "still-served"});
    EXPECT_EQ(echo.exit_code, 0) << sb << ": " << echo.err;
    EXPECT_EQ(echo.out, "still-served\n") << sb;
  }
  unlink(go.c_str());
}

}  // namespace
}  // namespace paseo::testing
