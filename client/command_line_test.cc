// The CLI grammar without a service: every form testing/ and installer/quickstart use, `--`
// and ARGV words that look like options, per-command --help, refusals and their exit code.
#include "client/command_line.h"

#include <unistd.h>

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace paseo::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr char kDefaultSocket[] = "/default.sock";

ParsedCommandLine Parse(const std::vector<std::string>& args) {
  return ParseCommandLine(args, kDefaultSocket);
}

// The command of a command line that must parse.
template <typename T>
T Command(const std::vector<std::string>& args) {
  ParsedCommandLine p = Parse(args);
  EXPECT_TRUE(p.command_line.has_value()) << p.err;
  EXPECT_EQ(p.err, "");
  if (!p.command_line) return T{};
  const T* command = std::get_if<T>(&p.command_line->command);
  EXPECT_NE(command, nullptr);
  return command != nullptr ? *command : T{};
}

// A command line that must be refused as a usage error; returns its message.
std::string Refused(const std::vector<std::string>& args) {
  ParsedCommandLine p = Parse(args);
  EXPECT_FALSE(p.command_line.has_value());
  EXPECT_EQ(p.exit_code, kUsageError);
  EXPECT_EQ(p.out, "");
  EXPECT_THAT(p.err, StartsWith("paseo-sandbox"));
  return p.err;
}

std::string Cwd() {
  char buf[4096];
  return getcwd(buf, sizeof(buf)) != nullptr ? buf : "";
}

TEST(CommandLineTest, DoubleDashPassesArgvWordsThatLookLikeOptions) {
  auto run = Command<RunCommand>({"run", "--", "sh", "-c", "echo -n hi"});
  EXPECT_THAT(run.argv, ElementsAre("sh", "-c", "echo -n hi"));
  run = Command<RunCommand>({"run", "--", "ls", "-la", "--", "--help", "-h"});
  EXPECT_THAT(run.argv, ElementsAre("ls", "-la", "--", "--help", "-h"));
}

TEST(CommandLineTest, ArgvStartsAtTheFirstWordThatIsNotAnOption) {
  auto run = Command<RunCommand>({"run", "--keep", "--env", "A=B", "echo", "-n", "--keep", "x"});
  EXPECT_TRUE(run.keep);
  EXPECT_THAT(run.process.env, ElementsAre("A=B"));
  EXPECT_THAT(run.argv, ElementsAre("echo", "-n", "--keep", "x"));
  // exec: the first operand is the sandbox, the second starts ARGV.
  auto exec = Command<ExecCommand>({"exec", "sb-1", "ls", "-l"});
  EXPECT_EQ(exec.sandbox, "sb-1");
  EXPECT_THAT(exec.argv, ElementsAre("ls", "-l"));
}

TEST(CommandLineTest, RunOptionsAsTheSuitesWriteThem) {
  auto run = Command<RunCommand>({"run", "--deployment", "io", "--keep", "--workspace",
                                  "/srv/ws-io:/workspace:ro", "--credential", "tokens", "--", "sh",
                                  "-c", "cat /workspace/x"});
  EXPECT_EQ(run.deployment, "io");
  EXPECT_TRUE(run.keep);
  EXPECT_THAT(run.workspaces,
              ElementsAre(WorkspaceSpec{"/srv/ws-io", "/workspace", api::AccessMode::READ_ONLY}));
  EXPECT_THAT(run.credentials, ElementsAre("tokens"));
  EXPECT_THAT(run.argv, ElementsAre("sh", "-c", "cat /workspace/x"));
  EXPECT_FALSE(run.process.tty);

  run = Command<RunCommand>({"run", "-t", "--keep", "--", "sh"});
  EXPECT_TRUE(run.process.tty);
  EXPECT_TRUE(run.process.interactive) << "-t implies -i";
  run = Command<RunCommand>({"run", "-i", "--", "cat"});
  EXPECT_FALSE(run.process.tty);
  EXPECT_TRUE(run.process.interactive);
  run = Command<RunCommand>({"run", "-it", "--cwd=/tmp", "--env=K=V=W", "--profile", "p", "true"});
  EXPECT_TRUE(run.process.tty);
  EXPECT_EQ(run.process.cwd, "/tmp");
  EXPECT_THAT(run.process.env, ElementsAre("K=V=W"));
  EXPECT_EQ(run.profile, "p");
  EXPECT_THAT(run.argv, ElementsAre("true"));
}

// installer/quickstart's demo and the commands it suggests.
TEST(CommandLineTest, QuickstartForms) {
  ParsedCommandLine p = Parse({"--socket", "/run/q/supervisor.sock", "run", "--workspace",
                               "/home/u/ws:/workspace:rw", "--", "sh", "-c", "\n  echo x\n"});
  ASSERT_TRUE(p.command_line) << p.err;
  EXPECT_EQ(p.command_line->socket, "/run/q/supervisor.sock");
  auto& run = std::get<RunCommand>(p.command_line->command);
  EXPECT_THAT(run.workspaces, ElementsAre(WorkspaceSpec{"/home/u/ws", "/workspace",
                                                        api::AccessMode::READ_WRITE}));
  EXPECT_THAT(run.argv, ElementsAre("sh", "-c", "\n  echo x\n"));
  EXPECT_TRUE(Command<RunCommand>({"--socket", "/s", "run", "--keep", "--", "sleep", "60"}).keep);
  EXPECT_THAT(Command<RmCommand>({"--socket", "/s", "rm", "sb-1"}).ids, ElementsAre("sb-1"));
  Command<InfoCommand>({"--socket", "/s", "info"});
}

TEST(CommandLineTest, ExecWithOptionsOnEitherSideOfTheSandbox) {
  auto exec = Command<ExecCommand>({"exec", "sb-1", "--", "sh", "-c", "echo in-kept; exit 3"});
  EXPECT_EQ(exec.sandbox, "sb-1");
  EXPECT_THAT(exec.argv, ElementsAre("sh", "-c", "echo in-kept; exit 3"));
  exec = Command<ExecCommand>({"exec", "-t", "sb-1", "--env", "A=1", "--", "top"});
  EXPECT_TRUE(exec.process.tty);
  EXPECT_THAT(exec.process.env, ElementsAre("A=1"));
  EXPECT_THAT(exec.argv, ElementsAre("top"));
  exec = Command<ExecCommand>({"exec", "sb-1", "-i", "--", "cat"});
  EXPECT_TRUE(exec.process.interactive);
  EXPECT_THAT(Refused({"exec", "sb-1"}), HasSubstr("missing argument -- <argv>"));
  EXPECT_THAT(Refused({"exec", "--", "sb-1"}), HasSubstr("missing argument"));
}

TEST(CommandLineTest, GlobalOptionsBeforeOrAfterTheCommand) {
  ParsedCommandLine p = Parse({"--socket", "/s.sock", "--json", "ps"});
  ASSERT_TRUE(p.command_line) << p.err;
  EXPECT_EQ(p.command_line->socket, "/s.sock");
  EXPECT_TRUE(p.command_line->json);
  EXPECT_TRUE(std::holds_alternative<PsCommand>(p.command_line->command));

  p = Parse({"ps", "--json", "--socket=/t.sock"});
  ASSERT_TRUE(p.command_line) << p.err;
  EXPECT_EQ(p.command_line->socket, "/t.sock");
  EXPECT_TRUE(p.command_line->json);

  p = Parse({"info"});
  ASSERT_TRUE(p.command_line) << p.err;
  EXPECT_EQ(p.command_line->socket, kDefaultSocket);
  EXPECT_FALSE(p.command_line->json);

  p = Parse({"--socket", "/s.sock", "run", "--socket", "/u.sock", "--", "true"});
  ASSERT_TRUE(p.command_line) << p.err;
  EXPECT_EQ(p.command_line->socket, "/u.sock") << "the later one wins";
}

TEST(CommandLineTest, PerProcessCommands) {
  auto attach = Command<AttachCommand>({"attach", "sb-1", "p-2"});
  EXPECT_EQ(attach.target.sandbox, "sb-1");
  EXPECT_EQ(attach.target.process, "p-2");
  EXPECT_FALSE(attach.from.has_value());
  attach = Command<AttachCommand>({"attach", "--from", "0", "sb-1", "p-2"});
  EXPECT_EQ(attach.from, 0u);

  auto logs = Command<LogsCommand>({"logs", "--from", "7", "-f", "sb-1", "p-2"});
  EXPECT_EQ(logs.from, 7u);
  EXPECT_TRUE(logs.follow);
  EXPECT_EQ(logs.stream, api::Stream::STDOUT);
  logs = Command<LogsCommand>({"logs", "sb-1", "p-2", "--stream", "pty", "--follow"});
  EXPECT_EQ(logs.stream, api::Stream::PTY);
  EXPECT_TRUE(logs.follow);
  EXPECT_EQ(Command<LogsCommand>({"logs", "--stream=stderr", "a", "b"}).stream,
            api::Stream::STDERR);

  auto wait = Command<WaitCommand>({"wait", "sb-1", "p-2"});
  EXPECT_EQ(wait.target.process, "p-2");

  EXPECT_EQ(Command<KillCommand>({"kill", "sb-1", "p-2"}).signal, 15);
  EXPECT_EQ(Command<KillCommand>({"kill", "--signal", "INT", "sb-1", "p-2"}).signal, 2);
  EXPECT_EQ(Command<KillCommand>({"kill", "-s", "SIGKILL", "sb-1", "p-2"}).signal, 9);
  EXPECT_EQ(Command<KillCommand>({"kill", "-s9", "sb-1", "p-2"}).signal, 9);
  EXPECT_EQ(Command<KillCommand>({"kill", "--signal=64", "sb-1", "p-2"}).signal, 64);

  auto release = Command<ReleaseCommand>({"release", "sb-1", "p-2"});
  EXPECT_EQ(release.target.sandbox, "sb-1");
  EXPECT_EQ(release.target.process, "p-2");
  EXPECT_THAT(Refused({"release", "sb-1"}), HasSubstr("missing argument"));
}

TEST(CommandLineTest, KeyAndOutputMode) {
  auto exec = Command<ExecCommand>({"exec", "--key", "agent-7", "--output", "drop-oldest", "sb-1",
                                    "--", "cat"});
  EXPECT_EQ(exec.process.key, "agent-7");
  EXPECT_EQ(exec.process.output, api::OutputMode::DROP_OLDEST);
  auto run = Command<RunCommand>({"run", "--output=lossless", "-t", "sh"});
  EXPECT_EQ(DefaultOutputMode(run.process), api::OutputMode::LOSSLESS) << "given wins";
  // Without --output: lossless for a followed pipe process, drop-oldest for a terminal one
  // (which can be detached and must not stop when nobody reads).
  EXPECT_EQ(DefaultOutputMode(Command<ExecCommand>({"exec", "sb-1", "cat"}).process),
            api::OutputMode::LOSSLESS);
  EXPECT_EQ(DefaultOutputMode(Command<ExecCommand>({"exec", "-t", "sb-1", "sh"}).process),
            api::OutputMode::DROP_OLDEST);
  EXPECT_THAT(Refused({"exec", "--output", "fast", "sb-1", "cat"}),
              HasSubstr("lossless or drop-oldest expected"));
}

TEST(CommandLineTest, Rm) {
  auto rm = Command<RmCommand>({"rm", "sb-1", "sb-2"});
  EXPECT_THAT(rm.ids, ElementsAre("sb-1", "sb-2"));
  EXPECT_TRUE(rm.force);
  EXPECT_FALSE(Command<RmCommand>({"rm", "--no-force", "sb-1"}).force);
  EXPECT_THAT(Refused({"rm"}), HasSubstr("missing argument <sandbox>"));
}

TEST(CommandLineTest, CreateFindPauseResume) {
  auto create = Command<CreateCommand>(
      {"create", "--key", "ws-1", "--deployment", "alpha", "--workspace", "/srv/p:rw",
       "--profile", "big", "--credential", "claude"});
  EXPECT_EQ(create.key, "ws-1");
  EXPECT_EQ(create.deployment, "alpha");
  EXPECT_EQ(create.profile, "big");
  ASSERT_EQ(create.workspaces.size(), 1u);
  EXPECT_EQ(create.workspaces[0].path, "/srv/p");
  EXPECT_EQ(create.workspaces[0].mode, api::AccessMode::READ_WRITE);
  EXPECT_THAT(create.credentials, ElementsAre("claude"));
  EXPECT_EQ(Command<CreateCommand>({"create"}).key, "");
  EXPECT_THAT(Refused({"create", "true"}), HasSubstr("too many arguments"));
  EXPECT_THAT(Refused({"create", "--keep"}), HasSubstr("--keep: unrecognized option"));

  auto find = Command<FindCommand>({"find", "--deployment", "alpha", "ws-1"});
  EXPECT_EQ(find.deployment, "alpha");
  EXPECT_EQ(find.key, "ws-1");
  EXPECT_EQ(Command<FindCommand>({"find", "--", "-odd-key"}).key, "-odd-key");
  EXPECT_THAT(Refused({"find"}), HasSubstr("missing argument <key>"));

  EXPECT_THAT(Command<PauseCommand>({"pause", "sb-1", "sb-2"}).ids, ElementsAre("sb-1", "sb-2"));
  EXPECT_THAT(Command<ResumeCommand>({"resume", "sb-1"}).ids, ElementsAre("sb-1"));
  EXPECT_THAT(Refused({"pause"}), HasSubstr("missing argument <sandbox>"));
  EXPECT_THAT(Refused({"resume"}), HasSubstr("missing argument <sandbox>"));
}

TEST(CommandLineTest, WorkspaceSyntax) {
  EXPECT_EQ(ParseWorkspace("/a"), (WorkspaceSpec{"/a", "", api::AccessMode::READ_ONLY}));
  EXPECT_EQ(ParseWorkspace("/a:rw"), (WorkspaceSpec{"/a", "", api::AccessMode::READ_WRITE}));
  EXPECT_EQ(ParseWorkspace("/a:ro"), (WorkspaceSpec{"/a", "", api::AccessMode::READ_ONLY}));
  EXPECT_EQ(ParseWorkspace("/a:/w"), (WorkspaceSpec{"/a", "/w", api::AccessMode::READ_ONLY}));
  EXPECT_EQ(ParseWorkspace("/a:/w:rw"), (WorkspaceSpec{"/a", "/w", api::AccessMode::READ_WRITE}));
  EXPECT_EQ(ParseWorkspace("/a/../b:/w"),
            (WorkspaceSpec{"/a/../b", "/w", api::AccessMode::READ_ONLY}))
      << "the service, not the CLI, decides what a path means";
  // Relative paths are made absolute against the current directory, lexically.
  EXPECT_EQ(ParseWorkspace(".")->path, Cwd());
  EXPECT_EQ(ParseWorkspace("./proj:/workspace:rw")->path, Cwd() + "/proj");
  EXPECT_EQ(ParseWorkspace("proj/sub")->path, Cwd() + "/proj/sub");
  for (const char* bad : {"", ":/w", "/a:/w:rw:x", "/a:/w:/v", "/a:rw:/w", "/a:b", "/a:b:rw"}) {
    EXPECT_FALSE(ParseWorkspace(bad).has_value()) << bad;
  }
  EXPECT_THAT(Refused({"run", "--workspace", "/a:/w:/v", "--", "true"}),
              HasSubstr("<path>[:<dest>][:ro|:rw] expected"));
  // Regression: "/data/a:b" was read as PATH /data/a with DEST "b"; now it is refused and
  // points at --mount.
  EXPECT_THAT(Refused({"run", "--workspace", "/data/a:b", "--", "true"}),
              HasSubstr("needs --mount"));
}

// Regression: "/srv/ws/" was sent as typed (the privhelper trimmed one slash) while "/srv//ws"
// was refused. The CLI now sends one spelling, and the API refuses every other.
TEST(CommandLineTest, WorkspacePathsAreNormalizedAsTyped) {
  EXPECT_EQ(NormalizePath("/srv/ws/", "/x"), "/srv/ws");
  EXPECT_EQ(NormalizePath("/srv//ws//", "/x"), "/srv/ws");
  EXPECT_EQ(NormalizePath("/srv/./ws/.", "/x"), "/srv/ws");
  EXPECT_EQ(NormalizePath("/", "/x"), "/");
  EXPECT_EQ(NormalizePath("//", "/x"), "/");
  EXPECT_EQ(NormalizePath(".", "/home/u"), "/home/u");
  EXPECT_EQ(NormalizePath("./", "/home/u"), "/home/u");
  EXPECT_EQ(NormalizePath("./proj/", "/home/u"), "/home/u/proj");
  EXPECT_EQ(NormalizePath("proj", "/"), "/proj");
  // Leading ".." of a relative path steps up from the (physical) current directory...
  EXPECT_EQ(NormalizePath("..", "/home/u"), "/home");
  EXPECT_EQ(NormalizePath("./../b//c/", "/home/u"), "/home/b/c");
  EXPECT_EQ(NormalizePath("../../..", "/home/u"), "/");
  // ... any other ".." depends on symlinks: it is left for the service to refuse.
  EXPECT_EQ(NormalizePath("a/../b", "/home/u"), "/home/u/a/../b");
  EXPECT_EQ(NormalizePath("/a/../b/", "/home/u"), "/a/../b");
  EXPECT_EQ(NormalizePath("x:y/", "/home/u"), "/home/u/x:y");
  EXPECT_EQ(ParseWorkspace("/srv/ws/:/w/:rw"),
            (WorkspaceSpec{"/srv/ws", "/w", api::AccessMode::READ_WRITE}));
  EXPECT_EQ(ParseWorkspace("./")->path, Cwd());
  EXPECT_EQ(ParseWorkspace("proj/")->path, Cwd() + "/proj");
}

TEST(CommandLineTest, MountNamesAnyPath) {
  EXPECT_EQ(ParseMount("src=/data/a:b"), (WorkspaceSpec{"/data/a:b", "", api::AccessMode::READ_ONLY}));
  EXPECT_EQ(ParseMount("src=/data/a:b:rw,dst=/w:x,rw"),
            (WorkspaceSpec{"/data/a:b:rw", "/w:x", api::AccessMode::READ_WRITE}));
  EXPECT_EQ(ParseMount("rw,dst=/w,src=/srv/ws/"),
            (WorkspaceSpec{"/srv/ws", "/w", api::AccessMode::READ_WRITE}))
      << "fields in any order; the path normalized";
  EXPECT_EQ(ParseMount("src=/a\\,b=c\\\\d,ro")->path, "/a,b=c\\d");
  EXPECT_EQ(ParseMount("src=proj")->path, Cwd() + "/proj");
  for (const char* bad : {"", "/a", "src=", "dst=/w", "src=/a,src=/b", "src=/a,rw,ro",
                          "src=/a,dst=w", "src=/a,", "src=/a,mode=rw", "src=/a\\x",
                          "src=/a\\", "src=/a,,rw"}) {
    EXPECT_FALSE(ParseMount(bad).has_value()) << bad;
  }
  auto run = Command<RunCommand>({"run", "--mount", "src=/d/a:b,dst=/workspace,rw", "--workspace",
                                  "/e:/other", "--", "ls"});
  EXPECT_THAT(run.workspaces,
              ElementsAre(WorkspaceSpec{"/d/a:b", "/workspace", api::AccessMode::READ_WRITE},
                          WorkspaceSpec{"/e", "/other", api::AccessMode::READ_ONLY}));
  EXPECT_THAT(Refused({"run", "--mount", "/d/a:b", "--", "true"}),
              HasSubstr("src=<path>[,dst=<dest>][,ro|,rw] expected"));
}

TEST(CommandLineTest, LogsOutputReconnectAndMessages) {
  auto logs = Command<LogsCommand>({"logs", "-o", "out.log", "--reconnect-for", "5", "-f",
                                    "--stream", "stderr", "sb-1", "p-1"});
  EXPECT_EQ(logs.output, "out.log");
  EXPECT_EQ(logs.reconnect_seconds, 5u);
  EXPECT_EQ(logs.stream, api::Stream::STDERR);
  EXPECT_TRUE(logs.follow);
  EXPECT_EQ(Command<LogsCommand>({"logs", "--output=f", "sb-1", "p-1"}).output, "f");
  EXPECT_EQ(Command<LogsCommand>({"logs", "sb-1", "p-1"}).reconnect_seconds,
            kDefaultReconnectSeconds);
  EXPECT_THAT(Refused({"logs", "--reconnect-for=-1", "a", "b"}), HasSubstr("seconds"));
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--messages", "m.txt", "logs", "a", "b"},
           {"logs", "--messages", "m.txt", "a", "b"},
           {"run", "--messages=m.txt", "--", "true"}}) {
    ParsedCommandLine p = Parse(args);
    ASSERT_TRUE(p.command_line.has_value()) << p.err;
    EXPECT_EQ(p.command_line->messages, "m.txt");
  }
  EXPECT_THAT(Parse({"logs", "--help"}).out, HasSubstr("Exit status: 0 when every byte"));
}

TEST(CommandLineTest, Signals) {
  EXPECT_EQ(ParseSignal("TERM"), 15);
  EXPECT_EQ(ParseSignal("SIGHUP"), 1);
  EXPECT_EQ(ParseSignal("WINCH"), 28);
  EXPECT_EQ(ParseSignal("1"), 1);
  for (const char* bad : {"", "0", "65", "9x", "-9", "SIG", "term", "SIGFOO"}) {
    EXPECT_FALSE(ParseSignal(bad).has_value()) << bad;
  }
}

TEST(CommandLineTest, ConnectTakesASandboxAndAPort) {
  auto connect = Command<ConnectCommand>({"connect", "sb-1", "8080"});
  EXPECT_EQ(connect.sandbox, "sb-1");
  EXPECT_EQ(connect.port, 8080);
  EXPECT_EQ(Command<ConnectCommand>({"connect", "sb-1", "65535"}).port, 65535);
  for (const char* bad : {"0", "65536", "80a", "+1", "", "http"})
    EXPECT_THAT(Refused({"connect", "sb-1", bad}), HasSubstr("a port 1-65535 expected")) << bad;
  EXPECT_THAT(Refused({"connect", "sb-1"}), HasSubstr("missing argument <port>"));
  EXPECT_THAT(Refused({"connect", "sb-1", "80", "81"}), HasSubstr("too many arguments"));
}

TEST(CommandLineTest, HelpForEveryCommandGoesToStdoutWithZero) {
  for (const std::string command :
       {"run", "exec", "attach", "logs", "wait", "kill", "ps", "rm", "info", "create", "find",
        "pause", "resume", "connect"}) {
    std::vector<std::vector<std::string>> forms = {
        {command, "--help"}, {command, "-h"}, {"help", command}, {"--json", command, "--help"}};
    // After an operand too, except where that operand starts ARGV.
    if (command != "run") forms.push_back({command, "x", "--help"});
    for (const auto& args : forms) {
      ParsedCommandLine p = Parse(args);
      EXPECT_FALSE(p.command_line.has_value()) << command;
      EXPECT_EQ(p.exit_code, 0) << command;
      EXPECT_EQ(p.err, "") << command;
      EXPECT_THAT(p.out, StartsWith("Usage: paseo-sandbox " + command + " ")) << command;
    }
  }
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"help"}}) {
    ParsedCommandLine p = Parse(args);
    EXPECT_FALSE(p.command_line.has_value());
    EXPECT_EQ(p.exit_code, 0);
    EXPECT_THAT(p.out, StartsWith("Usage: paseo-sandbox [<option>...] <command>"));
    EXPECT_THAT(p.out, HasSubstr("; 125 if the sandbox"));
    for (const char* command :
         {"run", "exec", "attach", "logs", "wait", "kill", "ps", "rm", "info", "create", "find",
          "pause", "resume", "connect"})
      EXPECT_THAT(p.out, HasSubstr(std::string("\n  ") + command + " ")) << command;
  }
  EXPECT_THAT(Parse({"run", "--help"}).out, HasSubstr("--workspace=<path>[:<dest>][:ro|:rw]"));
}

TEST(CommandLineTest, HelpAfterDoubleDashIsArgv) {
  auto run = Command<RunCommand>({"run", "--", "ls", "--help"});
  EXPECT_THAT(run.argv, ElementsAre("ls", "--help"));
  run = Command<RunCommand>({"run", "grep", "-h", "x"});
  EXPECT_THAT(run.argv, ElementsAre("grep", "-h", "x"));
}

TEST(CommandLineTest, Version) {
  ParsedCommandLine p = Parse({"--version"});
  EXPECT_EQ(p.exit_code, 0);
  EXPECT_THAT(p.out, StartsWith("paseo-sandbox "));
}

TEST(CommandLineTest, RefusalsAreUsageErrors) {
  EXPECT_THAT(Refused({}), HasSubstr("missing command"));
  EXPECT_THAT(Refused({"--json"}), HasSubstr("missing command"));
  EXPECT_THAT(Refused({"frob"}), HasSubstr("frob: unknown command"));
  EXPECT_THAT(Refused({"--frob", "ps"}), HasSubstr("--frob: unrecognized option"));
  EXPECT_THAT(Refused({"run", "--bogus", "--", "true"}),
              HasSubstr("paseo-sandbox run: --bogus: unrecognized option"));
  EXPECT_THAT(Refused({"run", "-x", "--", "true"}), HasSubstr("-x: unrecognized option"));
  EXPECT_THAT(Refused({"run"}), HasSubstr("missing argument -- <argv>"));
  EXPECT_THAT(Refused({"run", "--keep", "--"}), HasSubstr("missing argument -- <argv>"));
  EXPECT_THAT(Refused({"run", "--workspace"}), HasSubstr("--workspace: missing argument"));
  EXPECT_THAT(Refused({"run", "--keep=yes", "--", "true"}),
              HasSubstr("--keep: option does not accept an argument"));
  EXPECT_THAT(Refused({"run", "--json", "--", "true"}), HasSubstr("--json: unrecognized option"));
  EXPECT_THAT(Refused({"wait", "sb-1"}), HasSubstr("missing argument <process>"));
  EXPECT_THAT(Refused({"wait", "sb-1", "p-1", "p-2"}), HasSubstr("p-2: too many arguments"));
  EXPECT_THAT(Refused({"ps", "extra"}), HasSubstr("extra: too many arguments"));
  EXPECT_THAT(Refused({"attach", "--from", "x", "a", "b"}), HasSubstr("byte offset"));
  EXPECT_THAT(Refused({"attach", "--from", "1e3", "a", "b"}), HasSubstr("byte offset"));
  EXPECT_THAT(Refused({"logs", "--stream", "tty", "a", "b"}),
              HasSubstr("stdout, stderr or pty expected"));
  EXPECT_THAT(Refused({"kill", "--signal", "0", "a", "b"}), HasSubstr("1-64"));
  EXPECT_THAT(Refused({"kill", "--signal", "FOO", "a", "b"}), HasSubstr("signal name"));
  // Every refusal says where help is.
  EXPECT_THAT(Refused({"run", "--bogus"}), HasSubstr("Try 'paseo-sandbox run --help'"));
}

TEST(CommandLineTest, ParsingTwiceIsIndependent) {
  EXPECT_TRUE(Command<RunCommand>({"run", "--keep", "true"}).keep);
  EXPECT_FALSE(Command<RunCommand>({"run", "true"}).keep);
  EXPECT_THAT(Parse({"run", "true"}).out, IsEmpty());
}

}  // namespace
}  // namespace paseo::client
