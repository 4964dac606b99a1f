// Root integration suite for the walking skeleton: real privhelper, broker and runsc, driven
// through the real CLI as unprivileged uids, inside the test's own mount and network
// namespaces (testing/harness.h).
#include <chrono>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <linux/fs.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <thread>
#include <sstream>

#include <kj/async-io.h>
#include <kj/timer.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "client/client.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

class IntegrationTest : public ::testing::Test {
 protected:
  Service& svc = Service::Get();
  Identity Alpha() const { return {4242, 4242, {4242, svc.socket_gid()}}; }
  Identity Beta() const { return {4343, 4343, {4343, svc.socket_gid()}}; }
  // In the socket's group, but allowed by no deployment.
  Identity Stranger() const { return {4999, 4999, {4999, svc.socket_gid()}}; }
  std::string AlphaWs() const { return svc.base() + "/ws-alpha"; }

  CliResult RunInAlpha(const std::vector<std::string>& argv, const std::string& mode = "rw") {
    std::vector<std::string> args = {"run", "--workspace", AlphaWs() + ":/workspace:" + mode, "--"};
    args.insert(args.end(), argv.begin(), argv.end());
    return svc.Cli(Alpha(), args);
  }

  void TearDown() override {
    // Every run deletes its sandbox: nothing may be left behind after any test.
    EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  }
};

TEST_F(IntegrationTest, EchoGivesItsBytesAndExitCodeZero) {
  auto r = RunInAlpha({"echo", "hello from gvisor"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "hello from gvisor\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(IntegrationTest, ExitCodeIsTheCommands) {
  auto r = RunInAlpha({"sh", "-c", "exit 7"});
  EXPECT_EQ(r.exit_code, 7) << r.err;
}

TEST_F(IntegrationTest, StdoutAndStderrStaySeparate) {
  auto r = RunInAlpha({"sh", "-c", "echo out; echo err >&2; echo out2"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "out\nout2\n");
  EXPECT_EQ(r.err, "err\n");
}

// Issue 26: without -i, `run` and `exec` gave the process a stdin pipe nothing wrote to and
// nothing closed, so `cat` (or `codex exec`, which reads stdin when it is not a terminal) never
// ended. Now stdin reads end-of-file at once, as `docker run` without -i. The CLI's own stdin is
// not forwarded either way: the test's is /dev/null or whatever Bazel gave it, and a deadline
// turns a hang into a failure.
TEST_F(IntegrationTest, WithoutDashIStdinIsAtEndOfFileForRunAndExec) {
  using std::chrono::seconds;
  auto cat = svc.Cli(Alpha(), {"run", "--", "cat"}, seconds(60));
  EXPECT_EQ(cat.exit_code, 0) << cat.err;
  EXPECT_EQ(cat.out, "");
  auto read = svc.Cli(Alpha(), {"run", "--", "sh", "-c", "read line; echo read=$?"}, seconds(60));
  EXPECT_EQ(read.exit_code, 0) << read.err;
  EXPECT_EQ(read.out, "read=1\n");

  auto kept = svc.Cli(Alpha(), {"run", "--keep", "--", "true"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  auto pos = kept.err.find("sb-");
  ASSERT_NE(pos, std::string::npos) << kept.err;
  std::string id = kept.err.substr(pos, 27);
  absl::Cleanup rm = [&] { svc.Cli(Alpha(), {"rm", id}); };
  auto exec = svc.Cli(Alpha(), {"exec", id, "--", "sh", "-c", "cat; echo done"}, seconds(60));
  EXPECT_EQ(exec.exit_code, 0) << exec.err;
  EXPECT_EQ(exec.out, "done\n");
}

// Issue 26: a sandbox tells its processes which of their writes outlive it: the read-write
// workspaces (here one, at /workspace), in /.paseo/kept and $PASEO_SANDBOX_KEPT. The file is
// the supervisor's, read-only; a read-only workspace is not kept.
TEST_F(IntegrationTest, TheSandboxSaysWhatIsKeptInAFileAndTheEnvironment) {
  auto rw = RunInAlpha({"sh", "-c", "cat /.paseo/kept; echo \"env=$PASEO_SANDBOX_KEPT\"; "
                                    "echo x > /.paseo/kept 2>/dev/null && echo WROTE; true"});
  EXPECT_EQ(rw.exit_code, 0) << rw.err;
  EXPECT_EQ(rw.out, "/workspace\nenv=/workspace\n");
  auto ro = RunInAlpha({"sh", "-c", "cat /.paseo/kept; echo \"env=${PASEO_SANDBOX_KEPT-unset}\""},
                       "ro");
  EXPECT_EQ(ro.exit_code, 0) << ro.err;
  EXPECT_EQ(ro.out, "env=unset\n");
}

// Issue 26 (seed 000_b7dee6be8c25e2e1): a command can ask to be told, when it ends, what it
// wrote that the sandbox does not keep. The home and /tmp are the sandbox's own; the workspace
// is kept and never listed. The report is on stderr after the command's own output, and the
// command's exit status is still its own.
TEST_F(IntegrationTest, ReportUnkeptListsWritesOutsideTheKeptDirectoriesAtTheEnd) {
  std::string script =
      "echo out; echo err >&2; echo a > /tmp/scratch; mkdir -p \"$HOME/.cache/deep\"; "
      "echo b > \"$HOME/.cache/deep/y\"; echo c > /workspace/kept.txt; exit 3";
  auto r = svc.Cli(Alpha(), {"run", "--workspace", AlphaWs() + ":/workspace:rw",
                             "--report-unkept", "--", "sh", "-c", script});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_EQ(r.out, "out\n");
  EXPECT_TRUE(absl::StartsWith(r.err, "err\npaseo-sandbox: not kept: written outside the kept "
                                      "directories (/workspace); these go with the sandbox:\n"))
      << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "paseo-sandbox:   /tmp/scratch\n")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "paseo-sandbox:   /home/agent/.cache\n")) << r.err;
  EXPECT_FALSE(absl::StrContains(r.err, "/home/agent/.cache/deep")) << "the outermost only";
  EXPECT_FALSE(absl::StrContains(r.err, "kept.txt")) << r.err;
  EXPECT_EQ(ReadFile(AlphaWs() + "/kept.txt"), "c\n");
  unlink((AlphaWs() + "/kept.txt").c_str());
  // Without the flag nothing is added; with it and nothing written, nothing either.
  auto plain = svc.Cli(Alpha(), {"run", "--", "sh", "-c", "echo a > /tmp/scratch"});
  EXPECT_EQ(plain.err, "");
  auto quiet = svc.Cli(Alpha(), {"run", "--report-unkept", "--", "true"});
  EXPECT_EQ(quiet.exit_code, 0);
  EXPECT_EQ(quiet.err, "");
  // A signal still reaches the command through the shim, and its death is the process's.
  auto killed = svc.Cli(Alpha(), {"run", "--report-unkept", "--", "sh", "-c", "kill -TERM $$"});
  EXPECT_EQ(killed.exit_code, 128 + 15) << killed.err;
  // On a terminal the report is on the terminal, after the command's output (review of issue
  // 26: the relay used to take the shim's settings before the inner `shim exec` saw them).
  auto tty = svc.Cli(Alpha(), {"run", "-t", "--report-unkept", "--", "sh", "-c",
                               "echo on-tty; echo a > /tmp/from-tty; exit 4"});
  EXPECT_EQ(tty.exit_code, 4) << tty.err;
  EXPECT_TRUE(absl::StrContains(tty.out, "on-tty\r\npaseo-sandbox: not kept:")) << tty.out;
  EXPECT_TRUE(absl::StrContains(tty.out, "/tmp/from-tty")) << tty.out;
  // The shim's names are the supervisor's: a client may not send them (runsc keeps one entry
  // per name, so the program could not get the client's anyway); the start is refused.
  auto own = svc.Cli(Alpha(), {"run", "--env", "PASEO_SHIM_REPORT_UNKEPT=1", "--", "echo", "ran"});
  EXPECT_EQ(own.exit_code, 125) << own.err;
  EXPECT_EQ(own.out, "") << "the program did not run";
  EXPECT_TRUE(absl::StrContains(own.err, "reserved for the supervisor")) << own.err;
}

TEST_F(IntegrationTest, RunDashTGivesTheCommandATerminal) {
  // Not started from a terminal: the CLI asks for 24x80 and leaves its own stdin alone.
  auto r = svc.Cli(Alpha(), {"run", "-t", "--", "sh", "-c", "tty; stty size; echo x >&2; exit 3"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  // One stream: stderr is the terminal too, and the line discipline adds \r.
  EXPECT_TRUE(absl::StartsWith(r.out, "/dev/pts/")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\r\n24 80\r\nx\r\n")) << r.out;
  EXPECT_EQ(r.err, "");
}

// The CLI as a user runs it: on a terminal (a pty we hold the master of), as `who`.
struct CliOnPty {
  pid_t pid = -1;
  int master = -1;
  std::string seen;
  // Reads the terminal until `needle` shows (at most 30 s).
  bool ReadUntil(const std::string& needle, size_t from = 0) {
    for (int i = 0; i < 600 && seen.find(needle, from) == std::string::npos; ++i) {
      pollfd p = {master, POLLIN, 0};
      if (poll(&p, 1, 50) == 1) {
        char buf[4096];
        ssize_t n = read(master, buf, sizeof(buf));
        if (n > 0) seen.append(buf, static_cast<size_t>(n));
      }
    }
    return seen.find(needle, from) != std::string::npos;
  }
  // Its exit code; -1 if it did not exit by itself within 60 s (then it is killed).
  int Wait() {
    int status = 0;
    if (!WaitPidWithin(pid, 60, &status) || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  }
};

CliOnPty StartCliOnPty(const Service& svc, const Identity& who, uint16_t rows, uint16_t cols,
                       const std::vector<std::string>& args) {
  CliOnPty c;
  c.master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  if (c.master < 0 || grantpt(c.master) != 0 || unlockpt(c.master) != 0) return c;
  std::string slave_name = ptsname(c.master);
  winsize ws = {};
  ws.ws_row = rows;
  ws.ws_col = cols;
  ioctl(c.master, TIOCSWINSZ, &ws);
  std::vector<std::string> argv = {svc.base() + "/bin/paseo-sandbox", "--socket", svc.socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  c.pid = fork();
  if (c.pid == 0) {
    setsid();
    int slave = open(slave_name.c_str(), O_RDWR);  // our controlling terminal from now on
    if (slave < 0 || ioctl(slave, TIOCSCTTY, 0) != 0) _exit(120);
    for (int fd = 0; fd < 3; ++fd) dup2(slave, fd);
    if (setgroups(who.groups.size(), who.groups.data()) != 0 ||
        setresgid(who.gid, who.gid, who.gid) != 0 || setresuid(who.uid, who.uid, who.uid) != 0)
      _exit(121);
    char* envp[] = {nullptr};
    execve(cargv[0], cargv.data(), envp);
    _exit(127);
  }
  return c;
}

// `run -t` on a real terminal makes it raw, gives the sandbox's terminal its size, turns
// SIGWINCH into a resize, types its keys there, and restores it at the end.
TEST_F(IntegrationTest, RunDashTOnARealTerminalFollowsItsSizeAndKeys) {
  CliOnPty cli = StartCliOnPty(svc, Alpha(), 30, 90,
                               {"run", "-t", "--", "sh", "-c",
                                "stty size; read x; echo got-$x; stty size"});
  ASSERT_GE(cli.pid, 0);
  EXPECT_TRUE(cli.ReadUntil("30 90")) << cli.seen;
  termios during = {};
  ASSERT_EQ(tcgetattr(cli.master, &during), 0);
  EXPECT_FALSE(during.c_lflag & (ICANON | ECHO)) << "the CLI did not make its terminal raw";
  winsize ws = {};
  ws.ws_row = 40;
  ws.ws_col = 120;
  ASSERT_EQ(ioctl(cli.master, TIOCSWINSZ, &ws), 0);  // the kernel sends the CLI SIGWINCH
  usleep(1000000);  // let the resize reach the sandbox before the line that reads it
  ASSERT_EQ(write(cli.master, "go\r", 3), 3);
  EXPECT_TRUE(cli.ReadUntil("got-go")) << cli.seen;
  EXPECT_TRUE(cli.ReadUntil("40 120")) << cli.seen;
  EXPECT_EQ(cli.Wait(), 0) << cli.seen;
  termios after = {};
  ASSERT_EQ(tcgetattr(cli.master, &after), 0);
  EXPECT_TRUE(after.c_lflag & ICANON) << "the CLI left its terminal raw";
  close(cli.master);
}

// Ctrl-P Ctrl-Q leaves a kept sandbox's terminal process running; `attach` finds it again.
TEST_F(IntegrationTest, DetachingFromATerminalLeavesItsProcessRunning) {
  CliOnPty cli = StartCliOnPty(svc, Alpha(), 24, 80,
                               {"run", "-t", "--keep", "--", "sh", "-c",
                                "echo ready; read x; echo got-$x"});
  ASSERT_GE(cli.pid, 0);
  ASSERT_TRUE(cli.ReadUntil("ready")) << cli.seen;
  ASSERT_EQ(write(cli.master, "\x10\x11", 2), 2);
  ASSERT_TRUE(cli.ReadUntil("reattach with")) << cli.seen;
  cli.ReadUntil("\n", cli.seen.find("reattach with"));  // the rest of that line
  EXPECT_EQ(cli.Wait(), 0) << cli.seen;
  close(cli.master);
  size_t at = cli.seen.find("paseo-sandbox attach ");
  ASSERT_NE(at, std::string::npos) << cli.seen;
  std::vector<std::string> ids = absl::StrSplit(
      cli.seen.substr(at + 21, cli.seen.find_first_of("\r\n", at) - at - 21), ' ');
  ASSERT_EQ(ids.size(), 2u) << cli.seen;
  auto ps = svc.Cli(Alpha(), {"ps"});
  EXPECT_TRUE(absl::StrContains(ps.out, ids[1] + " running")) << ps.out;
  // Reattached (with pipes as our stdin and stdout), the process still takes input.
  CliOnPty again = StartCliOnPty(svc, Alpha(), 24, 80, {"attach", ids[0], ids[1]});
  usleep(500000);
  ASSERT_EQ(write(again.master, "back\r", 5), 5);
  EXPECT_TRUE(again.ReadUntil("got-back")) << again.seen;
  EXPECT_EQ(again.Wait(), 0) << again.seen;
  close(again.master);
  EXPECT_EQ(svc.Cli(Alpha(), {"rm", ids[0]}).exit_code, 0);
}

TEST_F(IntegrationTest, TheShimSharedByEverySandboxCannotBeChanged) {
  // What sandboxes mount is the privhelper's private copy of the installed file.
  const std::string host_shim = svc.base() + "/run/paseo-sandbox-shim";
  std::string before = ReadFile(host_shim);
  ASSERT_FALSE(before.empty());
  EXPECT_TRUE(before == ReadFile(svc.base() + "/bin/paseo-sandbox-shim"));
  struct stat st = {};
  ASSERT_EQ(stat(host_shim.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0555u);
  // As the sandbox's user, and as root inside the sandbox via its own files: every way of
  // changing the binary or its name fails, and the init it runs cannot be replaced.
  auto r = RunInAlpha({"sh", "-c",
                       "for try in 'echo x > /.paseo/shim' 'echo x >> /.paseo/shim' "
                       "'rm -f /.paseo/shim' 'mv /.paseo/shim /.paseo/x' 'chmod 777 /.paseo/shim' "
                       "'touch /.paseo/new' 'cp /bin/busybox /.paseo/shim' 'truncate -s 0 /.paseo/shim'; do "
                       "  if sh -c \"$try\" 2>/dev/null; then echo \"ALLOWED: $try\"; fi; done; "
                       "ls -l /.paseo/shim"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(absl::StrContains(r.out, "ALLOWED")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "root")) << "the shim is root's inside too: " << r.out;
  EXPECT_EQ(ReadFile(host_shim), before);
}

TEST_F(IntegrationTest, TheSandboxIsGvisorAndSeesItsOwnRootfs) {
  auto r = RunInAlpha({"sh", "-c", "dmesg | head -1; cat /etc/os-release; id -u"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "Starting gVisor")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "paseo-sandbox minimal rootfs")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, ReadFile("/etc/os-release").substr(0, 20))) << r.out;
  EXPECT_TRUE(absl::EndsWith(r.out, "4242\n")) << "runs as the workspace owner: " << r.out;
}

// runsc.platform "auto" with a runsc that has systrap and ptrace (20240729): the privhelper
// measures both at its first start, records the faster in <stateDir>/runsc-probe, and later
// starts trust that record while its key (runsc digest, kernel, CPUs) is this host's; a
// record with another key, or one it cannot parse, is probed and measured again.
TEST(PlatformChoiceTest, AutoMeasuresOnceRecordsAndTrustsOnlyAMatchingRecord) {
  if (RunscPlatform() != "auto") GTEST_SKIP() << "the suite runs on an explicit platform";
  ServiceOptions options;
  options.fresh_runsc_probe = true;
  Service svc(options);
  std::string log = svc.Log();
  std::string record_path = svc.base() + "/state/runsc-probe";
  if (!absl::StrContains(log, "runsc.platform auto: measured")) {
    // A runsc with ptrace only (bookworm's 20221219) has nothing to measure.
    EXPECT_TRUE(absl::StrContains(log, "runsc platform: ptrace (runsc.platform auto; the pinned "
                                       "runsc has ptrace, kvm)")) << log;
    EXPECT_NE(access(record_path.c_str(), F_OK), 0) << "nothing was measured";
    GTEST_SKIP() << "the pinned runsc has no systrap";
  }
  std::string record = ReadFile(record_path);
  ASSERT_TRUE(absl::StrContains(record, "median_ms systrap ")) << record;
  ASSERT_TRUE(absl::StrContains(record, "median_ms ptrace ")) << record;
  std::string chosen = absl::StrContains(record, "platform ptrace\n") ? "ptrace" : "systrap";
  std::string other = chosen == "ptrace" ? "systrap" : "ptrace";
  EXPECT_TRUE(absl::StrContains(log, "runsc platform: " + chosen + " (runsc.platform auto: measured "
                                     "faster on this host")) << log;

  // The same key, the other platform: trusted as recorded, with no new measurement.
  std::string swapped = record;
  swapped.replace(swapped.find("platform " + chosen), 9 + chosen.size(), "platform " + other);
  WriteText(record_path, swapped);
  svc.Stop();
  svc.Restart();
  log = svc.Log();
  EXPECT_TRUE(absl::StrContains(log.substr(log.rfind("runsc platform: ")),
                                "runsc platform: " + other + " (runsc.platform auto: measured")) << log;
  EXPECT_EQ(ReadFile(record_path), swapped) << "a matching record is not measured again";
  auto r = svc.Cli({4242, 4242, {4242, svc.socket_gid()}}, {"run", "--", "echo", "on-" + other});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "on-" + other + "\n");

  // Another host's key (or garbage): measured again, and the record rewritten with this key.
  for (const std::string& stale : {"key runsc=0,kernel=1.0,cpus=64,cpu=other\n"
                                   "platform " + other + "\nmedian_ms " + other + " 1\n",
                                   std::string("platform ptrace; rm -rf /\n")}) {
    WriteText(record_path, stale);
    svc.Stop();
    svc.Restart();
    std::string again = ReadFile(record_path);
    EXPECT_NE(again, stale);
    EXPECT_EQ(again.substr(0, again.find('\n')), record.substr(0, record.find('\n')))
        << "the key is this host's";
  }
  svc.Stop();
  EXPECT_EQ(svc.Leaks(), std::vector<std::string>{});
}

// The privhelper logs what it chose among what the pinned runsc has (for "auto": measured on
// this host between systrap and ptrace where it has both; never kvm), and the sandbox's sentry
// runs on exactly that platform.
TEST_F(IntegrationTest, TheSandboxRunsOnThePlatformThePrivhelperChose) {
  std::string log = svc.Log();
  auto at = log.find("runsc platform: ");
  ASSERT_NE(at, std::string::npos) << log;
  std::string platform = log.substr(at + 16, log.find(' ', at + 16) - (at + 16));
  EXPECT_TRUE(platform == "systrap" || platform == "ptrace") << "auto chose " << platform;
  auto r = svc.Cli(Alpha(), {"run", "--keep", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto pos = r.err.find("sb-");
  ASSERT_NE(pos, std::string::npos) << r.err;
  std::string id = r.err.substr(pos, 27);
  absl::Cleanup rm = [&] { svc.Cli(Alpha(), {"rm", id}); };
  pid_t sentry = svc.SandboxProcess("runsc-sandbox", id);
  ASSERT_GT(sentry, 0);
  // Regression (runsc 20240729, whose -directfs defaults to true): the sentry runs with
  // directfs off wherever runsc has the flag, so the gofer stays between it and the host's files.
  bool has_directfs = Capture(RunscPath() + " flags 2>&1 | grep -c '^  -directfs$' || true") != "0";
  EXPECT_EQ(absl::StrContains(Cmdline(sentry), "--directfs=false"), has_directfs) << Cmdline(sentry);
  EXPECT_EQ(absl::StrContains(svc.Log(), "runsc directfs: off"), has_directfs) << svc.Log();
  // runsc passes --platform on to the sentry only when it is not runsc's own default, so the
  // platform is told by what it does: on ptrace the sentry's threads trace its stub processes,
  // on systrap nothing is traced.
  std::set<std::string> sentry_threads;
  for (const std::string& t : ListDir("/proc/" + std::to_string(sentry) + "/task")) sentry_threads.insert(t);
  int traced_by_sentry = 0;
  for (const std::string& p : ListDir("/proc")) {
    if (p.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string status = ReadFile("/proc/" + p + "/status");
    auto tp = status.find("TracerPid:\t");
    if (tp == std::string::npos) continue;
    std::string tracer = status.substr(tp + 11, status.find('\n', tp) - (tp + 11));
    if (sentry_threads.count(tracer) > 0) ++traced_by_sentry;
  }
  if (platform == "ptrace") {
    EXPECT_GT(traced_by_sentry, 0) << "ptrace: the sentry traces its stubs";
  } else {
    EXPECT_EQ(traced_by_sentry, 0) << platform << ": nothing is traced";
  }
}

TEST_F(IntegrationTest, FilesWrittenInARwWorkspaceBelongToTheRunAsUser) {
  auto r = RunInAlpha({"sh", "-c", "echo data > /workspace/made-inside && echo ok"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st;
  ASSERT_EQ(stat((AlphaWs() + "/made-inside").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4242u);
  EXPECT_EQ(st.st_gid, 4242u);
  EXPECT_EQ(ReadFile(AlphaWs() + "/made-inside"), "data\n");
  unlink((AlphaWs() + "/made-inside").c_str());
}

// Paseo's official Docker image runs as 1000:1000 and names workspaces by its own container
// paths; the deployment maps /workspace to a host root. Files the agent creates belong to
// 1000:1000 on the host.
TEST_F(IntegrationTest, DockerDeploymentMapsContainerPathsAndOwnership) {
  Identity docker{1000, 1000, {1000, svc.socket_gid()}};
  auto r = svc.Cli(docker, {"run", "--workspace", "/workspace/proj:/workspace:rw", "--", "sh",
                            "-c", "echo hi > /workspace/from-docker; id -u; id -g"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "1000\n1000\n");
  struct stat st;
  std::string made = svc.base() + "/ws-docker/proj/from-docker";
  ASSERT_EQ(stat(made.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  EXPECT_EQ(st.st_gid, 1000u);
  unlink(made.c_str());
  // The host path is not a name the Docker client can use.
  auto host = svc.Cli(docker, {"run", "--workspace", svc.base() + "/ws-docker/proj", "--", "true"});
  EXPECT_EQ(host.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(host.err, "not beneath any workspace root")) << host.err;
}

TEST_F(IntegrationTest, ReadOnlyWorkspaceRefusesWritesButCanBeRead) {
  std::ofstream(AlphaWs() + "/readme") << "visible";
  auto r = RunInAlpha({"sh", "-c", "cat /workspace/readme; echo x > /workspace/nope"}, "ro");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "visible");
  EXPECT_TRUE(absl::StrContains(r.err, "Read-only file system")) << r.err;
  struct stat st;
  EXPECT_NE(stat((AlphaWs() + "/nope").c_str(), &st), 0);
  unlink((AlphaWs() + "/readme").c_str());
}

TEST_F(IntegrationTest, RootfsIsReadOnlyAndTmpIsScratch) {
  // As a non-root agent, permissions alone would stop a write to /etc; the mount table shows
  // that the root itself is mounted read-only, and /tmp is the only scratch.
  auto r = RunInAlpha({"sh", "-c",
                       "awk '$2==\"/\"{print $4}' /proc/mounts | cut -d, -f1; "
                       "echo t > /tmp/t && cat /tmp/t"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "ro\nt\n");
}

TEST_F(IntegrationTest, AUidNoDeploymentAllowsIsRefused) {
  auto r = svc.Cli(Stranger(), {"run", "--deployment", "alpha", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r.err, "permission-denied")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "4999")) << r.err;
  auto info = svc.Cli(Stranger(), {"ps"});
  EXPECT_EQ(info.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(info.err, "permission-denied")) << info.err;
}

TEST_F(IntegrationTest, AUidOutsideTheSocketGroupCannotConnect) {
  auto r = svc.Cli(Identity{4999, 4999, {4999}}, {"info"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r.err, "Permission denied")) << r.err;
}

TEST_F(IntegrationTest, AnotherDeploymentsWorkspaceIsRefused) {
  auto r = svc.Cli(Alpha(), {"run", "--deployment", "beta", "--workspace",
                             svc.base() + "/ws-beta", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r.err, "permission-denied")) << r.err;
  // Naming B's workspace while using A's deployment is refused by the path check.
  auto r2 = svc.Cli(Alpha(), {"run", "--workspace", svc.base() + "/ws-beta", "--", "true"});
  EXPECT_EQ(r2.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r2.err, "not beneath any workspace root")) << r2.err;
}

TEST_F(IntegrationTest, WorkspaceOutsideTheRootIsRefused) {
  auto r = svc.Cli(Alpha(), {"run", "--workspace", "/etc", "--", "cat", "/workspace/shadow"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r.err, "not beneath any workspace root")) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(IntegrationTest, DotDotIsRefused) {
  auto r = svc.Cli(Alpha(), {"run", "--workspace", AlphaWs() + "/../outside", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r.err, "invalid-argument")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, "..")) << r.err;
}

TEST_F(IntegrationTest, SymlinkWorkspaceIsRefused) {
  std::string link = AlphaWs() + "/escape";
  ASSERT_EQ(symlink((svc.base() + "/outside").c_str(), link.c_str()), 0);
  std::string inner = AlphaWs() + "/inner-link";
  ASSERT_EQ(symlink(".", inner.c_str()), 0);
  auto r = svc.Cli(Alpha(), {"run", "--workspace", link, "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r.err, "symlink")) << r.err;
  auto r2 = svc.Cli(Alpha(), {"run", "--workspace", inner, "--", "true"});
  EXPECT_EQ(r2.exit_code, 125) << "even a symlink that stays inside is refused";
  EXPECT_TRUE(absl::StrContains(r2.err, "symlink")) << r2.err;
  unlink(link.c_str());
  unlink(inner.c_str());
}

TEST_F(IntegrationTest, SubdirectoryWorkspaceShowsOnlyThatSubdirectory) {
  std::string sub = AlphaWs() + "/project";
  ASSERT_EQ(mkdir(sub.c_str(), 0755), 0);
  ASSERT_EQ(chown(sub.c_str(), 4242, 4242), 0);
  std::ofstream(AlphaWs() + "/sibling") << "x";
  auto r = svc.Cli(Alpha(), {"run", "--workspace", sub + ":/workspace:rw", "--", "ls", "-a",
                             "/workspace"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, ".\n..\n");
  unlink((AlphaWs() + "/sibling").c_str());
  rmdir(sub.c_str());
}

TEST_F(IntegrationTest, BrokerRunsAsTheUnprivilegedUserWithNoCapabilities) {
  pid_t broker = svc.broker_pid();
  ASSERT_GT(broker, 0) << "no broker child of the privhelper";
  std::string broker_pid = std::to_string(broker);
  std::string status = ReadFile("/proc/" + broker_pid + "/status");
  std::string uid = std::to_string(svc.broker_uid());
  EXPECT_TRUE(absl::StrContains(status, "Uid:\t" + uid + "\t" + uid + "\t" + uid + "\t" + uid))
      << status;
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_TRUE(absl::StrContains(status, std::string(set) + ":\t0000000000000000")) << status;
  }
  EXPECT_TRUE(absl::StrContains(status, "NoNewPrivs:\t1")) << status;
  // Its own empty network namespace: neither ours nor the runsc control namespace.
  char mine[64] = {}, theirs[64] = {}, helper[64] = {};
  readlink("/proc/self/ns/net", mine, sizeof(mine) - 1);
  readlink(("/proc/" + broker_pid + "/ns/net").c_str(), theirs, sizeof(theirs) - 1);
  readlink(("/proc/" + std::to_string(svc.privhelper_pid()) + "/ns/net").c_str(), helper,
           sizeof(helper) - 1);
  EXPECT_STRNE(mine, theirs);
  EXPECT_STRNE(helper, theirs);
  // Exactly stdin/stdout/stderr, the helper socketpair, the listening socket, the operator
  // socket and kj's own epoll/signalfd/eventfd: nothing inherited from the privhelper.
  int fds = 0;
  DIR* fdd = opendir(("/proc/" + broker_pid + "/fd").c_str());
  while (dirent* e = readdir(fdd)) fds += e->d_name[0] != '.';
  closedir(fdd);
  EXPECT_LE(fds, 9);
}

TEST_F(IntegrationTest, RunscControlSocketsAreNotInTheCallersNetns) {
  auto r = svc.Cli(Alpha(), {"run", "--keep", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto pos = r.err.find("sb-");
  ASSERT_NE(pos, std::string::npos) << r.err;
  std::string id = r.err.substr(pos, 27);
  // The sandbox is alive, yet no runsc abstract socket exists in this (the caller's) netns.
  EXPECT_FALSE(absl::StrContains(ReadFile("/proc/net/unix"), "runsc"));
  auto ps = svc.Cli(Alpha(), {"--json", "ps"});
  EXPECT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_TRUE(absl::StrContains(ps.out, id)) << ps.out;
  auto other = svc.Cli(Beta(), {"ps"});
  EXPECT_FALSE(absl::StrContains(other.out, id)) << "beta must not see alpha's sandboxes";
  auto stranger_rm = svc.Cli(Beta(), {"rm", id});
  EXPECT_NE(stranger_rm.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(stranger_rm.err, "not-found")) << stranger_rm.err;
  auto rm = svc.Cli(Alpha(), {"rm", id});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  // Shown `deleting` until its background teardown ends, then gone.
  auto after = svc.Cli(Alpha(), {"--json", "ps"});
  for (int i = 0; i < 150 && absl::StrContains(after.out, id); ++i) {
    EXPECT_TRUE(absl::StrContains(after.out, "\"state\":\"deleting\"")) << after.out;
    usleep(100000);
    after = svc.Cli(Alpha(), {"--json", "ps"});
  }
  EXPECT_FALSE(absl::StrContains(after.out, id)) << after.out;
}

// The helper runs runsc in its own control netns. From the caller's netns (here, as a
// non-root uid), no runsc abstract socket can be reached, though it exists in the control
// netns; paseo-sandbox itself still lists, execs in and deletes the sandbox.
TEST_F(IntegrationTest, RunscControlSocketsAreUnreachableFromOutsideTheControlNetns) {
  auto kept = svc.Cli(Alpha(), {"run", "--keep", "--", "true"});
  ASSERT_EQ(kept.exit_code, 0) << kept.err;
  auto pos = kept.err.find("sb-");
  ASSERT_NE(pos, std::string::npos);
  std::string id = kept.err.substr(pos, 27);

  // runsc 20221219 serves a sandbox's control RPC on an abstract socket in the netns where
  // `runsc create` ran; runsc 20240729 on a pathname socket, <runsc root>/runsc-<id>.sock
  // (docs/decisions.md, "runsc quirks on 20240729"). Either way uid 4242 must not reach it.
  std::vector<std::string> names;  // abstract names in the control netns
  std::istringstream control(
      ReadFile("/proc/" + std::to_string(svc.privhelper_pid()) + "/net/unix"));
  for (std::string line; std::getline(control, line);) {
    auto at = line.find(" @");
    if (at != std::string::npos) names.push_back(line.substr(at + 2));
  }
  bool abstract = false;
  for (const auto& n : names) abstract |= absl::StrContains(n, "runsc-sandbox." + id);
  std::string path_socket = svc.runsc_root() + "/runsc-" + id + ".sock";
  struct stat st;
  bool pathname = lstat(path_socket.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
  EXPECT_TRUE(abstract || pathname) << "runsc's control socket found neither in the control "
                                       "netns nor at " << path_socket;
  EXPECT_FALSE(absl::StrContains(ReadFile("/proc/net/unix"), "@runsc"));
  if (pathname) {
    // Its directory is root's 0700: nobody else can even look up the name.
    ASSERT_EQ(stat(svc.runsc_root().c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 0u);
    EXPECT_EQ(st.st_mode & 0077, 0u) << "runsc root is open to others";
  }

  // As uid 4242, try every abstract name (and the well-known ones) from this netns, and the
  // pathname socket.
  names.push_back("runsc-sandbox." + id);
  pid_t child = fork();
  if (child == 0) {
    if (setresgid(4242, 4242, 4242) != 0 || setresuid(4242, 4242, 4242) != 0) _exit(100);
    int reached = 0;
    for (const auto& n : names) {
      for (bool with_nul : {false, true}) {
        sockaddr_un addr = {};
        addr.sun_family = AF_UNIX;
        std::string name = n.substr(0, sizeof(addr.sun_path) - 2);
        std::memcpy(addr.sun_path + 1, name.data(), name.size());
        socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 +
                                               name.size() + (with_nul ? 1 : 0));
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (connect(fd, reinterpret_cast<sockaddr*>(&addr), len) == 0) ++reached;
        close(fd);
      }
    }
    if (path_socket.size() < sizeof(sockaddr_un{}.sun_path)) {
      sockaddr_un addr = {};
      addr.sun_family = AF_UNIX;
      std::memcpy(addr.sun_path, path_socket.data(), path_socket.size());
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) ++reached;
      close(fd);
    }
    _exit(reached);
  }
  int status = 0;
  EXPECT_TRUE(WaitPidWithin(child, 30, &status)) << "connecting to runsc's sockets hung";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "runsc control sockets reachable from outside";

  auto exec = svc.Cli(Alpha(), {"exec", id, "--", "sh", "-c", "echo in-kept; exit 3"});
  EXPECT_EQ(exec.exit_code, 3) << exec.err;
  EXPECT_EQ(exec.out, "in-kept\n");
  auto rm = svc.Cli(Alpha(), {"rm", id});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
}

std::vector<std::string> FdTable(pid_t pid) {
  std::vector<std::string> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[4096] = {};
    readlink((dir + "/" + e->d_name).c_str(), target, sizeof(target) - 1);
    out.push_back(std::string(e->d_name) + " -> " + target);
  }
  closedir(d);
  return out;
}

// fd hygiene: a running `runsc exec` holds its three stdio pipes, its status log, and nothing
// else the privhelper has open (helper socket, the pinned runsc, config, other sandboxes' pipes); the broker holds
// none of the privhelper's files either.
TEST_F(IntegrationTest, RunscAndTheBrokerInheritNoFdTheyShouldNotHave) {
  // With the spawner on, a process is no runsc exec: this runs in the suite's _runsc_exec twin.
  const char* path = getenv("PASEO_TEST_PROCESS_PATH");
  if (path == nullptr || std::string(path) != "runsc-exec")
    GTEST_SKIP() << "processes start through the spawner; see integration_test_runsc_exec";
  pid_t cli = fork();
  if (cli == 0) {
    auto r = svc.Cli(Alpha(), {"run", "--", "sleep", "3"});
    _exit(r.exit_code);
  }
  std::vector<std::string> exec_fds;
  pid_t exec_pid = 0;
  for (int i = 0; i < 100 && exec_fds.empty(); ++i) {
    for (pid_t kid : ChildrenOf(svc.privhelper_pid())) {
      if (absl::StrContains(ReadFile("/proc/" + std::to_string(kid) + "/cmdline"),
                            std::string("exec\0", 5))) {
        exec_fds = FdTable(kid);
        exec_pid = kid;
      }
    }
    usleep(50000);
  }
  ASSERT_FALSE(exec_fds.empty()) << "no runsc exec seen";
  std::vector<std::string> helper_fds = FdTable(svc.privhelper_pid());
  auto target = [](const std::string& entry) { return entry.substr(entry.find(" -> ") + 4); };
  auto fd_of = [](const std::string& entry) { return entry.substr(0, entry.find(" -> ")); };
  // Its stdio: three pipes, read-only stdin, write-only stdout/stderr. (The privhelper keeps
  // the *other* ends of the same pipes for a broker restart, so the inodes match by design.)
  std::set<std::string> stdio;
  for (const auto& e : exec_fds) {
    std::string fd = fd_of(e);
    if (fd != "0" && fd != "1" && fd != "2") continue;
    EXPECT_TRUE(absl::StartsWith(target(e), "pipe:")) << e;
    stdio.insert(target(e));
  }
  EXPECT_EQ(stdio.size(), 3u);
  // fd 3: the memfd it logs its process's exit status into, which the privhelper reads (runsc
  // opens it once more by path: the same file).
  auto inode = [exec_pid](const std::string& fd) {
    struct stat st = {};
    std::string path = "/proc/" + std::to_string(exec_pid) + "/fd/" + fd;
    return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
  };
  bool has_log = false;
  for (const auto& e : exec_fds) has_log |= e == "3 -> /memfd:runsc-exec-log (deleted)";
  EXPECT_TRUE(has_log) << "runsc exec has no exit-status log at fd 3";
  const ino_t log_inode = inode("3");
  for (const auto& e : exec_fds) {
    std::string t = target(e);
    if (log_inode != 0 && inode(fd_of(e)) == log_inode) continue;
    EXPECT_FALSE(absl::StrContains(t, svc.base() + "/etc")) << e;
    EXPECT_FALSE(absl::StrContains(t, "supervisor.sock")) << e;
    bool is_stdio_fd = fd_of(e) == "0" || fd_of(e) == "1" || fd_of(e) == "2";
    if (absl::StartsWith(t, "socket:") || absl::StartsWith(t, "pipe:") || t[0] == '/') {
      for (const auto& h : helper_fds) {
        if (is_stdio_fd && stdio.count(t)) continue;
        EXPECT_NE(t, target(h)) << "runsc exec shares the privhelper's " << h;
      }
    }
  }
  int status = 0;
  EXPECT_TRUE(WaitPidWithin(cli, 60, &status)) << "`run -- sleep 3` did not end";
  EXPECT_EQ(WEXITSTATUS(status), 0);

  for (pid_t kid : ChildrenOf(svc.privhelper_pid())) {
    if (!absl::StrContains(ReadFile("/proc/" + std::to_string(kid) + "/cmdline"), "broker"))
      continue;
    for (const auto& e : FdTable(kid)) {
      std::string t = target(e);
      // fds 1 and 2 are the privhelper's log streams, fd 4 the listening socket and fd 6 the
      // listening operator socket (kept by the privhelper to restart a broker), all shared on
      // purpose.
      if (absl::StartsWith(e, "1 -> ") || absl::StartsWith(e, "2 -> ") ||
          absl::StartsWith(e, "4 -> ") || absl::StartsWith(e, "6 -> "))
        continue;
      EXPECT_FALSE(absl::StrContains(t, "runsc")) << e;
      EXPECT_FALSE(absl::StrContains(t, svc.base() + "/etc")) << e;
      // Its own output logs are the only state it may hold open.
      if (!absl::StartsWith(t, svc.base() + "/state/broker/")) {
        EXPECT_FALSE(absl::StrContains(t, svc.base() + "/state")) << e;
      }
      if (absl::StartsWith(t, "socket:")) {
        for (const auto& h : helper_fds) {
          // The helper socketpair is two sockets with different inodes; nothing else is shared.
          EXPECT_NE(t, target(h)) << e;
        }
      }
    }
  }
}

// The RENAME_EXCHANGE race again, this time through the whole service: the client names a
// path while a racer swaps a directory and a symlink to outside. The sandbox sees the inside
// or the request is refused; never the outside.
TEST_F(IntegrationTest, RenameExchangeRaceThroughTheApiNeverEscapes) {
  std::string race = AlphaWs() + "/race";
  ASSERT_EQ(mkdir(race.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((race + "/swap").c_str(), 0755), 0);
  std::ofstream(race + "/swap/marker") << "INSIDE";
  std::ofstream(svc.base() + "/outside/marker") << "SECRET";
  ASSERT_EQ(symlink((svc.base() + "/outside").c_str(), (race + "/link").c_str()), 0);
  std::atomic<bool> stop{false};
  std::thread racer([&] {
    std::string a = race + "/swap", b = race + "/link";
    while (!stop.load()) {
      syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE);
    }
  });
  int inside = 0, refused = 0;
  for (int i = 0; i < 40; ++i) {
    std::string path = race + (i % 2 ? "/swap" : "/link");
    auto r = svc.Cli(Alpha(), {"run", "--workspace", path, "--", "cat", "/workspace/marker"});
    ASSERT_FALSE(absl::StrContains(r.out, "SECRET")) << "escaped at iteration " << i;
    if (r.exit_code == 0 && r.out == "INSIDE") ++inside;
    else if (r.exit_code == 125) ++refused;
    else ADD_FAILURE() << r.exit_code << " " << r.out << " " << r.err;
  }
  stop = true;
  racer.join();
  std::printf("api race: %d inside, %d refused, 0 escapes\n", inside, refused);
  EXPECT_GT(inside + refused, 0);
  unlink((race + "/link").c_str());
  unlink((race + "/swap").c_str());
  std::remove((race + "/swap/marker").c_str());
  std::remove((race + "/link/marker").c_str());
  rmdir((race + "/swap").c_str());
  rmdir((race + "/link").c_str());
  rmdir(race.c_str());
}

TEST_F(IntegrationTest, ADestinationThroughARootfsSymlinkIsRefusedAndTheSymlinkStillWorks) {
  auto r = svc.Cli(Alpha(), {"run", "--workspace", AlphaWs() + ":/var/run/ws", "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r.err, "symlink in the sandbox's rootfs")) << r.err;
  auto ok = RunInAlpha({"sh", "-c", "readlink /var/run; ls -d /var/run/"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(ok.out, "../run\n/var/run/\n");
}

TEST_F(IntegrationTest, CredentialsAreMountedReadOnlyWhereTheProfileSays) {
  auto r = svc.Cli(Alpha(), {"run", "--credential", "tokens", "--", "sh", "-c",
                             "cat /credentials/tokens/token; echo x > /credentials/tokens/token"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.out, "s3cret-token\n");
  EXPECT_TRUE(absl::StrContains(r.err, "Read-only file system")) << r.err;
  EXPECT_EQ(ReadFile(svc.base() + "/creds/tokens/token"), "s3cret-token\n");
  auto none = RunInAlpha({"ls", "/credentials"});
  EXPECT_NE(none.exit_code, 0) << "credentials appear only when asked for: " << none.out;
  auto unknown = svc.Cli(Alpha(), {"run", "--credential", "ssh", "--", "true"});
  EXPECT_EQ(unknown.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(unknown.err, "has no credential \"ssh\"")) << unknown.err;
  auto other = svc.Cli(Beta(), {"run", "--credential", "tokens", "--", "true"});
  EXPECT_EQ(other.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(other.err, "permission-denied")) << other.err;
}

// Regression: Debian's runsc creates missing mount points inside the root it is given, on the
// host, even when the root is read-only; each sandbox's rootfs is an overlay so the shared,
// versioned rootfs never changes.
TEST_F(IntegrationTest, NewMountPointsNeverChangeTheSharedRootfs) {
  auto r = svc.Cli(Alpha(), {"run", "--workspace", AlphaWs() + ":/brand/new/place:ro", "--",
                             "ls", "-d", "/brand/new/place"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "/brand/new/place\n");
  DIR* versions = opendir((svc.base() + "/state/rootfs").c_str());
  ASSERT_NE(versions, nullptr);
  int checked = 0;
  while (dirent* e = readdir(versions)) {
    if (e->d_name[0] == '.') continue;
    struct stat st;
    std::string rootfs = svc.base() + "/state/rootfs/" + e->d_name + "/rootfs";
    EXPECT_NE(stat((rootfs + "/brand").c_str(), &st), 0) << "the shared rootfs was modified";
    ++checked;
  }
  closedir(versions);
  EXPECT_EQ(checked, 1);
}

TEST_F(IntegrationTest, AFifoWorkspaceIsRefusedWithoutBlocking) {
  std::string fifo = AlphaWs() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  auto r = svc.Cli(Alpha(), {"run", "--workspace", fifo, "--", "true"});
  EXPECT_EQ(r.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(r.err, "not a directory")) << r.err;
  unlink(fifo.c_str());
}

// Regression: the CLI could not name a workspace whose path contains ':' (PATH:DEST:MODE read
// "/ws/a:b" as PATH "/ws/a" with DEST "b"). --mount names any path; --workspace refuses the
// ambiguous form and points at --mount. And the one spelling rule: the CLI sends "ws/" and
// "ws//sub/." normalized, which the service accepts.
TEST_F(IntegrationTest, AWorkspaceWhoseNameHasAColonIsMountedWithMount) {
  std::string dir = AlphaWs() + "/a:b";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(chown(dir.c_str(), 4242, 4242), 0);
  std::ofstream(dir + "/f") << "colon";
  auto r = svc.Cli(Alpha(), {"run", "--mount", "src=" + dir + ",dst=/workspace", "--", "cat",
                             "/workspace/f"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "colon");
  auto old_syntax = svc.Cli(Alpha(), {"run", "--workspace", dir, "--", "true"});
  EXPECT_EQ(old_syntax.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(old_syntax.err, "needs --mount")) << old_syntax.err;
  auto slashes = svc.Cli(Alpha(), {"run", "--workspace", AlphaWs() + "//a:b/./:/w/", "--", "cat",
                                   "/w/f"});
  EXPECT_EQ(slashes.exit_code, 2) << "still a ':' in the path";
  auto trailing = svc.Cli(Alpha(), {"run", "--mount", "src=" + AlphaWs() + "//a:b/./,dst=/w/",
                                    "--", "cat", "/w/f"});
  EXPECT_EQ(trailing.exit_code, 0) << trailing.err;
  EXPECT_EQ(trailing.out, "colon");
  unlink((dir + "/f").c_str());
  rmdir(dir.c_str());
}

// Regression: the public socket listened with a backlog of 128, so in a burst of 300 clients
// connecting without blocking (as an event-loop client such as Paseo's daemon does) the ones
// past the backlog got EAGAIN while the broker was busy. The broker is stopped during the burst
// so that every connect has to wait in the backlog; then each connection asks info() through
// the client library, all at once.
TEST_F(IntegrationTest, ABurstOf300NonBlockingConnectsIsServed) {
  constexpr int kClients = 300;
  pid_t broker = svc.broker_pid();
  ASSERT_GT(broker, 0);
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::string path = svc.socket();
  ASSERT_LT(path.size(), sizeof(addr.sun_path));
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  std::vector<kj::AutoCloseFd> connected;
  int refused = 0;
  std::string why;
  {
    ASSERT_EQ(kill(broker, SIGSTOP), 0);
    absl::Cleanup resume = [broker] { kill(broker, SIGCONT); };
    for (int i = 0; i < kClients; ++i) {
      int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      ASSERT_GE(fd, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
        if (refused++ == 0) why = std::strerror(errno);
        close(fd);
        continue;
      }
      connected.emplace_back(fd);
    }
  }
  EXPECT_EQ(refused, 0) << "connects refused (the first: " << why << ")";

  auto io = kj::setupAsyncIo();
  std::vector<kj::Own<client::Connection>> connections;
  kj::Vector<kj::Promise<uint32_t>> answers;
  for (auto& fd : connected) {
    connections.push_back(kj::heap<client::Connection>(io, kj::mv(fd)));
    answers.add(connections.back()->supervisor().infoRequest().send().then(
        [](auto&& reply) { return reply.getPeerUid(); }));
  }
  kj::Array<uint32_t> uids;
  kj::Maybe<kj::Exception> failed = kj::runCatchingExceptions([&] {
    uids = io.provider->getTimer()
               .timeoutAfter(60 * kj::SECONDS, kj::joinPromises(answers.releaseAsArray()))
               .wait(io.waitScope);
  });
  KJ_IF_MAYBE(e, failed) { FAIL() << "info() failed: " << e->getDescription().cStr(); }
  EXPECT_EQ(uids.size(), static_cast<size_t>(kClients - refused));
  for (uint32_t uid : uids) EXPECT_EQ(uid, 0u);
}

// Regression: a text field with an embedded NUL ("w\0...") was read up to the NUL. Every name a
// client sends must be free of NUL bytes and valid UTF-8, or the call is refused, and nothing
// is created.
TEST_F(IntegrationTest, NamesWithNulOrInvalidUtf8AreRefused) {
  Service& svc = Service::Get();
  auto io = kj::setupAsyncIo();
  client::Connection conn(io, svc.socket());  // as root: deployment io allows uid 0
  auto count = [&] {
    return conn.supervisor().listSandboxesRequest().send().wait(io.waitScope).getSandboxes().size();
  };
  size_t before = count();
  struct Case {
    std::string name;
    std::function<void(api::SandboxSpec::Builder)> fill;
  };
  std::vector<Case> cases = {
      {"NUL in the deployment id",
       [](auto s) { s.setDeploymentId(capnp::Text::Reader("io\0beta", 7)); }},
      {"deployment id not UTF-8", [](auto s) { s.setDeploymentId("io\xff"); }},
      {"NUL in the profile",
       [](auto s) {
         s.setDeploymentId("io");
         s.setProfile(capnp::Text::Reader("default\0x", 9));
       }},
      {"NUL in a credential name",
       [](auto s) {
         s.setDeploymentId("io");
         s.initCredentials(1).set(0, capnp::Text::Reader("c\0x", 3));
       }},
      {"label key not UTF-8",
       [](auto s) {
         s.setDeploymentId("io");
         auto l = s.initLabels(1)[0];
         l.setKey("\xc0\xaf");
         l.setValue("v");
       }},
  };
  for (auto& c : cases) {
    auto req = conn.supervisor().createSandboxRequest();
    c.fill(req.initSpec());
    std::string error = "(created)";
    auto failed = kj::runCatchingExceptions([&] {
      io.provider->getTimer().timeoutAfter(60 * kj::SECONDS, req.send()).wait(io.waitScope);
    });
    KJ_IF_MAYBE(e, failed) { error = client::ErrorText(*e); }
    EXPECT_EQ(error.rfind("invalid-argument: ", 0), 0u) << c.name << ": " << error;
  }
  EXPECT_EQ(count(), before) << "a refused create leaves nothing";
}

// ---------------------------------------------------------------- the client's own permissions
//
// Regression (attack run item 1): the privhelper resolves workspaces with CAP_DAC_OVERRIDE, so
// a client was given a directory it could not open itself. Deployment "shared" (root ws-shared,
// owned by 2101; clients 2101 and 2102) exercises it through the real CLI.

class ClientPermissionTest : public IntegrationTest {
 protected:
  Identity Owner() const { return {2101, 2101, {2101, svc.socket_gid()}}; }
  Identity Other() const { return {2102, 2102, {2102, svc.socket_gid()}}; }
  Identity Member() const { return {2102, 2102, {2102, 2200, svc.socket_gid()}}; }
  std::string SharedWs() const { return svc.base() + "/ws-shared"; }

  // Makes a directory as root with this owner, group and mode.
  void MakeDir(const std::string& path, uid_t owner, gid_t group, mode_t mode) {
    ASSERT_EQ(mkdir(path.c_str(), 0700), 0) << path;
    ASSERT_EQ(chown(path.c_str(), owner, group), 0) << path;
    ASSERT_EQ(chmod(path.c_str(), mode), 0) << path;
    made_.push_back(path);
  }
  void Put(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
    made_.push_back(path);
  }

  // errno of open(path, O_RDONLY) as `who` (0 if it opened): what the client can do itself.
  int OpenErrnoAs(const Identity& who, const std::string& path) {
    pid_t pid = fork();
    if (pid == 0) {
      if (setgroups(who.groups.size(), who.groups.data()) != 0 ||
          setresgid(who.gid, who.gid, who.gid) != 0 || setresuid(who.uid, who.uid, who.uid) != 0)
        _exit(255);
      int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
      _exit(fd >= 0 ? 0 : errno);
    }
    int status = WaitPid(pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  CliResult Run(const Identity& who, const std::string& workspace, const std::string& script,
                const std::string& deployment = "shared") {
    return svc.Cli(who, {"run", "--deployment", deployment, "--workspace", workspace, "--", "sh",
                         "-c", script});
  }

  // The refusal every case expects: permission-denied, naming the directory, nothing printed.
  void ExpectDenied(const CliResult& r, const std::string& part) {
    EXPECT_EQ(r.exit_code, 125) << r.out << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, "permission-denied: ")) << r.err;
    EXPECT_TRUE(absl::StrContains(r.err, part)) << r.err;
    EXPECT_EQ(r.out, "");
  }

  void TearDown() override {
    for (auto it = made_.rbegin(); it != made_.rend(); ++it) remove(it->c_str());
    IntegrationTest::TearDown();
  }

  std::vector<std::string> made_;
};

// The report, step by step: `install -d -m0700 $ROOT/locked; install -d -m0755
// $ROOT/locked/inner; echo X > $ROOT/locked/inner/marker` as root; the client, owner of $ROOT,
// cannot cat the marker, and must not get it through a sandbox either.
TEST_F(ClientPermissionTest, TheReportedLockedDirectoryIsRefusedAndNothingIsLeft) {
  MakeDir(SharedWs() + "/locked", 0, 0, 0700);
  MakeDir(SharedWs() + "/locked/inner", 0, 0, 0755);
  Put(SharedWs() + "/locked/inner/marker", "X\n");
  ASSERT_EQ(OpenErrnoAs(Owner(), SharedWs() + "/locked/inner/marker"), EACCES);
  for (const char* mode : {":/workspace:ro", ":/workspace:rw"}) {
    auto r = Run(Owner(), SharedWs() + "/locked/inner" + mode, "cat /workspace/marker");
    ExpectDenied(r, "may not search " + SharedWs() + "/locked");
  }
  // Refused before anything was made: no sandbox listed, and (TearDown) no bundle, mount,
  // runsc state or cgroup left.
  auto ps = svc.Cli(Owner(), {"ps"});
  EXPECT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_FALSE(absl::StrContains(ps.out, "sb-")) << ps.out;
}

TEST_F(ClientPermissionTest, AClientGetsWhatItCouldOpenItselfAndNoMore) {
  MakeDir(SharedWs() + "/mine", 2101, 2101, 0700);
  MakeDir(SharedWs() + "/team", 0, 2200, 0770);
  MakeDir(SharedWs() + "/public", 0, 0, 0755);
  MakeDir(SharedWs() + "/listable", 0, 0, 0744);
  MakeDir(SharedWs() + "/listable/inner", 0, 0, 0755);
  Put(SharedWs() + "/public/marker", "PUBLIC\n");

  // Its own 0700 directory: the owner reads and writes; another client may not even open it.
  auto mine = Run(Owner(), SharedWs() + "/mine:/workspace:rw", "echo m > /workspace/f && cat /workspace/f");
  EXPECT_EQ(mine.exit_code, 0) << mine.err;
  EXPECT_EQ(mine.out, "m\n");
  made_.push_back(SharedWs() + "/mine/f");
  ExpectDenied(Run(Other(), SharedWs() + "/mine:/workspace:ro", "ls /workspace"),
               "uid 2102 (gids 2102, " + std::to_string(svc.socket_gid()) +
                   ") may not open read-only " + SharedWs() + "/mine");
  // A group directory: granted through a supplementary gid, refused without it. (Inside, the
  // agent runs as the deployment's run-as user, 2101, whom the directory does not admit: what
  // the agent may do there is its own uid's business.)
  auto team = Run(Member(), SharedWs() + "/team:/workspace:rw", "stat -c %a /workspace");
  EXPECT_EQ(team.exit_code, 0) << team.err;
  EXPECT_EQ(team.out, "770\n");
  ExpectDenied(Run(Other(), SharedWs() + "/team:/workspace:ro", "true"),
               "may not open read-only " + SharedWs() + "/team");
  // Other permission: read-only is granted, read-write is not.
  auto pub = Run(Other(), SharedWs() + "/public:/workspace:ro", "cat /workspace/marker");
  EXPECT_EQ(pub.exit_code, 0) << pub.err;
  EXPECT_EQ(pub.out, "PUBLIC\n");
  ExpectDenied(Run(Other(), SharedWs() + "/public:/workspace:rw", "true"),
               "may not open read-write " + SharedWs() + "/public");
  // Readable but not searchable: no way through.
  ExpectDenied(Run(Other(), SharedWs() + "/listable/inner:/workspace:ro", "true"),
               "may not search " + SharedWs() + "/listable");
}

// Paseo's Docker image runs its client as uid 1000; SO_PEERCRED reports the uid as the host
// sees it (1000, without user-namespace remapping), and the host directories beneath the mapped
// root are judged for that uid. The refusal names the path as the container sees it.
TEST_F(ClientPermissionTest, DockerClientsAreJudgedAsTheirHostUid) {
  Identity docker{1000, 1000, {1000, svc.socket_gid()}};
  std::string root = svc.base() + "/ws-docker";
  MakeDir(root + "/locked", 0, 0, 0700);
  MakeDir(root + "/locked/inner", 0, 0, 0755);
  Put(root + "/locked/inner/marker", "SECRET\n");
  MakeDir(root + "/someone-else", 1001, 1001, 0700);
  ExpectDenied(Run(docker, "/workspace/locked/inner:/workspace:ro", "cat /workspace/marker",
                   "docker"),
               "uid 1000 (gids 1000, " + std::to_string(svc.socket_gid()) +
                   ") may not search /workspace/locked");
  ExpectDenied(Run(docker, "/workspace/someone-else:/workspace:ro", "true", "docker"),
               "may not open read-only /workspace/someone-else");
  auto own = Run(docker, "/workspace/proj:/workspace:rw", "id -u", "docker");
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(own.out, "1000\n");
}

// Credentials are granted by the deployment that lists them, not by the client's own
// permissions: a root-only 0700 credential root is still mounted (what the agent may read in
// it is then up to its own uid, inside the sandbox).
TEST_F(ClientPermissionTest, ALockedCredentialRootIsStillMounted) {
  ASSERT_EQ(OpenErrnoAs(Owner(), svc.base() + "/creds/locked"), EACCES);
  auto r = svc.Cli(Owner(), {"run", "--deployment", "shared", "--credential", "tokens", "--",
                             "stat", "-c", "%a %u", "/credentials/tokens"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "700 0\n");
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  return paseo::testing::RunTestsWithSharedService(argc, argv);
}
