// Full service restart (privhelper and broker both killed, as by a crash): a new privhelper
// joins the pinned control network namespace, finds the sandboxes the old one left, and
// applies the restart policy; stale bundles and cgroups are collected.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

Identity Alpha(const Service& svc) { return {4242, 4242, {4242, svc.socket_gid()}}; }

// Leaves a sandbox running a long command and returns its id.
std::string KeepOne(const Service& svc) {
  auto r = svc.Cli(Alpha(svc), {"run", "--keep", "--workspace",
                                svc.base() + "/ws-alpha:/workspace:rw", "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto pos = r.err.find("sb-");
  return pos == std::string::npos ? "" : r.err.substr(pos, 27);
}

// A bundle a crash mid-create would leave: files and an empty staging dir, no container.
void PlantStaleBundle(const Service& svc) {
  std::string stale = svc.base() + "/state/bundles/sb-000000000000000000000000";
  ASSERT_EQ(mkdir(stale.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((stale + "/mounts").c_str(), 0700), 0);
  ASSERT_EQ(mkdir((stale + "/mounts/0").c_str(), 0700), 0);
  std::ofstream(stale + "/config.json") << "{}";
}

TEST(RestartTest, KeepPolicyAdoptsRunningSandboxesAndReattachesTheirSpawners) {
  ServiceOptions options;
  options.helper_json_extra = ", \"onRestart\": \"keep\"";
  Service svc(options);
  std::string id = KeepOne(svc);
  ASSERT_FALSE(id.empty());
  svc.Crash();
  PlantStaleBundle(svc);
  svc.Restart();

  auto ps = svc.Cli(Alpha(svc), {"--json", "ps"});
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_TRUE(absl::StrContains(ps.out, id)) << ps.out;
  // Its spawner took the new privhelper's channel: a sandbox whose processes are back is running
  // (running-unattached is for one whose spawner could not be reattached).
  EXPECT_TRUE(absl::StrContains(ps.out, "\"state\":\"running\"")) << ps.out;
  // The sandbox still works: a new process runs in it, with its workspace.
  auto exec = svc.Cli(Alpha(svc), {"exec", id, "--", "sh", "-c",
                                   "echo after-restart > /workspace/after && cat /workspace/after"});
  EXPECT_EQ(exec.exit_code, 0) << exec.err;
  EXPECT_EQ(exec.out, "after-restart\n");
  unlink((svc.base() + "/ws-alpha/after").c_str());
  auto rm = svc.Cli(Alpha(svc), {"rm", id});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{}) << "stale bundle or sandbox left";
  svc.Stop();
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

// The sandbox's state and reason in `ps --json` (the CLI as Alpha), polled until it is no longer
// running or `seconds` pass.
std::string StateOf(const Service& svc, const std::string& id, int seconds = 0) {
  std::string found;
  for (int waited = 0;; waited += 100) {
    auto ps = svc.Cli(Alpha(svc), {"--json", "ps"}, std::chrono::seconds(30));
    auto at = ps.out.find("\"id\":\"" + id + "\"");
    found = at == std::string::npos
                ? "(not listed)"
                : ps.out.substr(at, ps.out.find(",\"createdAt", at) - at);
    if (!absl::StrContains(found, "\"state\":\"running") || waited >= seconds * 1000) return found;
    usleep(100000);
  }
}

// Keep: a sandbox whose sentry died while no privhelper ran is adopted as stopped (not as
// running); one adopted running is watched like any other, so its later death is seen too.
TEST(RestartTest, KeepAdoptsASandboxThatDiedMeanwhileAsStopped) {
  ServiceOptions options;
  options.helper_json_extra = ", \"onRestart\": \"keep\"";
  Service svc(options);
  std::string dead = KeepOne(svc), alive = KeepOne(svc);
  ASSERT_FALSE(dead.empty());
  ASSERT_FALSE(alive.empty());
  svc.Crash();
  pid_t sentry = svc.SandboxProcess("runsc-sandbox", dead);
  ASSERT_GT(sentry, 0);
  ASSERT_EQ(kill(sentry, SIGKILL), 0);
  for (int i = 0; i < 100 && svc.SandboxProcess("runsc-sandbox", dead) > 0; ++i) usleep(50000);
  svc.Restart();

  const std::string why = "it had stopped when the privhelper restarted";
  EXPECT_TRUE(absl::StrContains(StateOf(svc, dead),
                                "\"state\":\"stopped\",\"stateReason\":\"" + why + "\""))
      << StateOf(svc, dead);
  EXPECT_TRUE(absl::StrContains(StateOf(svc, alive), "\"state\":\"running\""))
      << StateOf(svc, alive);
  auto exec = svc.Cli(Alpha(svc), {"exec", dead, "--", "true"}, std::chrono::seconds(30));
  EXPECT_EQ(exec.exit_code, 125) << exec.err;
  EXPECT_TRUE(absl::StrContains(exec.err, "is stopped: " + why)) << exec.err;

  sentry = svc.SandboxProcess("runsc-sandbox", alive);
  ASSERT_GT(sentry, 0);
  ASSERT_EQ(kill(sentry, SIGKILL), 0);
  std::string state = StateOf(svc, alive, 20);
  EXPECT_TRUE(absl::StrContains(
      state, "\"state\":\"stopped\",\"stateReason\":\"its gVisor kernel (runsc-sandbox) exited"))
      << state;
  for (const auto& id : {dead, alive}) {
    auto rm = svc.Cli(Alpha(svc), {"rm", id}, std::chrono::seconds(30));
    EXPECT_EQ(rm.exit_code, 0) << rm.err;
  }
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  svc.Stop();
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

TEST(RestartTest, KillPolicyDestroysWhatTheOldServiceLeft) {
  Service svc(ServiceOptions{});  // default policy: kill
  std::string id = KeepOne(svc);
  ASSERT_FALSE(id.empty());
  svc.Crash();
  // The pin keeps the control netns alive while no privhelper runs.
  EXPECT_TRUE(absl::StrContains(ReadFile("/proc/self/mountinfo"), svc.base() + "/run/control-netns"));
  PlantStaleBundle(svc);
  svc.Restart();
  auto ps = svc.Cli(Alpha(svc), {"ps"});
  EXPECT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_FALSE(absl::StrContains(ps.out, id)) << ps.out;
  // Destroying runs in the background of the start-up; give it a moment.
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  svc.Stop();
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

// The unit's stop signal (KillSignal=SIGUSR2, systemctl stop and restart) stops per onRestart:
// under keep the sandbox stays running, with the control netns pinned, for the next start to
// adopt; under kill it is a clean stop that deletes it, like SIGTERM.
TEST(RestartTest, TheUnitsStopSignalKeepsSandboxesOnlyUnderKeep) {
  {
    ServiceOptions options;
    options.helper_json_extra = ", \"onRestart\": \"keep\"";
    Service svc(options);
    std::string id = KeepOne(svc);
    ASSERT_FALSE(id.empty());
    int status = svc.Stop(SIGUSR2);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_TRUE(absl::StrContains(svc.Log(), "shutting down: SIGUSR2 (onRestart keep: 1 sandbox(es) kept"))
        << svc.Log();
    EXPECT_GT(svc.SandboxProcess("runsc-sandbox", id), 0) << "the kept sandbox's sentry is gone";
    svc.Restart();
    EXPECT_TRUE(absl::StrContains(StateOf(svc, id), "\"state\":\"running\"")) << StateOf(svc, id);
    auto exec = svc.Cli(Alpha(svc), {"exec", id, "--", "true"}, std::chrono::seconds(30));
    EXPECT_EQ(exec.exit_code, 0) << exec.err;
    auto rm = svc.Cli(Alpha(svc), {"rm", id}, std::chrono::seconds(30));
    EXPECT_EQ(rm.exit_code, 0) << rm.err;
    svc.Stop();
    EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  }
  {
    Service svc(ServiceOptions{});  // default policy: kill
    std::string id = KeepOne(svc);
    ASSERT_FALSE(id.empty());
    int status = svc.Stop(SIGUSR2);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    EXPECT_EQ(svc.SandboxProcess("runsc-sandbox", id), -1) << "a sandbox outlived a stop under kill";
    EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
  }
}

// On-demand garbage collection: what a crash could leave while the service keeps running
// (a bundle no sandbox owns, a cgroup no sandbox owns) goes when an operator asks.
TEST(RestartTest, AdminGcCollectsWhatNoSandboxOwns) {
  Service svc(ServiceOptions{});
  PlantStaleBundle(svc);
  std::string cgroup = "/sys/fs/cgroup/pids/" + svc.CgroupParent() + "/sb-111111111111111111111111";
  ASSERT_EQ(mkdir(("/sys/fs/cgroup/pids/" + svc.CgroupParent()).c_str(), 0755) == 0 || errno == EEXIST,
            true);
  ASSERT_EQ(mkdir(cgroup.c_str(), 0755), 0);
  std::string id = KeepOne(svc);  // a live sandbox, which GC must leave alone
  ASSERT_FALSE(id.empty());
  std::string admin = std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") +
                      "/admin/paseo-sandbox-admin";
  std::string cmd = admin + " gc --run-dir " + svc.base() + "/run --config-dir " + svc.base() + "/etc";
  ASSERT_EQ(system(cmd.c_str()), 0);
  // Everything left must belong to the live sandbox.
  auto foreign = [&] {
    std::vector<std::string> out;
    for (const auto& l : svc.Leaks()) {
      bool mine = absl::StrContains(l, id);
      if (absl::StartsWith(l, "process ")) {
        mine = absl::StrContains(ReadFile("/proc/" + l.substr(8) + "/cmdline"), id);
      }
      if (!mine) out.push_back(l);
    }
    return out;
  };
  std::vector<std::string> leaks;
  for (int i = 0; i < 100; ++i) {
    leaks = foreign();
    if (leaks.empty()) break;
    usleep(50000);
  }
  EXPECT_EQ(leaks, std::vector<std::string>{});
  auto exec = svc.Cli(Alpha(svc), {"exec", id, "--", "true"});
  EXPECT_EQ(exec.exit_code, 0) << "GC touched a live sandbox: " << exec.err;
  EXPECT_EQ(svc.Cli(Alpha(svc), {"rm", id}).exit_code, 0);
  svc.Stop();
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

// systemd Type=notify: READY=1 arrives on NOTIFY_SOCKET once the client socket is served.
TEST(RestartTest, NotifiesSystemdWhenReady) {
  int notify = -1;
  ServiceOptions options;
  options.before_start = [&notify](const std::string& base) {
    notify = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    std::string path = base + "/notify";
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    ASSERT_EQ(bind(notify, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    setenv("NOTIFY_SOCKET", path.c_str(), 1);
  };
  Service svc(options);
  unsetenv("NOTIFY_SOCKET");
  ASSERT_GE(notify, 0);
  pollfd p = {notify, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 5000), 1) << "no sd_notify message";
  char buf[512] = {};
  ssize_t n = recv(notify, buf, sizeof(buf) - 1, 0);
  ASSERT_GT(n, 0);
  EXPECT_TRUE(absl::StrContains(buf, "READY=1")) << buf;
  EXPECT_TRUE(absl::StrContains(buf, svc.socket())) << buf;
  svc.Stop();
  close(notify);
}

// Socket activation (installer/systemd/paseo-sandbox.socket): the privhelper serves the socket
// systemd passes, the file stays the same inode across restarts (a Docker container's bind
// mount of it keeps working: testing/docker_test.cc) and is never removed by the privhelper;
// a passed socket that is not root:<socketGroup> 0660 is refused and nothing is served.
TEST(RestartTest, ASocketFromSystemdIsServedKeptAndChecked) {
  ServiceOptions options;
  options.socket_activation = true;
  options.wait_for_socket = false;  // the socket accepts from the start: wait for the broker
  Service svc(options);
  auto serving = [&svc] {
    for (int i = 0; i < 200 && svc.broker_pid() <= 0; ++i) usleep(50000);
    return svc.broker_pid() > 0;
  };
  ASSERT_TRUE(serving()) << svc.Log();
  struct stat first, second;
  ASSERT_EQ(stat(svc.socket().c_str(), &first), 0);
  EXPECT_EQ(svc.Cli(Alpha(svc), {"info"}).exit_code, 0);
  svc.Crash();
  svc.Restart();
  ASSERT_TRUE(serving()) << svc.Log();
  ASSERT_EQ(stat(svc.socket().c_str(), &second), 0);
  EXPECT_EQ(first.st_ino, second.st_ino) << "the socket file was made again";
  auto info = svc.Cli(Alpha(svc), {"info"});
  EXPECT_EQ(info.exit_code, 0) << info.err;
  EXPECT_TRUE(absl::StrContains(svc.Log(), "serving the socket systemd passed")) << svc.Log();
  int stopped = svc.Stop();
  EXPECT_TRUE(WIFEXITED(stopped) && WEXITSTATUS(stopped) == 0) << stopped;
  EXPECT_EQ(access(svc.socket().c_str(), F_OK), 0) << "the privhelper removed systemd's socket";

  // Not what the privhelper would make itself: refused at start.
  struct Mutation {
    const char* what;
    std::function<int()> apply, undo;
  };
  const std::string path = svc.socket();
  const gid_t group = svc.socket_gid();
  for (const Mutation& m :
       {Mutation{"mode 0666", [&] { return chmod(path.c_str(), 0666); },
                 [&] { return chmod(path.c_str(), 0660); }},
        Mutation{"group 0", [&] { return chown(path.c_str(), 0, 0); },
                 [&] { return chown(path.c_str(), 0, group); }}}) {
    ASSERT_EQ(m.apply(), 0) << m.what;
    svc.Restart();
    const std::string stat_file = "/proc/" + std::to_string(svc.privhelper_pid()) + "/stat";
    // Until it has exited by itself (a zombie): then Stop reaps it and returns how it ended.
    for (int i = 0; i < 600 && !absl::StrContains(ReadFile(stat_file), ") Z "); ++i) usleep(50000);
    int status = svc.Stop();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << m.what << ": " << status;
    EXPECT_TRUE(absl::StrContains(svc.Log(), "the socket systemd made must be root:")) << svc.Log();
    ASSERT_EQ(m.undo(), 0) << m.what;
  }
  EXPECT_EQ(svc.LeaksAfter(10), std::vector<std::string>{});
}

}  // namespace
}  // namespace paseo::testing
