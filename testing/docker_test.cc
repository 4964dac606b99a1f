// The official Docker deployment (docker/) against the real service: a private Docker Engine
// (testing/docker_engine.h) runs Paseo's side as uid 1000 in a container built locally from
// scratch, with only the supervisor socket and its workspace bind-mounted, and the seed's test
// matrix (items 1-8 and 10) runs twice: as a host client (uid 4242, deployment alpha) and
// through that container (`docker exec`, deployment docker, paths mapped by clientPath). Where
// Docker cannot run here, the docker half reports itself skipped with the reason.
#include <grp.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/docker_engine.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

Service* service = nullptr;
DockerEngine* engine = nullptr;
std::string docker_unavailable;  // why the docker half is skipped ("" when it runs)
bool made_run_dir = false;       // main made /run/paseo-sandbox on the host (removed at the end)

constexpr char kImage[] = "paseo-sandbox-client:test";
constexpr char kSocketInContainer[] = "/run/paseo-sandbox/supervisor.sock";

enum class Mode { kHost, kDocker };

// One Paseo as the matrix drives it. Host: the CLI as a host uid, naming host paths. Docker:
// the CLI inside a container of Paseo's image (uid 1000 unless said), naming the container's
// paths; the deployment comes from the container's $PASEO_SANDBOX_DEPLOYMENT.
class Paseo {
 public:
  // Host mode: `uid`'s client, workspace `host_root` (named as such).
  static Paseo Host(uid_t uid, std::string host_root) {
    Paseo p;
    p.mode_ = Mode::kHost;
    p.uid_ = uid;
    p.workspace_ = host_root;
    p.host_workspace_ = host_root;
    return p;
  }
  // Docker mode: container `name`, which sees its host root at /workspace; `sub` is the
  // workspace directory beneath it.
  static Paseo Docker(std::string name, uid_t uid, std::string host_root, std::string sub) {
    Paseo p;
    p.mode_ = Mode::kDocker;
    p.uid_ = uid;
    p.container_ = std::move(name);
    p.workspace_ = "/workspace" + sub;
    p.host_workspace_ = host_root + sub;
    return p;
  }

  Mode mode() const { return mode_; }
  uid_t uid() const { return uid_; }
  // The workspace as this Paseo names it, and where it is on the host.
  const std::string& workspace() const { return workspace_; }
  const std::string& host_workspace() const { return host_workspace_; }

  std::vector<std::string> Argv(const std::vector<std::string>& args,
                                const std::vector<std::string>& docker_env = {}) const {
    std::vector<std::string> argv;
    if (mode_ == Mode::kHost) {
      argv = {service->base() + "/bin/paseo-sandbox", "--socket", service->socket()};
    } else {
      std::vector<std::string> exec = {"exec", "-i"};
      for (const auto& e : docker_env) exec.insert(exec.end(), {"-e", e});
      exec.insert(exec.end(), {container_, "/bin/paseo-sandbox"});
      argv = engine->DockerArgv(exec);
    }
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  std::unique_ptr<RunningCommand> Start(const std::vector<std::string>& args,
                                        const std::vector<std::string>& docker_env = {}) const {
    if (mode_ == Mode::kDocker)
      return std::make_unique<RunningCommand>(Argv(args, docker_env), engine->DockerEnv());
    uid_t uid = uid_;
    gid_t socket_gid = service->socket_gid();
    std::string base = service->base();
    return std::make_unique<RunningCommand>(Argv(args), std::vector<std::string>{},
                                            [uid, socket_gid, base]() -> int {
      gid_t groups[] = {uid, socket_gid};
      if (chdir(base.c_str()) != 0 || setgroups(2, groups) != 0 ||
          setresgid(uid, uid, uid) != 0 || setresuid(uid, uid, uid) != 0)
        return errno;
      return 0;
    });
  }

  CliResult Cli(const std::vector<std::string>& args, const std::string& input = "",
                const std::vector<std::string>& docker_env = {}) const {
    auto command = Start(args, docker_env);
    command->Write(input);
    return command->Finish();
  }

  // Paseo loses its connection mid-command: the CLI dies (in the container: killed there).
  CliResult Disconnect(RunningCommand& command) const {
    if (mode_ == Mode::kHost) {
      kill(command.pid(), SIGKILL);
    } else {
      engine->Docker({"exec", container_, "/bin/busybox", "killall", "-9", "paseo-sandbox"});
    }
    return command.Finish();
  }

  // Paseo restarts: on the host the CLI is the whole client; a container restarts as a whole
  // (every process in it killed, its mounts made again from the host paths).
  void Restart() const {
    if (mode_ == Mode::kDocker) {
      CliResult r = engine->Docker({"restart", "-t", "0", container_});
      ASSERT_EQ(r.exit_code, 0) << r.err;
    }
  }

 private:
  Mode mode_ = Mode::kHost;
  uid_t uid_ = 0;
  std::string container_;
  std::string workspace_;
  std::string host_workspace_;
};

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// The ids of the processes of sandbox `sandbox` in `ps --json` whose JSON contains `marker`.
std::vector<std::string> ProcessIds(const std::string& ps, const std::string& sandbox,
                                    const std::string& marker) {
  std::vector<std::string> ids;
  size_t at = ps.find("\"id\":\"" + sandbox + "\"");
  if (at == std::string::npos) return ids;
  size_t end = ps.find("{\"id\":\"sb-", at + 1);
  std::string chunk = ps.substr(at, end == std::string::npos ? std::string::npos : end - at);
  for (size_t p = chunk.find("{\"id\":\"p-"); p != std::string::npos;
       p = chunk.find("{\"id\":\"p-", p + 1)) {
    size_t next = chunk.find("{\"id\":\"p-", p + 1);
    std::string one = chunk.substr(p, next == std::string::npos ? std::string::npos : next - p);
    if (absl::StrContains(one, marker)) ids.push_back(one.substr(7, one.find('"', 7) - 7));
  }
  return ids;
}

// Sandbox `sandbox`'s object in `ps --json` ("" if it is not listed).
std::string SandboxIn(const std::string& ps, const std::string& sandbox) {
  size_t at = ps.find("{\"id\":\"" + sandbox + "\"");
  if (at == std::string::npos) return "";
  size_t end = ps.find("{\"id\":\"sb-", at + 1);
  return ps.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

class DualDeploymentTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (GetParam() == Mode::kDocker && engine == nullptr)
      GTEST_SKIP() << "Docker cannot run on this machine: " << docker_unavailable;
  }

  // The client under test and, for isolation checks, another deployment's client.
  Paseo Me() const {
    return GetParam() == Mode::kHost
               ? Paseo::Host(4242, service->base() + "/ws-alpha")
               : Paseo::Docker("paseo-a", 1000, service->base() + "/ws-docker", "/proj");
  }
  Paseo Other() const {
    return GetParam() == Mode::kHost
               ? Paseo::Host(4343, service->base() + "/ws-beta")
               : Paseo::Docker("paseo-b", 1001, service->base() + "/ws-docker-b", "");
  }
  std::string MyDeployment() const { return GetParam() == Mode::kHost ? "alpha" : "docker"; }
  std::string OtherDeployment() const { return GetParam() == Mode::kHost ? "beta" : "docker-b"; }

  // A kept sandbox over the workspace (read-write at /workspace); its id.
  std::string Create(const Paseo& p, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"create", "--workspace", p.workspace() + ":/workspace:rw"};
    args.insert(args.end(), extra.begin(), extra.end());
    CliResult r = p.Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    std::string id = Trim(r.out);
    EXPECT_EQ(id.rfind("sb-", 0), 0u) << r.out;
    return id;
  }
  // Deletes a sandbox and waits until it is no longer listed (the teardown runs in the
  // background; the sandbox is `deleting` meanwhile).
  void Remove(const Paseo& p, const std::string& id) {
    CliResult r = p.Cli({"rm", "--force", id});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    for (int i = 0; i < 300 && absl::StrContains(p.Cli({"--json", "ps"}).out, id); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // The one process of `sandbox` whose ps entry contains `marker`, polled until it is listed.
  std::string ProcessId(const Paseo& p, const std::string& sandbox, const std::string& marker) {
    for (int i = 0; i < 100; ++i) {
      auto ids = ProcessIds(p.Cli({"--json", "ps"}).out, sandbox, marker);
      if (ids.size() == 1) return ids[0];
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "no process with " << marker << " in " << sandbox;
    return "";
  }
  void TearDown() override {
    // Whatever a test left in the workspaces goes (as root, on the host).
    for (const char* dir : {"/ws-alpha", "/ws-docker/proj", "/ws-beta", "/ws-docker-b"}) {
      std::string path = service->base() + dir;
      RunArgv({"/bin/sh", "-c", "find " + path + " -mindepth 1 -delete"}, "",
              std::chrono::seconds(30), {"PATH=/usr/bin:/bin"});
    }
  }
};

// Item 1: a sandbox is created and started, and gVisor's kernel is the one running.
TEST_P(DualDeploymentTest, Item1_CreatesAndStartsAGvisorSandbox) {
  Paseo me = Me();
  CliResult r = me.Cli({"run", "--workspace", me.workspace() + ":/workspace:rw", "--", "sh",
                        "-c", "dmesg | head -1; id -u"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, "Starting gVisor")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "\n" + std::to_string(me.uid()) + "\n")) << r.out;
  CliResult info = me.Cli({"info"});
  EXPECT_TRUE(absl::StrContains(info.out, "your uid: " + std::to_string(me.uid()))) << info.out;
  EXPECT_TRUE(absl::StrContains(info.out, "deployments: " + MyDeployment() + "\n")) << info.out;
}

// Item 2: the registered workspace is readable and writable; an adjacent host path, the
// supervisor's state and its socket are not reachable, neither by naming them nor from inside.
TEST_P(DualDeploymentTest, Item2_OnlyTheRegisteredWorkspace) {
  Paseo me = Me();
  WriteText(me.host_workspace() + "/from-host", "host bytes\n");
  CliResult r = me.Cli({"run", "--workspace", me.workspace() + ":/workspace:rw", "--", "sh", "-c",
                        "cat /workspace/from-host && echo sandbox bytes > /workspace/from-sandbox"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "host bytes\n");
  EXPECT_EQ(ReadFile(me.host_workspace() + "/from-sandbox"), "sandbox bytes\n");

  // Adjacent host paths: the directory next to the root, the supervisor's state and run
  // directories, the socket. In Docker mode a host path is never a path the deployment maps
  // (only its container's /workspace is), even the workspace's own host path.
  const std::string base = service->base();
  std::vector<std::string> refused = {base + "/outside", base + "/state", base + "/run",
                                      "/run/paseo-sandbox", "/etc"};
  if (me.mode() == Mode::kDocker) refused.push_back(me.host_workspace());
  for (const std::string& path : refused) {
    CliResult bad = me.Cli({"run", "--workspace", path + ":/workspace:rw", "--", "true"});
    EXPECT_EQ(bad.exit_code, 125) << path << ": " << bad.out << bad.err;
  }
  // Inside: no socket anywhere, nothing of the supervisor's directories.
  CliResult inside = me.Cli(
      {"run", "--workspace", me.workspace() + ":/workspace:rw", "--", "sh", "-c",
       "find / -path /proc -prune -o -path /sys -prune -o -type s -print; ls -d " + base +
           " /run/paseo-sandbox 2>&1; echo end"});
  EXPECT_EQ(inside.exit_code, 0) << inside.err;
  EXPECT_FALSE(absl::StrContains(inside.out, ".sock")) << inside.out;
  EXPECT_TRUE(absl::StrContains(inside.out, base + ": No such file or directory")) << inside.out;
  EXPECT_TRUE(absl::StrContains(inside.out, "/run/paseo-sandbox: No such file or directory"))
      << inside.out;
}

// Item 3: `..`, a symlink, a bind submount, stale handles and another deployment's ID are
// refused; another deployment's sandboxes are invisible.
TEST_P(DualDeploymentTest, Item3_EscapesAndSubstitutionsAreRefused) {
  Paseo me = Me();
  const std::string ws = me.workspace();
  ASSERT_EQ(symlink((service->base() + "/outside").c_str(), (me.host_workspace() + "/link").c_str()), 0);
  ASSERT_EQ(mkdir((me.host_workspace() + "/sub").c_str(), 0755), 0);
  ASSERT_EQ(chown((me.host_workspace() + "/sub").c_str(), me.uid(), me.uid()), 0);
  // A bind submount as the privhelper sees it (a mount in its own mount namespace).
  const std::string nsenter_at = "--target=" + std::to_string(service->privhelper_pid());
  CliResult mounted = RunArgv({"/usr/bin/nsenter", nsenter_at, "--mount", "/bin/mount", "-t",
                               "tmpfs", "submount", me.host_workspace() + "/sub"});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.err;
  for (const std::string& path : {ws + "/../..", ws + "/sub/..", ws + "/link", ws + "/sub"}) {
    CliResult r = me.Cli({"run", "--workspace", path + ":/workspace:rw", "--", "true"});
    EXPECT_EQ(r.exit_code, 125) << path << ": " << r.err;
  }
  RunArgv({"/usr/bin/nsenter", nsenter_at, "--mount", "/bin/umount", me.host_workspace() + "/sub"});

  // Stale handles: a deleted sandbox's id, a released process's id.
  std::string id = Create(me);
  CliResult ran = me.Cli({"exec", "--key", "k3", id, "--", "true"});
  EXPECT_EQ(ran.exit_code, 0) << ran.err;
  std::string proc = ProcessId(me, id, "\"true\"");
  EXPECT_EQ(me.Cli({"release", id, proc}).exit_code, 0);
  CliResult released = me.Cli({"logs", id, proc});
  EXPECT_EQ(released.exit_code, 125) << released.err;
  Remove(me, id);
  CliResult deleted = me.Cli({"exec", id, "--", "true"});
  EXPECT_EQ(deleted.exit_code, 125) << deleted.err;
  EXPECT_TRUE(absl::StrContains(deleted.err, "not-found")) << deleted.err;

  // Another deployment: naming its ID (on the command line or in the environment) is refused;
  // its sandbox is neither listed nor reachable by id.
  Paseo other = Other();
  std::string theirs = Create(other);
  CliResult named = me.Cli({"create", "--deployment", OtherDeployment(), "--workspace",
                            other.workspace() + ":/workspace:rw"});
  EXPECT_EQ(named.exit_code, 125) << named.err;
  EXPECT_TRUE(absl::StrContains(named.err, "permission-denied")) << named.err;
  if (me.mode() == Mode::kDocker) {
    CliResult env = me.Cli({"create", "--workspace", "/workspace:/workspace:rw"}, "",
                           {"PASEO_SANDBOX_DEPLOYMENT=" + OtherDeployment()});
    EXPECT_EQ(env.exit_code, 125) << env.err;
    EXPECT_TRUE(absl::StrContains(env.err, "permission-denied")) << env.err;
  }
  EXPECT_FALSE(absl::StrContains(me.Cli({"--json", "ps"}).out, theirs));
  for (const std::vector<std::string>& reach :
       {std::vector<std::string>{"exec", theirs, "--", "true"},
        std::vector<std::string>{"rm", "--force", theirs},
        std::vector<std::string>{"pause", theirs}}) {
    CliResult r = me.Cli(reach);
    EXPECT_EQ(r.exit_code, 125) << reach[0] << ": " << r.err;
  }
  EXPECT_TRUE(absl::StrContains(other.Cli({"--json", "ps"}).out, theirs)) << "still theirs";
  Remove(other, theirs);
}

// Item 4: inside, no Docker, containerd or supervisor socket, no capabilities, no mounting.
TEST_P(DualDeploymentTest, Item4_NoSocketsNoCapabilitiesNoMounts) {
  Paseo me = Me();
  CliResult r = me.Cli(
      {"run", "--workspace", me.workspace() + ":/workspace:rw", "--", "sh", "-c",
       "grep -E '^Cap(Eff|Prm)' /proc/self/status; "
       "for s in /var/run/docker.sock /run/docker.sock /run/containerd/containerd.sock " +
           std::string(kSocketInContainer) + "; do test -e $s && echo present $s; done; "
           "mkdir -p /tmp/m && mount -t tmpfs none /tmp/m && echo mounted; "
           "mount --bind /workspace /tmp/m && echo bound; echo end"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* set : {"CapEff", "CapPrm"})
    EXPECT_TRUE(absl::StrContains(r.out, std::string(set) + ":\t0000000000000000")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "present")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "mounted")) << r.out;
  EXPECT_FALSE(absl::StrContains(r.out, "bound")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "end")) << r.out;
}

// Item 5: stdin, stdout and stderr stream; Paseo disconnects; it reconnects from the output
// offset it had and the same process continues.
TEST_P(DualDeploymentTest, Item5_StreamsAndReconnectsByOffset) {
  Paseo me = Me();
  std::string id = Create(me);
  auto exec = me.Start({"exec", "-i", "--key", "k5", id, "--", "sh", "-c",
                        "read a; echo out:$a; echo err:$a >&2; read b; echo out:$b; exit 7"});
  exec->Write("one\n");
  ASSERT_TRUE(exec->ReadUntil("out:one\n", std::chrono::seconds(60)));
  me.Disconnect(*exec);
  std::string proc = ProcessId(me, id, "read a");
  CliResult attach = me.Cli({"attach", "--from", "8", id, proc}, "two\n");
  EXPECT_EQ(attach.out, "out:two\n");
  EXPECT_EQ(attach.exit_code, 7) << attach.err;
  CliResult err = me.Cli({"logs", "--stream", "stderr", "--from", "0", id, proc});
  EXPECT_EQ(err.err, "err:one\n");  // a stderr stream is written to stderr
  CliResult all = me.Cli({"logs", "--from", "0", id, proc});
  EXPECT_EQ(all.out, "out:one\nout:two\n") << all.err;
  CliResult wait = me.Cli({"wait", id, proc});
  EXPECT_EQ(wait.out, "exited 7\n");
  Remove(me, id);
}

// Item 6: Paseo restarts while work runs; the session (sandbox by key, process, output) is
// all there afterwards.
TEST_P(DualDeploymentTest, Item6_PaseoRestartKeepsTheSession) {
  Paseo me = Me();
  std::string id = Create(me, {"--key", "session-6"});
  auto exec = me.Start({"exec", "--key", "job6", id, "--", "sh", "-c",
                        "echo started; while [ ! -e /workspace/go6 ]; do sleep 0.1; done; "
                        "echo finished"});
  ASSERT_TRUE(exec->ReadUntil("started\n", std::chrono::seconds(60)));
  me.Disconnect(*exec);
  me.Restart();
  CliResult found = me.Cli({"find", "session-6"});
  EXPECT_EQ(Trim(found.out), id) << found.err;
  std::string proc = ProcessId(me, id, "go6");
  auto follow = me.Start({"logs", "-f", "--from", "0", id, proc});
  ASSERT_TRUE(follow->ReadUntil("started\n", std::chrono::seconds(60)));
  WriteText(me.host_workspace() + "/go6", "");
  CliResult logs = follow->Finish();
  EXPECT_EQ(logs.exit_code, 0) << logs.err;
  EXPECT_EQ(logs.out, "started\nfinished\n");
  EXPECT_EQ(me.Cli({"wait", id, proc}).out, "exited 0\n");
  Remove(me, id);
}

// Item 7: the supervisor (privhelper and broker) is killed and restarts with onRestart keep:
// the sandbox is adopted and its in-sandbox spawner reattached, so the process it ran lives on
// with its output (docs/operations.md); new processes run too. The socket is socket-activated (as
// installer/systemd/paseo-sandbox.socket makes it), so the container's bind mount of the socket
// file reaches the restarted service without the container restarting.
TEST_P(DualDeploymentTest, Item7_SupervisorRestartReconciles) {
  Paseo me = Me();
  std::string id = Create(me);
  auto exec = me.Start({"exec", "--key", "job7", id, "--", "sh", "-c",
                        "echo started; while [ ! -e /workspace/go7 ]; do sleep 0.1; done; "
                        "echo done > /workspace/after7"});
  ASSERT_TRUE(exec->ReadUntil("started\n", std::chrono::seconds(60)));
  service->Crash();
  CliResult lost = exec->Finish();
  EXPECT_EQ(lost.exit_code, 125) << lost.err;
  service->Restart();
  CliResult ps = me.Cli({"--json", "ps"});
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  std::string mine = SandboxIn(ps.out, id);
  // The new privhelper reattached the sandbox's spawner: the process runs on (issue 27).
  EXPECT_TRUE(absl::StrContains(mine, "\"state\":\"running\"")) << ps.out;
  EXPECT_TRUE(absl::StrContains(mine, "\"status\":\"running\"")) << mine;
  std::string proc = ProcessId(me, id, "echo started");
  WriteText(me.host_workspace() + "/go7", "");
  CliResult fresh = me.Cli({"exec", id, "--", "sh", "-c",
                            "echo fresh > /workspace/fresh7 && cat /workspace/fresh7"});
  EXPECT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(fresh.out, "fresh\n");
  EXPECT_EQ(ReadFile(me.host_workspace() + "/fresh7"), "fresh\n");
  CliResult waited = me.Cli({"wait", id, proc});
  EXPECT_EQ(waited.exit_code, 0) << waited.out << waited.err;
  EXPECT_EQ(ReadFile(me.host_workspace() + "/after7"), "done\n") << "the process lived on";
  CliResult logs = me.Cli({"logs", id, proc});
  EXPECT_EQ(logs.out, "started\n") << "its output, once";
  Remove(me, id);
}

// Item 8: signal, wait, delete; a stopped sandbox and a half-created one are collected.
TEST_P(DualDeploymentTest, Item8_SignalWaitDeleteAndCollect) {
  Paseo me = Me();
  std::string id = Create(me);
  auto exec = me.Start({"exec", "--key", "job8", id, "--", "sh", "-c", "echo up; exec sleep 1000"});
  ASSERT_TRUE(exec->ReadUntil("up\n", std::chrono::seconds(60)));
  std::string proc = ProcessId(me, id, "sleep 1000");
  EXPECT_EQ(me.Cli({"kill", "--signal", "TERM", id, proc}).exit_code, 0);
  EXPECT_EQ(exec->Finish().exit_code, 128 + SIGTERM);
  CliResult wait = me.Cli({"wait", id, proc});
  EXPECT_EQ(wait.out, "signal 15\n");
  EXPECT_EQ(wait.exit_code, 128 + SIGTERM);
  Remove(me, id);
  EXPECT_FALSE(absl::StrContains(me.Cli({"--json", "ps"}).out, id));

  // A sandbox whose gVisor kernel died is listed stopped, and deleted without force.
  std::string dead = Create(me);
  pid_t sentry = service->SandboxProcess("runsc-sandbox", dead);
  ASSERT_GT(sentry, 0);
  ASSERT_EQ(kill(sentry, SIGKILL), 0);
  std::string ps;
  for (int i = 0; i < 100; ++i) {
    ps = me.Cli({"--json", "ps"}).out;
    if (absl::StrContains(ps, "\"state\":\"stopped\"")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(absl::StrContains(ps, "\"state\":\"stopped\"")) << ps;
  CliResult rm = me.Cli({"rm", dead});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;

  // Half-created (a bundle with no container, as a crash mid-create leaves): the operator's
  // gc (SIGHUP, paseo-sandbox-admin gc) collects it, whoever the clients are.
  std::string stale = service->bundles() + "/sb-000000000000000000000000";
  ASSERT_EQ(mkdir(stale.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((stale + "/mounts").c_str(), 0700), 0);
  std::ofstream(stale + "/config.json") << "{}";
  ASSERT_EQ(kill(service->privhelper_pid(), SIGHUP), 0);
  EXPECT_EQ(service->LeaksAfter(20), std::vector<std::string>{});
}

// Item 10: agents run as the deployment's uid:gid; what they make on the bind-mounted
// workspace belongs to it on the host (4242:4242 for the host user, 1000:1000 for Docker's
// default), and host modes bind them as they would that uid.
TEST_P(DualDeploymentTest, Item10_UidAndGidOnTheWorkspace) {
  Paseo me = Me();
  const uid_t owner = me.uid();
  WriteText(me.host_workspace() + "/mine", "mine\n");
  ASSERT_EQ(chown((me.host_workspace() + "/mine").c_str(), owner, owner), 0);
  ASSERT_EQ(chmod((me.host_workspace() + "/mine").c_str(), 0600), 0);
  WriteText(me.host_workspace() + "/roots", "roots\n");
  ASSERT_EQ(chmod((me.host_workspace() + "/roots").c_str(), 0600), 0);
  CliResult r = me.Cli({"run", "--workspace", me.workspace() + ":/workspace:rw", "--", "sh", "-c",
                        "id -u; id -g; cat /workspace/mine; cat /workspace/roots || echo denied; "
                        "echo made > /workspace/made; mkdir /workspace/dir"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = std::to_string(owner);
  EXPECT_EQ(r.out, id + "\n" + id + "\nmine\ndenied\n");
  for (const char* made : {"/made", "/dir"}) {
    struct stat st;
    ASSERT_EQ(stat((me.host_workspace() + made).c_str(), &st), 0) << made;
    EXPECT_EQ(st.st_uid, owner) << made;
    EXPECT_EQ(st.st_gid, owner) << made;
  }
}

// The broker is killed (the privhelper restarts it): the client keeps working, the sandbox
// and a process's output survive.
TEST_P(DualDeploymentTest, BrokerRestartKeepsServing) {
  Paseo me = Me();
  std::string id = Create(me);
  auto exec = me.Start({"exec", "--key", "job-b", id, "--", "sh", "-c",
                        "echo before; while [ ! -e /workspace/gob ]; do sleep 0.1; done; "
                        "echo after"});
  ASSERT_TRUE(exec->ReadUntil("before\n", std::chrono::seconds(60)));
  me.Disconnect(*exec);
  pid_t broker = service->broker_pid();
  ASSERT_GT(broker, 0);
  ASSERT_EQ(kill(broker, SIGKILL), 0);
  // One read per turn, and the successor must be seen twice in a row: a single read once saw a
  // pid that was gone by the next one (on a loaded machine), and the test failed on that.
  pid_t next = -1;
  for (int i = 0, seen = 0; i < 300 && seen < 2; ++i) {
    pid_t now = service->broker_pid();
    seen = (now > 0 && now != broker && now == next) ? seen + 1 : (now > 0 && now != broker ? 1 : 0);
    next = now;
    if (seen < 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_GT(next, 0);
  ASSERT_NE(next, broker);
  std::string proc = ProcessId(me, id, "gob");
  WriteText(me.host_workspace() + "/gob", "");
  CliResult logs = me.Cli({"logs", "-f", "--from", "0", id, proc});
  EXPECT_EQ(logs.out, "before\nafter\n") << logs.err;
  CliResult fresh = me.Cli({"exec", id, "--", "echo", "new"});
  EXPECT_EQ(fresh.out, "new\n") << fresh.err;
  Remove(me, id);
}

INSTANTIATE_TEST_SUITE_P(Modes, DualDeploymentTest,
                         ::testing::Values(Mode::kHost, Mode::kDocker),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return info.param == Mode::kHost ? "Host" : "Docker";
                         });

// The container itself is as docker/compose.yaml makes it: uid 1000, the socket's group, no
// network, and exactly two bind mounts (the socket and the workspace), no Docker socket.
TEST(DockerContainerTest, HasOnlyTheSocketAndItsWorkspace) {
  if (engine == nullptr) GTEST_SKIP() << "Docker cannot run on this machine: " << docker_unavailable;
  CliResult mounts = engine->Docker(
      {"inspect", "--format", "{{range .Mounts}}{{.Source}} -> {{.Destination}};{{end}}", "paseo-a"});
  ASSERT_EQ(mounts.exit_code, 0) << mounts.err;
  // Two mounts, in either order.
  const std::string socket = service->socket() + " -> " + kSocketInContainer + ";";
  const std::string workspace = service->base() + "/ws-docker -> /workspace;";
  EXPECT_TRUE(Trim(mounts.out) == socket + workspace || Trim(mounts.out) == workspace + socket)
      << mounts.out;
  CliResult ids = engine->Docker({"exec", "paseo-a", "/bin/busybox", "id", "-u"});
  EXPECT_EQ(Trim(ids.out), "1000");
  CliResult groups = engine->Docker({"exec", "paseo-a", "/bin/busybox", "id", "-G"});
  EXPECT_TRUE(Trim(groups.out) == "1000 " + std::to_string(service->socket_gid()) ||
              Trim(groups.out) == std::to_string(service->socket_gid()) + " 1000")
      << groups.out;
  CliResult net = engine->Docker({"exec", "paseo-a", "/bin/busybox", "ls", "/sys/class/net"});
  EXPECT_EQ(Trim(net.out), "lo");
  CliResult sockets = engine->Docker(
      {"exec", "paseo-a", "/bin/busybox", "find", "/", "-path", "/proc", "-prune", "-o", "-path",
       "/sys", "-prune", "-o", "-type", "s", "-print"});
  EXPECT_EQ(Trim(sockets.out), kSocketInContainer);
}

// Why the official deployment socket-activates the socket: without it, a privhelper restart
// makes a new socket file, and a container that bind-mounted the old one is cut off
// (`Connection refused`) until it restarts (docker/README.md).
TEST(DockerSocketTest, WithoutSocketActivationTheContainerMustRestart) {
  if (engine == nullptr) GTEST_SKIP() << "Docker cannot run on this machine: " << docker_unavailable;
  Service plain(ServiceOptions{});  // makes its own socket file, as with no paseo-sandbox.socket
  CliResult run = engine->Docker(
      {"run", "-d", "--name", "paseo-plain", "--user", "1000:1000", "--group-add",
       std::to_string(plain.socket_gid()), "--network", "none", "-v",
       plain.socket() + ":" + kSocketInContainer, kImage, "/bin/busybox", "sleep", "1000000"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto info = [] { return engine->Docker({"exec", "paseo-plain", "/bin/paseo-sandbox", "info"}); };
  EXPECT_EQ(info().exit_code, 0) << info().err;
  plain.Crash();
  plain.Restart();
  CliResult cut_off = info();
  EXPECT_EQ(cut_off.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(cut_off.err, "Connection refused")) << cut_off.err;
  EXPECT_EQ(engine->Docker({"restart", "-t", "0", "paseo-plain"}).exit_code, 0);
  CliResult again = info();
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(engine->Docker({"rm", "-f", "paseo-plain"}).exit_code, 0);
  plain.Stop();
  EXPECT_EQ(plain.Leaks(), std::vector<std::string>{});
}

// docker/deployment.example.json is a deployment the privhelper loads as it is, beside this
// service's own helper.json and default profile.
TEST(DockerExampleTest, TheExampleDeploymentLoads) {
  const std::string dir = service->base() + "/example-config";
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir + "/deployments").c_str(), 0755), 0);
  ASSERT_EQ(mkdir((dir + "/profiles").c_str(), 0755), 0);
  WriteText(dir + "/helper.json", ReadFile(service->base() + "/etc/helper.json"));
  WriteText(dir + "/profiles/default.json", "{\"name\": \"default\"}");
  std::string example = ReadFile(Runfile("docker/deployment.example.json"));
  ASSERT_FALSE(example.empty());
  WriteText(dir + "/deployments/paseo-docker.json", example);
  CliResult check = RunArgv({service->base() + "/bin/paseo-sandbox-privhelper", "--config-dir", dir,
                             "--check-config"});
  EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
  EXPECT_TRUE(absl::StrContains(check.out, "configuration OK: 1 deployment(s)")) << check.out;
  RunArgv({"/bin/rm", "-rf", dir});
}

// docker/compose.yaml run as a file: Debian's docker-compose (1.29.2) builds docker/Dockerfile
// on a stand-in for Paseo's image (its PASEO_IMAGE build argument) and brings the file up,
// unchanged, against the private engine, with the host paths it names made in this test's own
// mount namespace (main: /srv/paseo and /run/paseo-sandbox are tmpfs mounts here) and
// docker/deployment.example.json registered as it is. Inside, as uid 1000, the CLI and the
// runtime work through the bind-mounted socket; `down` leaves no container, network or sandbox.
TEST(DockerComposeTest, TheComposeFileRunsAsItIs) {
  if (engine == nullptr) GTEST_SKIP() << "Docker cannot run on this machine: " << docker_unavailable;
  const std::string compose_bin = "/usr/bin/docker-compose";
  ASSERT_EQ(access(compose_bin.c_str(), X_OK), 0)
      << compose_bin << " is missing (installer/install-deps installs Debian's docker-compose)";
  // The socket where compose.yaml bind-mounts it from.
  ASSERT_EQ(mount(service->socket().c_str(), kSocketInContainer, nullptr, MS_BIND, nullptr), 0)
      << strerror(errno);

  // The project: compose.yaml and the Dockerfile byte for byte, the two static binaries beside.
  const std::string project = service->base() + "/compose-project";
  ASSERT_EQ(mkdir(project.c_str(), 0755), 0);
  const std::string compose_file = ReadFile(Runfile("docker/compose.yaml"));
  ASSERT_FALSE(compose_file.empty());
  WriteText(project + "/compose.yaml", compose_file);
  WriteText(project + "/Dockerfile", ReadFile(Runfile("docker/Dockerfile")));
  for (const auto& [from, name] :
       {std::pair<std::string, std::string>{service->base() + "/bin/paseo-sandbox", "paseo-sandbox"},
        {Runfile("runtime/paseo-sandbox-runtime"), "paseo-sandbox-runtime"}}) {
    CliResult cp = RunArgv({"/bin/cp", from, project + "/" + name});
    ASSERT_EQ(cp.exit_code, 0) << cp.err;
    ASSERT_EQ(chmod((project + "/" + name).c_str(), 0755), 0);
  }
  ASSERT_EQ(ReadFile(project + "/compose.yaml"), compose_file);

  // Paseo's image is not reachable from here: a stand-in with a shell and a long-running CMD.
  absl::Status standin = engine->BuildImage(
      "paseo-standin:test", {{"/bin/busybox", "/bin/busybox"}, {"/bin/busybox", "/bin/sh"}},
      {"/bin/busybox", "sleep", "1000000"});
  ASSERT_TRUE(standin.ok()) << standin.message();

  std::vector<std::string> env = engine->DockerEnv();
  env.insert(env.end(), {"DOCKER_HOST=" + engine->Host(), "PATH=/usr/bin:/bin",
                         "HOME=" + project, "COMPOSE_DOCKER_CLI_BUILD=0",
                         "PASEO_SANDBOX_GID=" + std::to_string(service->socket_gid())});
  auto compose = [&](const std::vector<std::string>& args,
                     std::chrono::milliseconds deadline = std::chrono::seconds(300)) {
    std::vector<std::string> argv = {compose_bin, "--project-name", "paseo", "--file",
                                     project + "/compose.yaml", "--project-directory", project};
    argv.insert(argv.end(), args.begin(), args.end());
    return RunArgv(argv, "", deadline, env);
  };
  CliResult build = compose({"build", "--build-arg", "PASEO_IMAGE=paseo-standin:test"});
  ASSERT_EQ(build.exit_code, 0) << build.out << build.err << engine->Log();
  CliResult up = compose({"up", "-d"});
  ASSERT_EQ(up.exit_code, 0) << up.out << up.err << engine->Log();
  // Its port is published as the file says (in this test's own network namespace).
  CliResult port = engine->Docker({"port", "paseo", "6767"});
  EXPECT_TRUE(absl::StrContains(port.out, ":6767")) << port.out << port.err;

  auto in_paseo = [&](const std::string& script, const std::string& arg = "") {
    return compose({"exec", "-T", "paseo", "/bin/sh", "-c", script, arg.empty() ? "-" : arg},
                   std::chrono::seconds(180));
  };
  // docker/README.md step 3: the example deployment, unchanged, and a reload (SIGHUP, as
  // `systemctl reload` sends). Removed again at the end: the matrix's own deployment for uid
  // 1000 is `docker`, and its info names that one alone.
  const std::string registered = service->base() + "/etc/deployments/paseo-docker.json";
  WriteText(registered, ReadFile(Runfile("docker/deployment.example.json")));
  ASSERT_EQ(kill(service->privhelper_pid(), SIGHUP), 0);
  CliResult info;
  for (int i = 0; i < 100; ++i) {
    info = in_paseo("paseo-sandbox info");
    if (absl::StrContains(info.out, "paseo-docker")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_TRUE(absl::StrContains(info.out, "your uid: 1000")) << info.out;
  EXPECT_TRUE(absl::StrContains(info.out, "paseo-docker")) << info.out;
  CliResult id = in_paseo("id -u; id -G");
  EXPECT_EQ(id.exit_code, 0) << id.err;
  EXPECT_TRUE(absl::StartsWith(id.out, "1000\n")) << id.out;
  EXPECT_TRUE(absl::StrContains(" " + id.out.substr(id.out.find('\n') + 1),
                                " " + std::to_string(service->socket_gid()) + " ") ||
              absl::EndsWith(id.out, " " + std::to_string(service->socket_gid()) + "\n"))
      << id.out;

  CliResult run = in_paseo(
      "paseo-sandbox run --workspace /workspace:rw -- sh -c 'id -u; echo from-compose > /workspace/made'");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "1000\n");
  EXPECT_EQ(ReadFile("/srv/paseo/workspace/made"), "from-compose\n");
  struct stat made = {};
  EXPECT_EQ(stat("/srv/paseo/workspace/made", &made), 0);
  EXPECT_EQ(made.st_uid, 1000u);

  // The runtime as Paseo's daemon runs it: describe, create over the container's /workspace,
  // exec (envelope on fd 3, events on fd 4), destroy. The deployment comes from the
  // environment compose.yaml sets.
  CliResult describe = in_paseo("paseo-sandbox-runtime describe </dev/null");
  EXPECT_EQ(describe.exit_code, 0) << describe.err;
  EXPECT_TRUE(absl::StrContains(describe.out, R"("protocolVersion":1)")) << describe.out;
  const std::string instance = R"("protocolVersion":1,"runtimeInstanceId":"compose-test")";
  CliResult create = in_paseo(
      "printf '%s\\n' \"$0\" | paseo-sandbox-runtime create --workspace-id compose-ws",
      "{" + instance + R"(,"input":{"workspaceId":"compose-ws","project":{"projectId":"p","source":{"kind":"directory","path":"/workspace"}},"placement":{"kind":"existing"}},"options":{}})");
  EXPECT_EQ(create.exit_code, 0) << create.err;
  EXPECT_TRUE(absl::StrContains(create.out, R"("lifecycle":"ready")")) << create.out;
  CliResult exec = in_paseo(
      // (pipes, as the daemon gives it: the runtime polls them; the events go to stderr)
      "printf '%s\\n' \"$0\" | { exec 3<&0; : | paseo-sandbox-runtime exec --workspace-id "
      "compose-ws 4>&2; echo \"exit $?\"; }",
      R"({"type":"spawn",)" + instance +
          R"(,"argv":["sh","-c","echo runtime-says; id -u"],"env":{"PATH":"/usr/bin:/bin"},"purpose":{"kind":"agent"},"options":{},"execId":"e-compose","stdio":{"kind":"pipes"}})");
  EXPECT_EQ(exec.exit_code, 0) << exec.err;
  EXPECT_EQ(exec.out, "runtime-says\n1000\nexit 0\n") << exec.err;
  EXPECT_TRUE(absl::StrContains(exec.err, R"("type":"exit")")) << exec.err;
  CliResult destroy = in_paseo(
      "printf '%s\\n' \"$0\" | paseo-sandbox-runtime destroy --workspace-id compose-ws",
      "{" + instance + R"(,"options":{}})");
  EXPECT_EQ(destroy.exit_code, 0) << destroy.err;

  CliResult down = compose({"down"});
  EXPECT_EQ(down.exit_code, 0) << down.out << down.err;
  CliResult left = engine->Docker({"ps", "-a", "--filter", "name=^paseo$", "--format", "{{.Names}}"});
  EXPECT_EQ(Trim(left.out), "") << "containers left after docker-compose down";
  CliResult networks = engine->Docker({"network", "ls", "--format", "{{.Name}}"});
  EXPECT_FALSE(absl::StrContains(networks.out, "paseo_default")) << networks.out;
  CliResult ps = service->Cli({1000, 1000, {1000, service->socket_gid()}}, {"--json", "ps"});
  EXPECT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_FALSE(absl::StrContains(ps.out, "paseo-docker")) << "sandboxes left after down: " << ps.out;
  engine->Docker({"rmi", "paseo-with-sandbox:latest", "paseo-standin:test"});
  umount2(kSocketInContainer, MNT_DETACH);
  unlink(registered.c_str());
  kill(service->privhelper_pid(), SIGHUP);
  for (int i = 0; i < 100; ++i) {
    if (!absl::StrContains(service->Cli({1000, 1000, {1000, service->socket_gid()}}, {"info"}).out,
                           "paseo-docker"))
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Starts the engine, builds the image and runs the two Paseo containers; on failure the docker
// half is skipped with the reason. Torn down before the service stops (and its leaks are
// checked).
class DockerEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    auto started = DockerEngine::Start();
    if (!started.ok()) {
      docker_unavailable = std::string(started.status().message());
      std::fprintf(stderr, "docker_test: the Docker half is skipped: %s\n",
                   docker_unavailable.c_str());
      return;
    }
    engine_ = std::move(*started);
    absl::Status built = engine_->BuildImage(
        kImage, {{service->base() + "/bin/paseo-sandbox", "/bin/paseo-sandbox"},
                 {"/bin/busybox", "/bin/busybox"},
                 {"/bin/busybox", "/bin/sh"}});
    ASSERT_TRUE(built.ok()) << built.message();
    for (const auto& [name, uid, deployment, root] :
         {std::tuple<std::string, int, std::string, std::string>{"paseo-a", 1000, "docker",
                                                                  "/ws-docker"},
          {"paseo-b", 1001, "docker-b", "/ws-docker-b"}}) {
      // As docker/compose.yaml: uid 1000 (1001 for the second deployment), the socket's group by
      // number, no network, no capabilities, the socket and the workspace and nothing else.
      CliResult run = engine_->Docker(
          {"run", "-d", "--name", name, "--user", std::to_string(uid) + ":" + std::to_string(uid),
           "--group-add", std::to_string(service->socket_gid()), "--network", "none",
           "--cap-drop", "ALL", "--security-opt", "no-new-privileges", "-e", "PASEO_SANDBOX_DEPLOYMENT=" + deployment, "-v",
           service->socket() + ":" + kSocketInContainer, "-v",
           service->base() + root + ":/workspace", kImage, "/bin/busybox", "sleep", "1000000"});
      ASSERT_EQ(run.exit_code, 0) << run.err << engine_->Log();
    }
    engine = engine_.get();
  }
  void TearDown() override {
    engine = nullptr;
    if (engine_ == nullptr) return;
    // Removes the containers, stops dockerd, removes its data: nothing may be left.
    EXPECT_EQ(engine_->Stop(), std::vector<std::string>{});
    engine_.reset();
  }

 private:
  std::unique_ptr<DockerEngine> engine_;
};

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  using namespace paseo::testing;
  ServiceOptions options;
  // Item 7 needs sandboxes to survive a supervisor restart, and the Docker clients the socket
  // file to survive it (as installer/systemd/paseo-sandbox.socket does).
  options.helper_json_extra = ", \"onRestart\": \"keep\"";
  options.socket_activation = true;
  // A second Docker deployment (uid 1001, its own root, also seen as /workspace). For the
  // compose test, the host paths docker/compose.yaml names, made before the privhelper starts
  // (it resolves workspaces in a copy of this mount namespace): /srv and /run/paseo-sandbox
  // are tmpfs mounts of this process's own namespace.
  options.before_start = [](const std::string& base) {
    Check(mount("tmpfs", "/srv", "tmpfs", 0, "mode=0755,size=64m") == 0, "tmpfs on /srv");
    for (const char* d : {"/srv/paseo", "/srv/paseo/workspace", "/srv/paseo/home"})
      Check(mkdir(d, 0755) == 0, std::string("mkdir ") + d);
    for (const char* d : {"/srv/paseo/workspace", "/srv/paseo/home"})
      Check(chown(d, 1000, 1000) == 0, std::string("chown ") + d);
    made_run_dir = mkdir("/run/paseo-sandbox", 0755) == 0;
    Check(mount("tmpfs", "/run/paseo-sandbox", "tmpfs", 0, "mode=0755,size=1m") == 0,
          "tmpfs on /run/paseo-sandbox");
    WriteText(kSocketInContainer, "");  // the socket's bind mount point
    Check(mkdir((base + "/ws-docker-b").c_str(), 0755) == 0 &&
              chown((base + "/ws-docker-b").c_str(), 1001, 1001) == 0,
          "mkdir ws-docker-b");
    WriteText(base + "/etc/deployments/docker-b.json",
              "{\"id\": \"docker-b\", \"allowedUids\": [1001], \"workspaceRoots\": [{\"hostPath\": \"" +
                  base + "/ws-docker-b\", \"clientPath\": \"/workspace\"}], \"runAs\": {\"uid\": "
                  "1001, \"gid\": 1001}}");
  };
  ::testing::AddGlobalTestEnvironment(new DockerEnvironment());
  int rc = RunTestsWithOwnService(argc, argv, options, &service);
  // The directory made on the host's /run (our tmpfs over it goes with this namespace).
  umount2("/run/paseo-sandbox", MNT_DETACH);
  if (made_run_dir) rmdir("/run/paseo-sandbox");
  return rc;
}
