// The CLI's commands (Execute) against a fake service on a real Unix socket: what each asks
// the service, what it prints and its exit code, refusals included. The command lines come
// from ParseCommandLine, as in main(). Runs as any user.
#include "client/commands.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <set>
#include <string>
#include <thread>
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
  EXPECT_EQ(p.output, api::OutputMode::LOSSLESS) << "run follows its output: lossless";
  EXPECT_EQ(p.key, "");
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
  EXPECT_EQ(r.err,
            "paseo-sandbox: run: you may use 2 deployments; choose one with --deployment or "
            "$PASEO_SANDBOX_DEPLOYMENT\n");
  EXPECT_TRUE(service_.sandboxes.empty());
  EXPECT_EQ(Cli({"run", "--deployment", "beta", "--", "true"}).exit_code, 0);
  EXPECT_EQ(service_.sandboxes.begin()->second.deployment, "beta");
}

// Paseo's Docker image sets the deployment once for every client in the container; a
// --deployment on the command line still wins.
TEST_F(CommandsTest, TheDeploymentComesFromTheEnvironmentUnlessNamed) {
  service_.deployments = {"alpha", "beta"};
  setenv("PASEO_SANDBOX_DEPLOYMENT", "beta", 1);
  EXPECT_EQ(Cli({"run", "--keep", "--", "true"}).exit_code, 0);
  EXPECT_EQ(Cli({"run", "--keep", "--deployment", "alpha", "--", "true"}).exit_code, 0);
  setenv("PASEO_SANDBOX_DEPLOYMENT", "", 1);  // empty: as if unset
  EXPECT_EQ(Cli({"run", "--", "true"}).exit_code, kServiceError);
  unsetenv("PASEO_SANDBOX_DEPLOYMENT");
  std::multiset<std::string> used;
  for (const auto& [id, sb] : service_.sandboxes) used.insert(sb.deployment);
  EXPECT_EQ(used, (std::multiset<std::string>{"alpha", "beta"}));
}

TEST_F(CommandsTest, ARefusalIs125WithTheReasonFirst) {
  service_.refuse_create = absl::PermissionDeniedError("uid 1000 may not use deployment beta");
  Outcome r = Cli({"run", "--deployment", "beta", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_EQ(r.err, "paseo-sandbox: permission-denied: uid 1000 may not use deployment beta\n");
}

// run starts its process pipelined on the create and attaches pipelined on the start: a refusal
// of either still reaches the user in its own words, and a sandbox that was made is deleted.
TEST_F(CommandsTest, RunReportsARefusedStartAndStillDeletesTheSandbox) {
  service_.refuse_start = absl::InvalidArgumentError("cwd /nowhere is not in a workspace");
  Outcome r = Cli({"run", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_EQ(r.err, "paseo-sandbox: invalid-argument: cwd /nowhere is not in a workspace\n");
  ASSERT_EQ(service_.sandboxes.size(), 1u);
  const FakeSandbox& sb = service_.sandboxes.begin()->second;
  EXPECT_TRUE(sb.processes.empty());
  EXPECT_TRUE(sb.deleted) << "the sandbox run made is deleted whatever became of its process";
}

TEST_F(CommandsTest, ARefusedCreateLeavesNothingToDelete) {
  service_.refuse_create = absl::ResourceExhaustedError("deployment alpha has 1 sandboxes");
  Outcome r = Cli({"run", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_EQ(r.err, "paseo-sandbox: unavailable: deployment alpha has 1 sandboxes\n")
      << "the create's own error, said once, not the pipelined start's copy of it";
  EXPECT_TRUE(service_.sandboxes.empty());
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

TEST_F(CommandsTest, ExecCarriesTheKeyAndTheOutputMode) {
  service_.AddSandbox("sb-k");
  EXPECT_EQ(Cli({"exec", "--key", "job-1", "--output", "drop-oldest", "sb-k", "--", "true"})
                .exit_code,
            0);
  const FakeProcess& p = service_.sandboxes.at("sb-k").processes.begin()->second;
  EXPECT_EQ(p.key, "job-1");
  EXPECT_EQ(p.output, api::OutputMode::DROP_OLDEST);
}

TEST_F(CommandsTest, ReleaseReleasesTheProcess) {
  service_.AddSandbox("sb-1");
  service_.AddProcess("sb-1", "p-1", {});
  EXPECT_EQ(Cli({"release", "sb-1", "p-1"}).exit_code, 0);
  EXPECT_TRUE(service_.sandboxes.at("sb-1").processes.at("p-1").released);
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

std::string ReadFile(const std::string& path) {
  std::string out;
  if (FILE* f = fopen(path.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
    fclose(f);
  }
  return out;
}

// Regression: `logs --stream stderr 2>file` wrote the CLI's own messages (a gap notice, an
// error) into the file among the stream's bytes, so a reader resuming "from the bytes I have"
// resumed from corrupted data. Now stderr carries only the stream; the words go to --messages
// and the exit status tells.
TEST_F(CommandsTest, LogsOfStderrPutsOnlyTheStreamsBytesThere) {
  service_.AddSandbox("sb-1");
  FakeProcessScript script;
  script.lost_bytes = 3;
  script.stderr_data = "abcdef";
  service_.AddProcess("sb-1", "p-1", script);
  Outcome r = Cli({"logs", "--stream", "stderr", "sb-1", "p-1"});
  EXPECT_EQ(r.exit_code, kOutputIncomplete) << "bytes were no longer kept";
  EXPECT_EQ(r.err, "abcdef");
  r = Cli({"logs", "--stream", "stderr", "sb-1", "p-9"});
  EXPECT_EQ(r.exit_code, kServiceError);
  EXPECT_EQ(r.err, "") << "a refusal stays out of the stream's place too";

  std::string messages = dir_.path() + "/messages";
  r = Cli({"logs", "--messages", messages, "--stream", "stderr", "sb-1", "p-1"});
  EXPECT_EQ(r.err, "abcdef");
  EXPECT_EQ(ReadFile(messages), "paseo-sandbox: 3 bytes of output were no longer kept\n");
  // stdout's stream leaves stderr to the messages.
  r = Cli({"logs", "sb-1", "p-1"});
  EXPECT_EQ(r.exit_code, kOutputIncomplete);
  EXPECT_EQ(r.err, "paseo-sandbox: 3 bytes of output were no longer kept\n");
  EXPECT_EQ(Cli({"logs", "--from", "3", "--stream", "stderr", "sb-1", "p-1"}).exit_code, 0);
}

TEST_F(CommandsTest, LogsAppendsToAnOutputFile) {
  service_.AddSandbox("sb-1");
  FakeProcessScript script;
  script.stderr_data = "0123456789";
  service_.AddProcess("sb-1", "p-1", script);
  std::string file = dir_.path() + "/stderr.log";
  FILE* f = fopen(file.c_str(), "w");
  ASSERT_NE(f, nullptr);
  fputs("0123", f);  // what an earlier logs -o kept
  fclose(f);
  Outcome r = Cli({"logs", "--stream", "stderr", "-o", file, "--from", "4", "sb-1", "p-1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(ReadFile(file), "0123456789");
  // The file carries the stream; stderr the messages.
  r = Cli({"logs", "-o", file, "sb-1", "p-9"});
  EXPECT_EQ(r.err, "paseo-sandbox: not-found: no process p-9\n");
  EXPECT_EQ(ReadFile(file), "0123456789");
}

// Regression: when the broker restarted, `logs -f` ended with "paseo-sandbox: PromiseFulfiller
// was destroyed without fulfilling the promise." among the stream's bytes. It now reconnects
// by itself and resumes at the next byte: each byte arrives once, and nothing else.
TEST_F(CommandsTest, LogsFollowReconnectsAndResumesAtTheNextByte) {
  service_.AddSandbox("sb-1");
  FakeProcessScript script;
  script.stderr_data = "0123456789abcdefghij";
  script.disconnect_at = 10;
  script.disconnect_stream = api::Stream::STDERR;
  service_.AddProcess("sb-1", "p-1", script);
  service_.crash = [this] { server_.DropConnections(); };
  Outcome r = Cli({"logs", "-f", "--stream", "stderr", "sb-1", "p-1"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.err, script.stderr_data);
  // Resumed where the bytes that arrived end: in-flight writes die with the connection, so
  // that is at most where the fake crashed.
  const auto& subscriptions = service_.sandboxes.at("sb-1").processes.at("p-1").subscriptions;
  ASSERT_EQ(subscriptions.size(), 2u);
  EXPECT_EQ(subscriptions[0], std::make_pair(api::Stream::STDERR, uint64_t{0}));
  EXPECT_EQ(subscriptions[1].first, api::Stream::STDERR);
  EXPECT_LE(subscriptions[1].second, 10u);

  // Where a person reads them, the messages say what happened.
  script.stdout_data = "0123456789";
  script.disconnect_at = 6;
  script.disconnect_stream = api::Stream::STDOUT;
  service_.AddProcess("sb-1", "p-2", script);
  r = Cli({"logs", "-f", "sb-1", "p-2"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.out, script.stdout_data);
  std::string at = std::to_string(service_.sandboxes.at("sb-1").processes.at("p-2").subscriptions.at(1).second);
  EXPECT_EQ(r.err,
            "paseo-sandbox: the connection to the service was lost at stdout offset " + at +
                "; reconnecting\n"
                "paseo-sandbox: reconnected; resuming at stdout offset " + at + "\n");
}

TEST_F(CommandsTest, LogsThatCannotReconnectSayWhereToResume) {
  service_.AddSandbox("sb-1");
  FakeProcessScript script;
  script.stderr_data = "0123456789";
  script.disconnect_at = 8;
  script.disconnect_stream = api::Stream::STDERR;
  service_.AddProcess("sb-1", "p-1", script);
  service_.crash = [this] {
    server_.DropConnections();
    server_.StopListening();
  };
  std::string messages = dir_.path() + "/messages";
  Outcome r = Cli({"logs", "-f", "--reconnect-for", "1", "--messages", messages, "--stream",
                   "stderr", "sb-1", "p-1"});
  EXPECT_EQ(r.exit_code, kConnectionLost);
  // What arrived before the crash (in-flight writes die with the connection), exactly.
  ASSERT_LE(r.err.size(), 8u);
  EXPECT_EQ(r.err, script.stderr_data.substr(0, r.err.size()));
  std::string at = std::to_string(r.err.size());
  EXPECT_EQ(ReadFile(messages),
            "paseo-sandbox: the connection to the service was lost at stderr offset " + at +
                "; reconnecting\n"
                "paseo-sandbox: the connection to the service was lost at stderr offset " + at +
                " and not regained in 1 s; resume with: paseo-sandbox --socket " + socket_ +
                " logs --stream stderr --from " + at + " -f sb-1 p-1\n");
}

// Regression: `run` exited 0 (the command's code) when deleting its sandbox failed.
TEST_F(CommandsTest, RunTellsAFailedCleanUpApart) {
  service_.script.exit = ProcessExit::Exited(3);
  service_.undeletable = {"sb-1"};
  Outcome r = Cli({"run", "--", "true"});
  EXPECT_EQ(r.exit_code, kCleanupFailed);
  EXPECT_EQ(r.err,
            "paseo-sandbox: the command ended with exit status 3, but sandbox sb-1 could not be "
            "deleted (failed-precondition: sandbox sb-1 has running processes); delete it with: "
            "paseo-sandbox rm sb-1\n");
}

// Regression: a lost connection was reported as "PromiseFulfiller was destroyed without
// fulfilling the promise.", and written among the process's stderr.
TEST_F(CommandsTest, ALostConnectionIsReportedInWordsAndNotAmongTheStream) {
  service_.AddSandbox("sb-k");
  service_.script.stdout_data = "0123456789";
  service_.script.disconnect_at = 4;
  service_.crash = [this] { server_.DropConnections(); };
  Outcome r = Cli({"exec", "sb-k", "--", "cat"});
  EXPECT_EQ(r.exit_code, kServiceError);
  ASSERT_LE(r.out.size(), 4u);
  EXPECT_EQ(r.out, service_.script.stdout_data.substr(0, r.out.size()));
  EXPECT_EQ(r.err, "paseo-sandbox: the connection to the service was lost at stdout offset " +
                       std::to_string(r.out.size()) +
                       " and stderr offset 0; process p-1 in sandbox sb-k may still be running "
                       "(paseo-sandbox attach sb-k p-1 follows it)\n");

  // The process's stderr reached our stderr: the words go only to --messages.
  service_.script.stdout_data = "";
  service_.script.stderr_data = "warn";
  service_.script.disconnect_at = 4;
  service_.script.disconnect_stream = api::Stream::STDERR;
  std::string messages = dir_.path() + "/messages";
  r = Cli({"exec", "sb-k", "--", "cat"});
  EXPECT_EQ(r.exit_code, kServiceError);
  EXPECT_EQ(r.err, "warn");
  r = Cli({"--messages", messages, "exec", "sb-k", "--", "cat"});
  EXPECT_EQ(r.exit_code, kServiceError);
  EXPECT_EQ(r.err, "warn");
  EXPECT_THAT(ReadFile(messages),
              HasSubstr("the connection to the service was lost at stdout offset 0 and stderr "
                        "offset 4; process p-3 in sandbox sb-k"));
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
            "SANDBOX                      DEPLOYMENT       STATE      PROCESSES NETWORK         KEY\n"
            "sb-1                         alpha            running    1         none\n"
            "  p-1                        exited 0     sleep 60\n");
  std::string json =
      "[{\"id\":\"sb-1\",\"deployment\":\"alpha\",\"profile\":\"default\",\"state\":\"running\","
      "\"createdAtUnixMs\":0,\"ownerUid\":1000,"
      "\"network\":{\"mode\":\"none\",\"address\":\"\",\"inboundPorts\":[]},\"processes\":[{\"id\":\"p-1\",\"argv\":[\"sleep\","
      "\"60\"],\"status\":\"exited 0\",\"stdoutBytes\":5,\"stderrBytes\":0}]}]\n";
  EXPECT_EQ(Cli({"--json", "ps"}).out, json);
  EXPECT_EQ(Cli({"ps", "--json"}).out, json);
}

// stats takes two samples one interval apart (CPU is their difference) and, on a pipe, prints
// one and exits; the fake's sandboxes use half a core between samples.
TEST_F(CommandsTest, StatsPrintsOneSampleOfEachSandboxAsATableOrJson) {
  service_.AddSandbox("sb-1").deployment = "alpha";
  service_.AddSandbox("sb-2").deployment = "alpha";
  Outcome r = Cli({"stats", "--interval", "0.1"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(service_.stats_calls, 2u);
  EXPECT_THAT(r.out, HasSubstr("SANDBOX"));
  EXPECT_THAT(r.out, HasSubstr("0.50"));
  EXPECT_THAT(r.out, HasSubstr("100MiB / 1GiB"));
  EXPECT_THAT(r.out, HasSubstr("sb-2"));
  Outcome one = Cli({"stats", "--json", "--no-stream", "--interval=0.1", "sb-2"});
  EXPECT_EQ(one.exit_code, 0) << one.err;
  EXPECT_THAT(one.out, HasSubstr("{\"sandboxes\":[{\"id\":\"sb-2\",\"deployment\":\"alpha\","));
  EXPECT_THAT(one.out, HasSubstr("\"cpuCores\":0.500,"));
  EXPECT_EQ(one.out.find("sb-1"), std::string::npos) << one.out;
  // An id the service does not show is refused as the service refused it.
  Outcome missing = Cli({"stats", "--interval", "0.1", "sb-none"});
  EXPECT_EQ(missing.exit_code, kServiceError);
  EXPECT_THAT(missing.err, HasSubstr("not-found"));
  for (const char* bad : {"0", "0.01", "-1", "x", "7200"}) {
    ParsedCommandLine p = ParseCommandLine({"stats", "--interval", bad}, socket_);
    EXPECT_FALSE(p.command_line.has_value()) << bad;
  }
}

TEST_F(CommandsTest, PsShowsEachSandboxsAddressOrNone) {
  service_.AddSandbox("sb-1").deployment = "alpha";
  FakeSandbox& net = service_.AddSandbox("sb-2");
  net.deployment = "alpha";
  net.network_address = "10.88.0.6";
  Outcome r = Cli({"ps"});
  EXPECT_THAT(r.out, HasSubstr("sb-1                         alpha            running    0         none\n"));
  EXPECT_THAT(r.out, HasSubstr("sb-2                         alpha            running    0         10.88.0.6\n"));
  EXPECT_THAT(Cli({"ps", "--json"}).out,
              HasSubstr("\"network\":{\"mode\":\"sandbox\",\"address\":\"10.88.0.6\""));
}

TEST_F(CommandsTest, CreateWithAKeyIsIdempotentAndFindPrintsTheId) {
  Outcome made = Cli({"create", "--key", "ws-1", "--workspace", "/srv/proj:rw"});
  EXPECT_EQ(made.exit_code, 0) << made.err;
  ASSERT_EQ(service_.sandboxes.size(), 1u);
  const FakeSandbox& sb = service_.sandboxes.begin()->second;
  EXPECT_EQ(made.out, sb.id + "\n");
  EXPECT_THAT(made.err, IsEmpty());
  EXPECT_EQ(sb.key, "ws-1");
  EXPECT_EQ(sb.deployment, "alpha") << "the only deployment";
  EXPECT_FALSE(sb.deleted) << "create keeps the sandbox";
  ASSERT_EQ(sb.workspaces.size(), 1u);
  EXPECT_EQ(std::get<0>(sb.workspaces[0]), "/srv/proj");

  Outcome again = Cli({"create", "--key", "ws-1"});
  EXPECT_EQ(again.exit_code, 0);
  EXPECT_EQ(again.out, sb.id + "\n");
  EXPECT_EQ(again.err, "paseo-sandbox: sandbox " + sb.id + " had key ws-1 already; nothing was "
                       "created\n");
  EXPECT_EQ(service_.sandboxes.size(), 1u);

  EXPECT_EQ(Cli({"find", "ws-1"}).out, sb.id + "\n");
  EXPECT_EQ(Cli({"find", "--deployment", "alpha", "ws-1"}).out, sb.id + "\n");
  Outcome missing = Cli({"find", "ws-2"});
  EXPECT_EQ(missing.exit_code, 125);
  EXPECT_EQ(missing.err, "paseo-sandbox: not-found: no sandbox with key ws-2\n");
  EXPECT_THAT(missing.out, IsEmpty());
  EXPECT_THAT(Cli({"ps"}).out, HasSubstr("running    0         none            ws-1\n"));
  EXPECT_THAT(Cli({"ps", "--json"}).out, HasSubstr("\"state\":\"running\",\"key\":\"ws-1\""));

  service_.deployments = {"alpha", "beta"};
  Outcome ambiguous = Cli({"find", "ws-1"});
  EXPECT_EQ(ambiguous.exit_code, 125);
  EXPECT_THAT(ambiguous.err, HasSubstr("find: you may use 2 deployments"));
}

TEST_F(CommandsTest, PauseAndResumeEachSandbox) {
  service_.AddSandbox("sb-1").deployment = "alpha";
  service_.AddSandbox("sb-2");
  Outcome paused = Cli({"pause", "sb-1", "sb-9", "sb-2"});
  EXPECT_EQ(paused.exit_code, 125);
  EXPECT_EQ(paused.err, "paseo-sandbox: sb-9: not-found: no sandbox sb-9\n");
  EXPECT_TRUE(service_.sandboxes.at("sb-1").paused);
  EXPECT_TRUE(service_.sandboxes.at("sb-2").paused);
  EXPECT_THAT(Cli({"ps"}).out,
              HasSubstr("sb-1                         alpha            paused     0         none\n"));
  Outcome resumed = Cli({"resume", "sb-1"});
  EXPECT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_FALSE(service_.sandboxes.at("sb-1").paused);
  EXPECT_TRUE(service_.sandboxes.at("sb-2").paused);
}

// A server inside the sandbox that reads its input to the end, then answers and closes.
void AnswerAtEnd(int raw, std::string* received) {
  kj::AutoCloseFd fd(raw);
  char buf[256];
  ssize_t n;
  while ((n = read(fd.get(), buf, sizeof(buf))) > 0) received->append(buf, n);
  std::string reply = "got " + std::to_string(received->size()) + " bytes\n";
  ASSERT_EQ(write(fd.get(), reply.data(), reply.size()), static_cast<ssize_t>(reply.size()));
}

std::string WriteFile(const std::string& dir, const std::string& bytes) {
  std::string path = dir + "/stdin";
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  close(fd);
  return path;
}

TEST_F(CommandsTest, ConnectRelaysStdinAndStdoutUntilBothClose) {
  service_.AddSandbox("sb-1");
  std::string received;
  std::thread server;
  service_.serve_port = [&](kj::AutoCloseFd fd) {
    server = std::thread(AnswerAtEnd, fd.release(), &received);
  };
  std::string input(200000, 'x');  // more than a socket buffer holds
  Outcome r = Cli({"connect", "sb-1", "8080"}, WriteFile(dir_.path(), input));
  server.join();
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "got 200000 bytes\n");
  EXPECT_THAT(r.err, IsEmpty());
  EXPECT_EQ(received, input);
  EXPECT_THAT(service_.sandboxes.at("sb-1").connects, ElementsAre(8080));
}

TEST_F(CommandsTest, ConnectRefusalsExitOneWithTheReason) {
  service_.AddSandbox("sb-1");
  Outcome unlisted = Cli({"connect", "sb-1", "22"});
  EXPECT_EQ(unlisted.exit_code, 1);
  EXPECT_EQ(unlisted.err,
            "paseo-sandbox: permission-denied: port 22 is not in the profile's "
            "network.inboundPorts\n");
  Outcome nothing = Cli({"connect", "sb-1", "8080"});  // no serve_port: nothing listens
  EXPECT_EQ(nothing.exit_code, 1);
  EXPECT_EQ(nothing.err, "paseo-sandbox: unavailable: nothing listening on port 8080\n");
  service_.sandboxes.at("sb-1").paused = true;
  EXPECT_THAT(Cli({"connect", "sb-1", "8080"}).err, HasSubstr("failed-precondition: "));
  Outcome unknown = Cli({"connect", "sb-9", "8080"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.err, HasSubstr("not-found: "));
  EXPECT_THAT(unknown.out, IsEmpty());
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
