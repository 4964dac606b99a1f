// paseo-sandbox-admin against a real service: a deployment added to a running service serves
// its uid without a restart while another deployment's sandbox keeps running; a removed one
// refuses its uid; a malformed file is refused with nothing changed (by the admin, and by the
// privhelper's own reload if it is put there by hand); doctor is all green on a good setup and
// names a runsc hash mismatch on a bad one; status shows the service and its sandboxes.
#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "testing/harness.h"

namespace paseo::testing {
namespace {

Service* g_service = nullptr;

constexpr uid_t kGammaUid = 4545;

Identity Alpha(const Service& svc) { return {4242, 4242, {4242, svc.socket_gid()}}; }
Identity Gamma(const Service& svc) { return {kGammaUid, kGammaUid, {kGammaUid, svc.socket_gid()}}; }

std::string ReadFd(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  off_t off = 0;
  while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return out;
}

// Runs paseo-sandbox-admin as root with the service's --config-dir; bounded.
CliResult Admin(const std::vector<std::string>& args) {
  const Service& svc = *g_service;
  // Before the command: a --config-dir among `args` comes later and wins.
  std::vector<std::string> argv = {Runfile("admin/paseo-sandbox-admin"),
                                   "--config-dir=" + svc.base() + "/etc"};
  argv.insert(argv.end(), args.begin(), args.end());
  int out = memfd_create("admin-out", MFD_CLOEXEC);
  int err = memfd_create("admin-err", MFD_CLOEXEC);
  int in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  pid_t pid = SpawnStdio(argv, in, out, err, {"PATH=/usr/bin:/bin"});
  close(in);
  int status = 0;
  CliResult r;
  r.exit_code = WaitPidWithin(pid, 120, &status) && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadFd(out);
  r.err = ReadFd(err);
  close(out);
  close(err);
  return r;
}

std::string Generation(const Service& svc) { return ReadFile(svc.base() + "/run/config-generation"); }

std::string KeepAlphaSandbox(const Service& svc) {
  auto r = svc.Cli(Alpha(svc), {"run", "--keep", "--workspace",
                                svc.base() + "/ws-alpha:/workspace:rw", "--", "true"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  auto pos = r.err.find("sb-");
  return pos == std::string::npos ? "" : r.err.substr(pos, 27);
}

CliResult RunAsGamma(const Service& svc) {
  return svc.Cli(Gamma(svc), {"run", "--workspace", svc.base() + "/ws-gamma:/workspace:rw", "--",
                              "sh", "-c", "echo gamma-ran > /workspace/out && cat /workspace/out"});
}

TEST(AdminTest, AddedDeploymentServesItsUidWithoutARestartAndRemoveRefusesIt) {
  Service& svc = *g_service;
  std::string ws = svc.base() + "/ws-gamma";
  ASSERT_EQ(mkdir(ws.c_str(), 0755), 0);
  ASSERT_EQ(chown(ws.c_str(), kGammaUid, kGammaUid), 0);
  std::string alpha = KeepAlphaSandbox(svc);
  ASSERT_FALSE(alpha.empty());
  pid_t sentry = svc.SandboxProcess("runsc-sandbox", alpha);
  ASSERT_GT(sentry, 0);
  pid_t privhelper = svc.privhelper_pid();
  pid_t broker = svc.broker_pid();

  CliResult before = RunAsGamma(svc);
  EXPECT_NE(before.exit_code, 0) << before.out;
  EXPECT_TRUE(absl::StrContains(before.err, "you may use 0 deployments")) << before.err;

  CliResult added = Admin({"deployment", "add", "gamma", "--allow-uid", "4545", "--workspace-root",
                           ws, "--run-as", "4545:4545"});
  ASSERT_EQ(added.exit_code, 0) << added.out << added.err;
  EXPECT_TRUE(absl::StrContains(added.out, "wrote " + svc.base() + "/etc/deployments/gamma.json"))
      << added.out;
  EXPECT_TRUE(absl::StrContains(added.out, "reloaded it (config generation 2)")) << added.out;
  EXPECT_EQ(Generation(svc), "2 applied\n");
  struct stat st;
  ASSERT_EQ(stat((svc.base() + "/etc/deployments/gamma.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0644u);

  // The broker was restarted for its new policy (the privhelper was not).
  EXPECT_NE(svc.broker_pid(), broker);
  CliResult after = RunAsGamma(svc);
  EXPECT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.out, "gamma-ran\n");
  // No restart: the same privhelper, and alpha's sandbox is the same running sandbox.
  EXPECT_EQ(kill(privhelper, 0), 0);
  EXPECT_EQ(svc.privhelper_pid(), privhelper);
  EXPECT_EQ(svc.SandboxProcess("runsc-sandbox", alpha), sentry);
  CliResult ps = svc.Cli(Alpha(svc), {"--json", "ps"});
  ASSERT_EQ(ps.exit_code, 0) << ps.err;
  EXPECT_TRUE(absl::StrContains(ps.out, alpha)) << ps.out;
  EXPECT_TRUE(absl::StrContains(ps.out, "\"state\":\"running\"")) << ps.out;
  CliResult exec = svc.Cli(Alpha(svc), {"exec", alpha, "--", "echo", "alpha-still-works"});
  EXPECT_EQ(exec.exit_code, 0) << exec.err;
  EXPECT_EQ(exec.out, "alpha-still-works\n");

  // An id that exists is changed only with --replace (here: the same deployment with a
  // different bound, applied the same way).
  CliResult again = Admin({"deployment", "add", "gamma", "--allow-uid", "4545", "--workspace-root",
                           ws, "--run-as", "4545:4545", "--max-sandboxes", "2"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(again.err, "deployment \"gamma\" exists")) << again.err;
  EXPECT_TRUE(absl::StrContains(again.err, "--replace")) << again.err;
  CliResult replaced = Admin({"deployment", "add", "gamma", "--allow-uid", "4545",
                              "--workspace-root", ws, "--run-as", "4545:4545", "--max-sandboxes",
                              "2", "--replace"});
  EXPECT_EQ(replaced.exit_code, 0) << replaced.err;
  EXPECT_TRUE(absl::StrContains(replaced.out, "replaced ")) << replaced.out;
  EXPECT_TRUE(absl::StrContains(ReadFile(svc.base() + "/etc/deployments/gamma.json"),
                                "\"maxSandboxes\": 2"));
  EXPECT_EQ(RunAsGamma(svc).exit_code, 0);

  CliResult list = Admin({"deployment", "list"});
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_TRUE(absl::StrContains(list.out, "gamma uids=4545 gids= roots=" + ws)) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "alpha uids=4242")) << list.out;
  EXPECT_TRUE(absl::StrContains(list.out, "sandboxes=1")) << list.out;

  // Removing a deployment that has a sandbox is refused (its owner would lose it).
  CliResult refused = Admin({"deployment", "remove", "alpha"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(refused.err, "has 1 sandbox(es) (" + alpha)) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "--force")) << refused.err;

  CliResult removed = Admin({"deployment", "remove", "gamma"});
  ASSERT_EQ(removed.exit_code, 0) << removed.out << removed.err;
  EXPECT_TRUE(absl::StrContains(removed.out, "reloaded it (config generation 4)")) << removed.out;
  EXPECT_NE(access((svc.base() + "/etc/deployments/gamma.json").c_str(), F_OK), 0);
  CliResult gone = RunAsGamma(svc);
  EXPECT_NE(gone.exit_code, 0) << gone.out;
  EXPECT_TRUE(absl::StrContains(gone.err, "you may use 0 deployments")) << gone.err;
  EXPECT_EQ(svc.SandboxProcess("runsc-sandbox", alpha), sentry);

  EXPECT_EQ(svc.Cli(Alpha(svc), {"rm", alpha}).exit_code, 0);
}

// Regression (review of issue 15): sandboxes a forced remove leaves running are authorized by
// deployment id, so re-adding the id for other users would hand them over. That takes
// --adopt-sandboxes; without it the add is refused and nothing changes.
TEST(AdminTest, ReaddingARemovedDeploymentWithLiveSandboxesNeedsAdopt) {
  Service& svc = *g_service;
  std::string ws = svc.base() + "/ws-delta";
  ASSERT_EQ(mkdir(ws.c_str(), 0777), 0);
  ASSERT_EQ(chmod(ws.c_str(), 0777), 0);
  ASSERT_EQ(Admin({"deployment", "add", "delta", "--allow-uid", "4646", "--workspace-root", ws,
                   "--run-as", "4646:4646"}).exit_code, 0);
  Identity first{4646, 4646, {4646, svc.socket_gid()}};
  Identity second{4747, 4747, {4747, svc.socket_gid()}};
  auto r = svc.Cli(first, {"run", "--keep", "--workspace", ws + ":/workspace:rw", "--", "true"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string id = r.err.substr(r.err.find("sb-"), 27);
  CliResult removed = Admin({"deployment", "remove", "delta", "--force"});
  ASSERT_EQ(removed.exit_code, 0) << removed.err;
  EXPECT_TRUE(absl::StrContains(removed.out, "1 sandbox(es) keep running")) << removed.out;

  CliResult refused = Admin({"deployment", "add", "delta", "--allow-uid", "4747",
                             "--workspace-root", ws, "--run-as", "4747:4747"});
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_TRUE(absl::StrContains(refused.err, "sandboxes of a removed deployment \"delta\" still run (" + id))
      << refused.err;
  EXPECT_NE(access((svc.base() + "/etc/deployments/delta.json").c_str(), F_OK), 0);
  EXPECT_FALSE(absl::StrContains(svc.Cli(second, {"--json", "ps"}).out, id));

  CliResult adopted = Admin({"deployment", "add", "delta", "--allow-uid", "4747",
                             "--workspace-root", ws, "--run-as", "4747:4747", "--adopt-sandboxes"});
  ASSERT_EQ(adopted.exit_code, 0) << adopted.err;
  EXPECT_TRUE(absl::StrContains(svc.Cli(second, {"--json", "ps"}).out, id));
  EXPECT_EQ(svc.Cli(second, {"rm", id}).exit_code, 0);
  EXPECT_EQ(Admin({"deployment", "remove", "delta"}).exit_code, 0);
}

TEST(AdminTest, AMalformedDeploymentIsRefusedAndNothingChanges) {
  Service& svc = *g_service;
  std::string listing = absl::StrCat(ListDir(svc.base() + "/etc/deployments").size());
  std::string generation = Generation(svc);
  std::string bad = svc.base() + "/bad-deployment.json";
  WriteText(bad, R"({"id": "delta", "allowedUids": [4646], "workspaceRoots": [{"hostPath": "ws"}]})");
  CliResult r = Admin({"deployment", "add", "--from-file", bad});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "refused, nothing changed")) << r.err;
  EXPECT_TRUE(absl::StrContains(r.err, svc.base() + "/etc/deployments/delta.json: "
                                                    "workspaceRoots[0].hostPath"))
      << r.err;
  EXPECT_EQ(absl::StrCat(ListDir(svc.base() + "/etc/deployments").size()), listing);
  EXPECT_EQ(Generation(svc), generation);  // the service was not even signalled

  CliResult unknown = Admin({"deployment", "add", "delta", "--allow-uid", "4646",
                             "--workspace-root", svc.base() + "/ws-alpha", "--profile", "nope"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(unknown.err, "unknown launch profile \"nope\"")) << unknown.err;
  EXPECT_EQ(Generation(svc), generation);
}

// The privhelper checks a reload itself: a bad file put in the config dir by hand is refused,
// logged, and the running configuration stays.
TEST(AdminTest, ThePrivhelperRefusesABadReloadAndKeepsServing) {
  Service& svc = *g_service;
  std::string planted = svc.base() + "/etc/deployments/planted.json";
  WriteText(planted, R"({"id": "planted", "allowedUids": [4242]})");
  CliResult gc = Admin({"gc"});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_TRUE(absl::StrContains(gc.out, "its config reload was refused")) << gc.out;
  std::string generation = Generation(svc);
  EXPECT_TRUE(absl::StrContains(generation, " refused: ")) << generation;
  EXPECT_TRUE(absl::StrContains(generation, "planted.json")) << generation;
  EXPECT_TRUE(absl::StrContains(svc.Log(), "reload refused, the running configuration stays"));
  CliResult ps = svc.Cli(Alpha(svc), {"ps"});
  EXPECT_EQ(ps.exit_code, 0) << ps.err;
  CliResult status = Admin({"status"});
  EXPECT_TRUE(absl::StrContains(status.out, "refused")) << status.out;
  CliResult doctor = Admin({"doctor", "--no-probe"});
  EXPECT_EQ(doctor.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(doctor.out, "FAIL config: ")) << doctor.out;
  ASSERT_EQ(unlink(planted.c_str()), 0);
  // The config is the running one again: a gc applies it without restarting the broker (its
  // clients stay connected).
  pid_t broker = svc.broker_pid();
  ASSERT_GT(broker, 0);
  CliResult again = Admin({"gc"});
  EXPECT_EQ(again.exit_code, 0) << again.err;
  EXPECT_FALSE(absl::StrContains(again.out, "refused")) << again.out;
  EXPECT_TRUE(absl::StrContains(Generation(svc), " applied")) << Generation(svc);
  EXPECT_EQ(svc.broker_pid(), broker);
  EXPECT_TRUE(absl::StrContains(svc.Log(), "configuration unchanged"));
}

TEST(AdminTest, DoctorIsAllGreenOnTheRunningService) {
  Service& svc = *g_service;
  CliResult r = Admin({"doctor", "--user", "paseo-sandbox"});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(absl::StrContains(r.out, "FAIL")) << r.out;
  for (const char* check : {"ok   kernel: ", "ok   config: ", "ok   runsc: ",
                            "ok   platform: ",
                            "ok   cgroup: ", "ok   service: ", "ok   socket: ",
                            "ok   user paseo-sandbox: in group paseo-sandbox; allowed by ops",
                            "ok   rootfs: ", "ok   disk: "})
    EXPECT_TRUE(absl::StrContains(r.out, check)) << check << "\n" << r.out;
  // The platform doctor probes is the one the running privhelper chose.
  std::string log = svc.Log();
  size_t at = log.find("runsc platform: ");
  ASSERT_NE(at, std::string::npos) << log;
  std::string platform = log.substr(at + 16, log.find(' ', at + 16) - (at + 16));
  EXPECT_TRUE(absl::StrContains(r.out, "runsc --platform=" + platform + " started a sandbox")) << r.out;
  // It names the runsc version, and why this platform: for a measured "auto", the figures.
  EXPECT_TRUE(absl::StrContains(r.out, "; runsc version 0.0~")) << r.out;
  if (absl::StrContains(log, "runsc.platform auto: measured")) {
    EXPECT_TRUE(absl::StrContains(r.out, "ok   platform: " + platform +
                                             " (runsc.platform auto: measured faster on this host, "))
        << r.out;
  }
}

// Regression (review of issue 15): doctor's platform probe ran `runsc do` in the caller's network
// namespace, where the probe sandbox's unauthenticated control socket (abstract, bound by
// runsc) could be reached by any local user and told to run commands as root in a sandbox
// whose root is the host's. The probe now runs in a network namespace of its own: while
// doctor runs, no runsc socket ever appears in this one.
TEST(AdminTest, DoctorsProbeSandboxIsUnreachableFromTheHostNamespace) {
  std::atomic<bool> done{false};
  std::atomic<int> seen{0};
  std::atomic<int> polls{0};
  std::thread watcher([&] {
    while (!done.load()) {
      std::string unix_sockets = ReadFile("/proc/net/unix");
      if (absl::StrContains(unix_sockets, "runsc")) seen.fetch_add(1);
      polls.fetch_add(1);
      usleep(500);
    }
  });
  CliResult r = Admin({"doctor"});
  done = true;
  watcher.join();
  EXPECT_TRUE(absl::StrContains(r.out, "ok   platform: ")) << r.out << r.err;
  EXPECT_GT(polls.load(), 10);
  EXPECT_EQ(seen.load(), 0) << "a runsc control socket appeared in the host's network namespace";
}

// Broken case on the real binary: a config dir pinning another runsc digest.
TEST(AdminTest, DoctorNamesARunscHashMismatchAndItsFix) {
  Service& svc = *g_service;
  std::string copy = svc.base() + "/etc-wrong-pin";
  ASSERT_EQ(system(("cp -a " + svc.base() + "/etc " + copy).c_str()), 0);
  std::string helper = ReadFile(copy + "/helper.json");
  size_t at = helper.find("\"sha256\": \"");
  ASSERT_NE(at, std::string::npos);
  std::string real = helper.substr(at + 11, 64);
  helper.replace(at + 11, 64, std::string(64, 'a'));
  WriteText(copy + "/helper.json", helper);
  const std::string args[] = {"doctor", "--no-probe", "--config-dir=" + copy};
  CliResult r = Admin({args[0], args[1], args[2]});  // the later --config-dir wins
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(absl::StrContains(r.out, "FAIL runsc: " + RunscPath() + ": sha256 " + real +
                                           " does not match the pinned " + std::string(64, 'a')))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "fix: if this runsc is the one you trust")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.err, "check(s) failed")) << r.err;
  system(("rm -rf " + copy).c_str());
}

TEST(AdminTest, StatusShowsTheServiceAndSandboxesPerDeployment) {
  Service& svc = *g_service;
  std::string alpha = KeepAlphaSandbox(svc);
  ASSERT_FALSE(alpha.empty());
  CliResult r = Admin({"status"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(absl::StrContains(r.out, absl::StrCat("service: privhelper ", svc.privhelper_pid(),
                                                    " runs, broker ")))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "deployment alpha: 1 sandbox(es)\n  " + alpha + " uid 4242"))
      << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "deployment beta: 0 sandbox(es)")) << r.out;
  EXPECT_TRUE(absl::StrContains(r.out, "MiB of output logs under " + svc.base() + "/state/broker"))
      << r.out;
  EXPECT_EQ(svc.Cli(Alpha(svc), {"rm", alpha}).exit_code, 0);
}

}  // namespace
}  // namespace paseo::testing

int main(int argc, char** argv) {
  paseo::testing::ServiceOptions options;
  // doctor's free-space check wants 1 GiB on the state dir (a tmpfs here: only a limit).
  options.tmpfs_size = "2g";
  options.before_start = [](const std::string& base) {
    // For doctor --user: the broker's own user is in the socket group; a deployment allows it.
    passwd* pw = getpwnam("paseo-sandbox");
    paseo::testing::WriteText(
        base + "/etc/deployments/ops.json",
        absl::StrCat("{\"id\": \"ops\", \"allowedUids\": [", pw != nullptr ? pw->pw_uid : 1,
                     "], \"workspaceRoots\": [{\"hostPath\": \"", base, "/ws-alpha\"}]}"));
  };
  return paseo::testing::RunTestsWithOwnService(argc, argv, options, &paseo::testing::g_service);
}
