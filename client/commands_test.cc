// The CLI's commands (Execute) against a fake service on a real Unix socket: what each asks
// the service, what it prints and its exit code, refusals included. The command lines come
// from ParseCommandLine, as in main(). Runs as any user.
#include "client/commands.h"

#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "client/attach.h"
#include "client/fake_service.h"

namespace paseo::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

struct Outcome {
  int exit_code;
  std::string out, err;
};

class CommandsTest : public ::testing::Test {
 protected:
  // kj destructors may throw (noexcept(false)); a gtest fixture's may not.
  ~CommandsTest() noexcept override {}

  static void SetUpTestSuite() { CaptureAttachSignals(); }  // as main() does

  // Parses `args` as main() does and runs the command with stdin from `stdin_path`, capturing
  // stdout and stderr.
  Outcome Cli(const std::vector<std::string>& args, const std::string& stdin_path = "/dev/null") {
    ParsedCommandLine parsed = ParseCommandLine(args, socket_);
    EXPECT_TRUE(parsed.command_line.has_value()) << parsed.err;
    if (!parsed.command_line) return {parsed.exit_code, parsed.out, parsed.err};
    int saved_stdin = dup(STDIN_FILENO);
    int in = open(stdin_path.c_str(), O_RDONLY | O_CLOEXEC);
    EXPECT_GE(in, 0) << stdin_path;
    dup2(in, STDIN_FILENO);
    close(in);
    testing::internal::CaptureStdout();
    testing::internal::CaptureStderr();
    int rc = Execute(io_, *parsed.command_line);
    fflush(stdout);
    fflush(stderr);
    Outcome outcome{rc, testing::internal::GetCapturedStdout(),
                    testing::internal::GetCapturedStderr()};
    dup2(saved_stdin, STDIN_FILENO);
    close(saved_stdin);
    return outcome;
  }

  kj::AsyncIoContext io_ = kj::setupAsyncIo();
  FakeService service_;
  SocketDir dir_;
  std::string socket_ = dir_.path() + "/s.sock";
  UnixSocketServer server_{io_, socket_, service_.NewSupervisor()};
};

TEST_F(CommandsTest, RunCreatesRunsAndDeletes) {
  service_.script.stdout_data = "out line\n";
  service_.script.stderr_data = "err line\n";
  service_.script.exit = ProcessExit::Exited(3);
  Outcome r = Cli({"run", "--workspace", "/srv/ws:/workspace:rw", "--credential", "tokens", "--env",
                   "A=1", "--cwd", "/workspace", "--", "sh", "-c", "echo -n hi"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "out line\n");
  EXPECT_EQ(r.err, "err line\n");
  ASSERT_EQ(service_.sandboxes.size(), 1u);
  const FakeSandbox& sb = service_.sandboxes.begin()->second;
  EXPECT_EQ(sb.deployment, "alpha") << "the only deployment the caller may use";
  EXPECT_THAT(sb.workspaces,
              ElementsAre(std::make_tuple("/srv/ws", "/workspace", api::AccessMode::READ_WRITE)));
  EXPECT_THAT(sb.credentials, ElementsAre("tokens"));
  ASSERT_EQ(sb.processes.size(), 1u);
  const FakeProcess& p = sb.processes.begin()->second;
  EXPECT_THAT(p.argv, ElementsAre("sh", "-c", "echo -n hi"));
  EXPECT_THAT(p.env, ElementsAre("A=1"));
  EXPECT_EQ(p.cwd, "/workspace");
  EXPECT_FALSE(p.tty);
  EXPECT_TRUE(sb.deleted);
  EXPECT_EQ(sb.delete_force, true);
  EXPECT_TRUE(service_.errors.empty());
}

// Regression: `run -i < file` failed with "epoll_ctl(...): Operation not permitted".
TEST_F(CommandsTest, RunInteractiveWithStdinFromAFile) {
  std::string path = dir_.path() + "/script.sh";
  FILE* f = fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("echo hi\n", f);
  fclose(f);
  service_.script.echo_input = true;
  Outcome r = Cli({"run", "-i", "--", "sh"}, path);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "echo hi\n");
  const FakeProcess& p = service_.sandboxes.begin()->second.processes.begin()->second;
  EXPECT_EQ(p.input, "echo hi\n");
  EXPECT_TRUE(p.input_closed);
}

TEST_F(CommandsTest, RunKeepLeavesTheSandboxAndSaysSo) {
  Outcome r = Cli({"run", "--keep", "--deployment", "alpha", "--", "true"});
  EXPECT_EQ(r.exit_code, 0);
  const FakeSandbox& sb = service_.sandboxes.begin()->second;
  EXPECT_FALSE(sb.deleted);
  EXPECT_EQ(r.err, "paseo-sandbox: kept sandbox " + sb.id + "\n");
}

TEST_F(CommandsTest, RunWithSeveralDeploymentsNeedsOneNamed) {
  service_.deployments = {"alpha", "beta"};
  Outcome r = Cli({"run", "--", "true"});
  EXPECT_EQ(r.exit_code, kServiceError);
  EXPECT_EQ(r.err, "paseo-sandbox: run: you may use 2 deployments; choose one with --deployment\n");
  EXPECT_TRUE(service_.sandboxes.empty());
  EXPECT_EQ(Cli({"run", "--deployment", "beta", "--", "true"}).exit_code, 0);
  EXPECT_EQ(service_.sandboxes.begin()->second.deployment, "beta");
}

TEST_F(CommandsTest, ARefusalIs125WithTheReasonFirst) {
  service_.refuse_create = absl::PermissionDeniedError("uid 1000 may not use deployment beta");
  Outcome r = Cli({"run", "--deployment", "beta", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_EQ(r.err, "paseo-sandbox: permission-denied: uid 1000 may not use deployment beta\n");
}

TEST_F(CommandsTest, NoServiceIs125) {
  Outcome r = Cli({"--socket", dir_.path() + "/none.sock", "info"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_THAT(r.err, HasSubstr("paseo-sandbox: cannot connect to " + dir_.path() + "/none.sock"));
}

TEST_F(CommandsTest, ExecRunsInAKeptSandbox) {
  service_.AddSandbox("sb-k");
  service_.script.stdout_data = "in-kept\n";
  service_.script.exit = ProcessExit::Exited(3);
  Outcome r = Cli({"exec", "sb-k", "--", "sh", "-c", "echo in-kept; exit 3"});
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_EQ(r.out, "in-kept\n");
  const FakeSandbox& sb = service_.sandboxes.at("sb-k");
  ASSERT_EQ(sb.processes.size(), 1u);
  EXPECT_THAT(sb.processes.begin()->second.argv, ElementsAre("sh", "-c", "echo in-kept; exit 3"));
  EXPECT_FALSE(sb.deleted);

  r = Cli({"exec", "sb-gone", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_EQ(r.err, "paseo-sandbox: not-found: no sandbox sb-gone\n");
}

TEST_F(CommandsTest, WaitPrintsHowItEnded) {
  service_.AddSandbox("sb-1");
  FakeProcessScript script;
  script.exit = ProcessExit::Exited(4);
  service_.AddProcess("sb-1", "p-1", script);
  script.exit = ProcessExit::Signaled(9);
  service_.AddProcess("sb-1", "p-2", script);
  script.exit = ProcessExit::OomKilled();
  service_.AddProcess("sb-1", "p-3", script);
  Outcome r = Cli({"wait", "sb-1", "p-1"});
  EXPECT_EQ(r.exit_code, 4);
  EXPECT_EQ(r.out, "exited 4\n");
  r = Cli({"wait", "sb-1", "p-2"});
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_EQ(r.out, "signal 9\n");
  r = Cli({"wait", "sb-1", "p-3"});
  EXPECT_EQ(r.exit_code, 137);
  EXPECT_EQ(r.out, "oom-killed\n");
  r = Cli({"wait", "sb-1", "p-9"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_EQ(r.err, "paseo-sandbox: not-found: no process p-9\n");
}

TEST_F(CommandsTest, KillSendsTheSignal) {
  service_.AddSandbox("sb-1");
  service_.AddProcess("sb-1", "p-1", {});
  EXPECT_EQ(Cli({"kill", "sb-1", "p-1"}).exit_code, 0);
  EXPECT_EQ(Cli({"kill", "--signal", "INT", "sb-1", "p-1"}).exit_code, 0);
  EXPECT_THAT(service_.sandboxes.at("sb-1").processes.at("p-1").signals, ElementsAre(15, 2));
}

TEST_F(CommandsTest, LogsStopsAtWhatExistsUnlessFollowing) {
  service_.AddSandbox("sb-1");
  FakeProcessScript script;
  script.stdout_data = "0123456789";
  script.stderr_data = "err";
  script.stdout_bytes_at_info = 6;  // still writing
  service_.AddProcess("sb-1", "p-1", script);
  Outcome r = Cli({"logs", "--from", "2", "sb-1", "p-1"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "2345");
  EXPECT_EQ(Cli({"logs", "-f", "--from", "2", "sb-1", "p-1"}).out, "23456789");
  EXPECT_EQ(Cli({"logs", "--from", "6", "sb-1", "p-1"}).out, "") << "nothing new";
  r = Cli({"logs", "--stream", "stderr", "sb-1", "p-1"});
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "err");
}

TEST_F(CommandsTest, LogsOfATerminalProcessReadsItsPty) {
  service_.AddSandbox("sb-1");
  FakeProcessScript script;
  script.tty = true;
  script.stdout_data = "prompt$ ";
  service_.AddProcess("sb-1", "p-1", script);
  EXPECT_EQ(Cli({"logs", "sb-1", "p-1"}).out, "prompt$ ");
  auto& subscriptions = service_.sandboxes.at("sb-1").processes.at("p-1").subscriptions;
  ASSERT_EQ(subscriptions.size(), 1u);
  EXPECT_EQ(subscriptions[0].first, api::Stream::PTY);
}

TEST_F(CommandsTest, AttachFollowsFromNowOrFromAnOffset) {
  service_.AddSandbox("sb-1");
  FakeProcessScript script;
  script.stdout_data = "history\n";
  script.exit = ProcessExit::Exited(5);
  service_.AddProcess("sb-1", "p-1", script);
  Outcome r = Cli({"attach", "sb-1", "p-1"});
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(r.out, "") << "only what comes next";
  r = Cli({"attach", "--from", "0", "sb-1", "p-1"});
  EXPECT_EQ(r.out, "history\n");
  const FakeProcess& p = service_.sandboxes.at("sb-1").processes.at("p-1");
  EXPECT_EQ(p.subscriptions[0].second, 8u);
  EXPECT_TRUE(p.input_closed) << "our stdin (/dev/null) ended";
}

TEST_F(CommandsTest, RmDeletesEachAndReportsFailures) {
  service_.AddSandbox("sb-1");
  service_.AddSandbox("sb-2");
  service_.AddSandbox("sb-3");
  service_.undeletable = {"sb-2"};
  Outcome r = Cli({"rm", "sb-1", "sb-2", "sb-9", "sb-3"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_EQ(r.err,
            "paseo-sandbox: sb-2: failed-precondition: sandbox sb-2 has running processes\n"
            "paseo-sandbox: sb-9: not-found: no sandbox sb-9\n");
  EXPECT_TRUE(service_.sandboxes.at("sb-1").deleted);
  EXPECT_TRUE(service_.sandboxes.at("sb-3").deleted);
  EXPECT_EQ(service_.sandboxes.at("sb-1").delete_force, true);
  service_.AddSandbox("sb-4");
  EXPECT_EQ(Cli({"rm", "--no-force", "sb-4"}).exit_code, 0);
  EXPECT_EQ(service_.sandboxes.at("sb-4").delete_force, false);
}

TEST_F(CommandsTest, PsAsATableAndAsJson) {
  FakeSandbox& sb = service_.AddSandbox("sb-1");
  sb.deployment = "alpha";
  sb.profile = "default";
  FakeProcessScript script;
  script.stdout_data = "12345";
  script.exit = ProcessExit::Exited(0);
  service_.AddProcess("sb-1", "p-1", script).argv = {"sleep", "60"};
  Outcome r = Cli({"ps"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out,
            "SANDBOX                      DEPLOYMENT       STATE      PROCESSES\n"
            "sb-1                         alpha            running    1\n"
            "  p-1                        exited 0     sleep 60\n");
  std::string json =
      "[{\"id\":\"sb-1\",\"deployment\":\"alpha\",\"profile\":\"default\",\"state\":\"running\","
      "\"createdAtUnixMs\":0,\"ownerUid\":1000,\"processes\":[{\"id\":\"p-1\",\"argv\":[\"sleep\","
      "\"60\"],\"status\":\"exited 0\",\"stdoutBytes\":5,\"stderrBytes\":0}]}]\n";
  EXPECT_EQ(Cli({"--json", "ps"}).out, json);
  EXPECT_EQ(Cli({"ps", "--json"}).out, json);
}

TEST_F(CommandsTest, Info) {
  service_.deployments = {"alpha", "beta"};
  Outcome r = Cli({"info"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, "version: paseo-sandbox fake\nyour uid: 1000\ndeployments: alpha beta\n");
  EXPECT_THAT(r.err, IsEmpty());
  EXPECT_EQ(Cli({"info", "--json"}).out,
            "{\"version\":\"paseo-sandbox fake\",\"peerUid\":1000,\"deployments\":[\"alpha\","
            "\"beta\"]}\n");
}

}  // namespace
}  // namespace paseo::client
