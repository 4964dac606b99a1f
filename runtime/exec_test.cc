// exec against the in-process fake of the API: the fd protocol end to end, minus the sandbox.
#include "runtime/exec.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "client/client.h"
#include "client/fake_service.h"
#include "runtime/lifecycle.h"
#include "runtime/strict_json.h"

namespace paseo::runtime {
namespace {

TEST(ReadLine, SplitsAtTheFirstNewlineAndKeepsTheRest) {
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], "one\ntwo\nthr", 11), 11);
  close(p[1]);
  std::string rest;
  EXPECT_EQ(**ReadLine(p[0], rest), "one");
  EXPECT_EQ(rest, "two\nthr");
  EXPECT_EQ(**ReadLine(p[0], rest), "two");
  EXPECT_FALSE(ReadLine(p[0], rest).ok());  // "thr" has no newline
  close(p[0]);
}

TEST(ReadLine, RefusesAnOverlongMessage) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_NONBLOCK), 0);
  std::string rest(kMaxMessageBytes + 10, 'x');
  EXPECT_FALSE(ReadLine(p[0], rest).ok());
  close(p[0]);
  close(p[1]);
}

TEST(WorkloadEnv, IsExactlyTheEnvelopesPlusTermForAPty) {
  SpawnEnvelope e;
  e.env = {{"PATH", "/bin"}, {"A", "b=c"}};
  EXPECT_EQ(WorkloadEnv(e), (std::vector<std::string>{"PATH=/bin", "A=b=c"}));
  e.pty = PtyStdio{24, 80, "xterm-256color"};
  EXPECT_EQ(WorkloadEnv(e),
            (std::vector<std::string>{"PATH=/bin", "A=b=c", "TERM=xterm-256color"}));
  e.env.push_back({"TERM", "dumb"});
  EXPECT_EQ(WorkloadEnv(e).back(), "TERM=dumb");
  EXPECT_EQ(WorkloadEnv(e).size(), 3u);
}

// The five fds of an exec as pipes this test holds the other ends of.
struct Fds {
  Fds() {
    for (int i = 0; i < 5; ++i) {
      int p[2];
      EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
      bool into_exec = i == 0 || i == 3;
      mine[i] = into_exec ? p[1] : p[0];
      theirs[i] = into_exec ? p[0] : p[1];
    }
  }
  ~Fds() {
    for (int fd : mine) if (fd >= 0) close(fd);
    for (int i = 0; i < 5; ++i) if (theirs[i] >= 0 && i != 4) close(theirs[i]);
  }
  ExecFds exec() const { return {theirs[0], theirs[1], theirs[2], theirs[3], theirs[4]}; }
  void Send(int i, const std::string& text) {
    ASSERT_EQ(write(mine[i], text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  void Close(int i) { close(mine[i]); mine[i] = -1; }
  std::string ReadAll(int i) {
    if (theirs[i] >= 0 && i != 4) { close(theirs[i]); theirs[i] = -1; }
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(mine[i], buf, sizeof(buf))) > 0) out.append(buf, n);
    return out;
  }
  int mine[5], theirs[5];
};

constexpr char kInstance[] = "inst";

std::string Envelope(const std::string& stdio, const std::string& extra = "") {
  return std::string(R"({"type":"spawn","protocolVersion":1,"runtimeInstanceId":"inst","argv":["/bin/echo","hi"],"cwd":"packages/app","env":{"PATH":"/bin"},"purpose":{"kind":"agent"},"options":{"socket":"SOCK"},"execId":"exec-1","stdio":)") +
         stdio + "}" + extra + "\n";
}

class ExecTest : public testing::Test {
 protected:
  ExecTest()
      : io_(kj::setupAsyncIo()),
        socket_(dir_.path() + "/s.sock"),
        server_(io_, socket_, service_.NewSupervisor()) {
    auto& sb = service_.AddSandbox("sb-1");
    sb.deployment = "alpha";
    sb.key = "paseo/ws1";
    sb.labels = {{"paseo.runtime-instance", kInstance}};
  }
  ~ExecTest() noexcept override {}

  std::string WithSocket(std::string text) {
    size_t at = text.find("SOCK");
    if (at != std::string::npos) text.replace(at, 4, socket_);
    return text;
  }

  ExecOutcome Run(Fds& fds) { return RunExec(io_, "ws1", "/nonexistent", fds.exec()); }
  client::FakeProcess& OnlyProcess() { return service_.sandboxes.at("sb-1").processes.begin()->second; }

  client::SocketDir dir_;
  kj::AsyncIoContext io_;
  client::FakeService service_;
  std::string socket_;
  client::UnixSocketServer server_;
};

TEST_F(ExecTest, PipesStreamOutputThenEofThenExit) {
  service_.script.stdout_data = "hello out";
  service_.script.stderr_data = "and err";
  service_.script.exit = ProcessExit::Exited(3);
  Fds fds;
  fds.Send(3, WithSocket(Envelope(R"({"kind":"pipes"})")));
  fds.Close(3);
  fds.Close(0);
  ExecOutcome outcome = Run(fds);
  EXPECT_FALSE(outcome.failed);
  EXPECT_EQ(outcome.exit_code, 3);
  EXPECT_EQ(fds.ReadAll(1), "hello out");
  EXPECT_EQ(fds.ReadAll(2), "and err");
  EXPECT_EQ(fds.ReadAll(4), StartedEvent() + EofEvent() + ExitEvent(3, std::nullopt));
  auto& p = OnlyProcess();
  EXPECT_EQ(p.argv, (std::vector<std::string>{"/bin/echo", "hi"}));
  EXPECT_EQ(p.env, std::vector<std::string>{"PATH=/bin"});
  EXPECT_EQ(p.key, "exec-1");
  EXPECT_EQ(p.output, api::OutputMode::LOSSLESS);
  EXPECT_EQ(p.workspace_cwd, "packages/app");
  EXPECT_EQ(p.cwd, "");
  EXPECT_FALSE(p.tty);
}

TEST_F(ExecTest, StdinIsForwardedAndClosedAtEof) {
  service_.script.echo_input = true;
  Fds fds;
  fds.Send(3, WithSocket(Envelope(R"({"kind":"pipes"})")));
  fds.Close(3);
  fds.Send(0, "typed input");
  fds.Close(0);
  ExecOutcome outcome = Run(fds);
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_EQ(fds.ReadAll(1), "typed input");
  EXPECT_TRUE(OnlyProcess().input_closed);
  EXPECT_EQ(fds.ReadAll(4), StartedEvent() + EofEvent() + ExitEvent(0, std::nullopt));
}

TEST_F(ExecTest, ASignalledWorkloadIsMirrored) {
  service_.script.exit = ProcessExit::Signaled(SIGTERM);
  Fds fds;
  fds.Send(3, WithSocket(Envelope(R"({"kind":"pipes"})")));
  fds.Close(3);
  fds.Close(0);
  ExecOutcome outcome = Run(fds);
  EXPECT_EQ(outcome.signal, SIGTERM);
  EXPECT_EQ(fds.ReadAll(4), StartedEvent() + EofEvent() + ExitEvent(std::nullopt, "SIGTERM"));
}

TEST_F(ExecTest, PtyGetsOneStreamTermAndAcksResizesSentBeforeStarted) {
  service_.script.stdout_data = "tty bytes";
  service_.script.tty = true;
  Fds fds;
  fds.Send(3, WithSocket(Envelope(R"({"kind":"pty","rows":24,"cols":80,"term":"xterm"})")) +
                  R"({"type":"resize","protocolVersion":1,"id":1,"rows":40,"cols":120})" "\n");
  fds.Close(0);
  fds.Close(3);
  ExecOutcome outcome = Run(fds);
  EXPECT_FALSE(outcome.failed);
  EXPECT_EQ(fds.ReadAll(1), "tty bytes");
  EXPECT_EQ(fds.ReadAll(2), "");
  auto& p = OnlyProcess();
  EXPECT_TRUE(p.tty);
  EXPECT_EQ(p.rows, 24);
  EXPECT_EQ(p.cols, 80);
  EXPECT_EQ(p.env, (std::vector<std::string>{"PATH=/bin", "TERM=xterm"}));
  EXPECT_EQ(p.resizes, (std::vector<std::pair<uint16_t, uint16_t>>{{40, 120}}));
  EXPECT_EQ(p.subscriptions.size(), 1u);
  EXPECT_EQ(p.subscriptions[0].first, api::Stream::PTY);
  std::string events = fds.ReadAll(4);
  EXPECT_EQ(events.find(StartedEvent() + ResizedEvent(1)), 0u) << events;
}

TEST_F(ExecTest, MalformedEnvelopesStartNothing) {
  for (const std::string& envelope : {
           std::string("not json\n"),
           Envelope(R"({"kind":"pipes"})").substr(0, 40),  // no newline, then EOF
           Envelope(R"({"kind":"pipes","x":1})"),
           Envelope(R"({"kind":"pty","rows":0,"cols":80})"),
           Envelope(R"({"kind":"pty","rows":70000,"cols":80})"),
           Envelope(R"({"kind":"pipes"})", "\n{}"),  // pipes: nothing may follow
       }) {
    Fds fds;
    fds.Send(3, WithSocket(envelope));
    fds.Close(3);
    fds.Close(0);
    ExecOutcome outcome = Run(fds);
    EXPECT_TRUE(outcome.failed) << envelope;
    std::string events = fds.ReadAll(4);
    EXPECT_EQ(events.find(R"({"type":"error","protocolVersion":1,"message":)"), 0u) << events;
  }
  EXPECT_TRUE(service_.sandboxes.at("sb-1").processes.empty());
}

TEST_F(ExecTest, AnotherInstancesWorkspaceIsRefused) {
  service_.sandboxes.at("sb-1").labels = {{"paseo.runtime-instance", "other"}};
  Fds fds;
  fds.Send(3, WithSocket(Envelope(R"({"kind":"pipes"})")));
  fds.Close(3);
  fds.Close(0);
  EXPECT_TRUE(Run(fds).failed);
  EXPECT_NE(fds.ReadAll(4).find("owned by another Paseo instance"), std::string::npos);
  EXPECT_TRUE(service_.sandboxes.at("sb-1").processes.empty());
}

TEST_F(ExecTest, AnInvalidPtyFrameFailsAndKills) {
  service_.script.echo_input = true;  // runs until killed or its input closes
  service_.script.tty = true;
  Fds fds;
  fds.Send(3, WithSocket(Envelope(R"({"kind":"pty","rows":24,"cols":80})")));
  // Sent once it runs: the frame is invalid (rows 0).
  std::string bad = R"({"type":"resize","protocolVersion":1,"id":1,"rows":0,"cols":80})" "\n";
  fds.Send(3, bad);
  ExecOutcome outcome = Run(fds);
  EXPECT_TRUE(outcome.failed);
  std::string events = fds.ReadAll(4);
  EXPECT_NE(events.find(R"("type":"error")"), std::string::npos) << events;
  EXPECT_EQ(OnlyProcess().signals, std::vector<int>{SIGKILL});
  EXPECT_TRUE(OnlyProcess().resizes.empty());
}

// Frames that arrive in separate reads of fd 3, after the workload started (the way Paseo
// sends them): each is read, applied and acknowledged in order, and a forwarded signal that
// the service refuses while the workload is still starting is retried.
TEST_F(ExecTest, PtyFramesArrivingLaterAreEachHandled) {
  service_.script.echo_input = true;  // runs until killed or its input closes
  service_.script.tty = true;
  service_.script.signals_while_starting = 2;
  Fds fds;
  fds.Send(3, WithSocket(Envelope(R"({"kind":"pty","rows":24,"cols":80})")));
  std::thread frames([&fds] {
    for (const char* frame : {
             R"({"type":"resize","protocolVersion":1,"id":1,"rows":40,"cols":120})" "\n",
             R"({"type":"signal","protocolVersion":1,"signal":"SIGINT"})" "\n",
             R"({"type":"resize","protocolVersion":1,"id":2,"rows":50,"cols":130})" "\n",
             R"({"type":"resize","protocolVersion":1,"id":3,"rows":0,"cols":1})" "\n",  // ends it
         }) {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      fds.Send(3, frame);
    }
  });
  ExecOutcome outcome = Run(fds);
  frames.join();
  EXPECT_TRUE(outcome.failed);
  std::string events = fds.ReadAll(4);
  EXPECT_EQ(events.find(StartedEvent() + ResizedEvent(1) + ResizedEvent(2) +
                        R"({"type":"error","protocolVersion":1,"message":"invalid control frame)"),
            0u)
      << events;
  auto& p = OnlyProcess();
  EXPECT_EQ(p.resizes, (std::vector<std::pair<uint16_t, uint16_t>>{{40, 120}, {50, 130}}));
  EXPECT_EQ(p.refused_signals, 2);
  EXPECT_EQ(p.signals, (std::vector<int>{SIGINT, SIGKILL}));
}

TEST_F(ExecTest, ABrokerCrashLosesAndDuplicatesNothing) {
  std::string data;
  for (int i = 0; i < 50; ++i) data += "line " + std::to_string(i) + "\n";
  service_.script.stdout_data = data;
  service_.script.disconnect_at = 37;
  service_.crash = [this] { server_.DropConnections(); };
  Fds fds;
  fds.Send(3, WithSocket(Envelope(R"({"kind":"pipes"})")));
  fds.Close(3);
  fds.Close(0);
  ExecOutcome outcome = Run(fds);
  EXPECT_FALSE(outcome.failed);
  EXPECT_EQ(fds.ReadAll(1), data);
  EXPECT_EQ(fds.ReadAll(4), StartedEvent() + EofEvent() + ExitEvent(0, std::nullopt));
  auto& subs = OnlyProcess().subscriptions;
  // Resubscribed where the bytes already written end, not from 0 (and the output above is
  // whole and once).
  ASSERT_EQ(subs.size(), 4u);
  EXPECT_EQ(subs[2].first, api::Stream::STDOUT);
  EXPECT_GT(subs[2].second, 0u);
}

}  // namespace
}  // namespace paseo::runtime
