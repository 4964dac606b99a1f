// See harness.h.
#include "testing/harness.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "gtest/gtest.h"

namespace paseo::testing {

Service& Service::Get() {
  static Service* service = new Service(ServiceOptions{});
  return *service;
}

Service::Service(ServiceOptions options) : options_(std::move(options)) { Start(); }

Service::~Service() {
  Stop();
  RemoveWorkArea();
}

void Service::RemoveWorkArea() {
  if (base_.empty()) return;
  umount2(base_.c_str(), MNT_DETACH);
  rmdir(base_.c_str());
}

void Service::Start() {
  if (geteuid() != 0) Die("the integration suites need root");
  passwd* pw = getpwnam("paseo-sandbox");
  group* gr = getgrnam("paseo-sandbox");
  if (pw == nullptr || gr == nullptr)
    Die("user and group paseo-sandbox must exist (testing/run-tests creates them)");
  broker_uid_ = pw->pw_uid;
  socket_gid_ = gr->gr_gid;

  // Our own mount and network namespaces, once per test process: nothing we mount is visible
  // to the host, and the service (and the runsc control netns it makes inside) never touches
  // the host's network.
  static bool isolated = [] {
    Check(unshare(CLONE_NEWNS | CLONE_NEWNET) == 0, "unshare(CLONE_NEWNS|CLONE_NEWNET)");
    Check(mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0, "make / private");
    LoopbackUp();
    return true;
  }();
  (void)isolated;

  char templ[] = "/tmp/paseo-it.XXXXXX";
  Check(mkdtemp(templ) != nullptr, "mkdtemp");
  base_ = templ;
  Check(mount("tmpfs", base_.c_str(), "tmpfs", 0, "mode=0755,size=512m") == 0, "mount tmpfs");
  for (const char* d : {"/bin", "/etc", "/etc/deployments", "/etc/profiles", "/state", "/run",
                        "/ws-alpha", "/ws-beta", "/outside", "/creds", "/creds/tokens", "/ws-docker",
                        "/ws-docker/proj", "/ws-io"}) {
    Check(mkdir((base_ + d).c_str(), 0755) == 0, std::string("mkdir ") + d);
  }
  Check(chown((base_ + "/ws-alpha").c_str(), 4242, 4242) == 0, "chown ws-alpha");
  Check(chown((base_ + "/ws-beta").c_str(), 4343, 4343) == 0, "chown ws-beta");
  Check(chown((base_ + "/ws-docker/proj").c_str(), 1000, 1000) == 0, "chown ws-docker/proj");
  Check(chown((base_ + "/ws-io").c_str(), 4242, 4242) == 0, "chown ws-io");
  // Binaries must be executable by the broker user and the test uids: copy them out of
  // Bazel's runfiles (which live under root's 0700 home).
  CopyExecutable(Runfile("privhelper/paseo-sandbox-privhelper"),
                 base_ + "/bin/paseo-sandbox-privhelper");
  CopyExecutable(Runfile(options_.broker_runfile.empty() ? "broker/paseo-sandbox-broker"
                                                         : options_.broker_runfile),
                 base_ + "/bin/paseo-sandbox-broker");
  CopyExecutable(Runfile("client/paseo-sandbox"), base_ + "/bin/paseo-sandbox");
  CopyExecutable(Runfile("sandbox/paseo-sandbox-shim"), base_ + "/bin/paseo-sandbox-shim");
  std::string version =
      Capture("bash " + Runfile("rootfs/build-rootfs") + " --out " + base_ + "/state/rootfs");
  std::string sha = Capture("sha256sum /usr/bin/runsc | cut -c1-64");

  WriteText(base_ + "/etc/helper.json",
            "{\"stateDir\": \"" + base_ + "/state\", \"runDir\": \"" + base_ +
                "/run\", \"runsc\": {\"sha256\": \"" + sha + "\"}, \"rootfsVersion\": \"" +
                version + "\", \"cgroupParent\": \"/" + CgroupParent() + "\"" +
                options_.helper_json_extra + "}");
  WriteText(base_ + "/creds/tokens/token", "s3cret-token\n");
  // World-writable on the host, so only the read-only mount can stop an agent's write.
  Check(chmod((base_ + "/creds/tokens/token").c_str(), 0666) == 0, "chmod token");
  WriteText(base_ + "/etc/deployments/alpha.json",
            "{\"id\": \"alpha\", \"allowedUids\": [4242], \"workspaceRoots\": [{\"hostPath\": \"" +
                base_ + "/ws-alpha\"}], \"credentialRoots\": [{\"name\": \"tokens\", \"hostPath\": \"" +
                base_ + "/creds/tokens\"}]}");
  // For suites that drive the API in-process as root: agents still run as 4242. Its first
  // profile keeps 256 MiB per stream, its second the default 8 MiB.
  WriteText(base_ + "/etc/deployments/io.json",
            "{\"id\": \"io\", \"allowedUids\": [0], \"workspaceRoots\": [{\"hostPath\": \"" +
                base_ + "/ws-io\"}], \"runAs\": {\"uid\": 4242, \"gid\": 4242}, "
                "\"profiles\": [\"big\", \"default\", \"small\"], \"maxSandboxes\": 64}");
  // A memory-limited sandbox, for out-of-memory tests.
  WriteText(base_ + "/etc/profiles/small.json",
            "{\"name\": \"small\", \"memoryLimitBytes\": 167772160}");
  WriteText(base_ + "/etc/profiles/big.json",
            "{\"name\": \"big\", \"outputBufferBytes\": 268435456}");
  // Paseo's Docker image: uid 1000 in a container that sees the root as /workspace.
  WriteText(base_ + "/etc/deployments/docker.json",
            "{\"id\": \"docker\", \"allowedUids\": [1000], \"workspaceRoots\": [{\"hostPath\": \"" +
                base_ + "/ws-docker\", \"clientPath\": \"/workspace\"}], \"runAs\": {\"uid\": 1000, "
                "\"gid\": 1000}}");
  WriteText(base_ + "/etc/profiles/default.json",
            "{\"name\": \"default\", \"credentials\": [{\"name\": \"tokens\", "
            "\"destination\": \"/credentials/tokens\"}]}");
  WriteText(base_ + "/etc/deployments/beta.json",
            "{\"id\": \"beta\", \"allowedUids\": [4343], \"workspaceRoots\": [{\"hostPath\": \"" +
                base_ + "/ws-beta\"}]}");

  if (options_.before_start) options_.before_start(base_);
  Launch();
}

void Service::Launch() {
  std::string log = base_ + "/privhelper.log";
  pid_t pid = fork();
  Check(pid >= 0, "fork");
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    std::vector<std::string> args = {base_ + "/bin/paseo-sandbox-privhelper", "--config-dir",
                                     base_ + "/etc"};
    args.insert(args.end(), options_.privhelper_args.begin(), options_.privhelper_args.end());
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(a.data());
    cargs.push_back(nullptr);
    execv(cargs[0], cargs.data());
    _exit(127);
  }
  privhelper_pid_ = pid;
  if (!options_.wait_for_socket) return;
  for (int i = 0; i < 200 && !CanConnect(socket()); ++i) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) Die("privhelper exited: " + ReadFile(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!CanConnect(socket())) Die("privhelper did not serve its socket: " + ReadFile(log));
}

CliResult Service::Cli(const Identity& who, const std::vector<std::string>& args) const {
  int out[2], err[2];
  Check(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0, "pipe2");
  std::vector<std::string> argv = {base_ + "/bin/paseo-sandbox", "--socket", socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = fork();
  Check(pid >= 0, "fork");
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    if (chdir(base_.c_str()) != 0) _exit(126);
    if (setgroups(who.groups.size(), who.groups.data()) != 0 || setresgid(who.gid, who.gid, who.gid) != 0 ||
        setresuid(who.uid, who.uid, who.uid) != 0)
      _exit(126);
    char* envp[] = {nullptr};
    execve(cargv[0], cargv.data(), envp);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  CliResult result;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  // Bounded: a CLI that hangs is killed, and its result says so, instead of hanging the suite.
  constexpr int kCliSeconds = 120;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(kCliSeconds);
  bool killed = false;
  while (open_fds > 0) {
    int ready = poll(fds, 2, 100);
    if ((ready < 0 && errno != EINTR) || (ready <= 0 && killed)) break;
    if (!killed && std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      killed = true;
      result.err += "\n[harness: the CLI ran " + std::to_string(kCliSeconds) + " s; killed]\n";
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      ssize_t n = read(fds[i].fd, buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else {
        (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  int status = 0;
  WaitPidWithin(pid, 10, &status);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

int Service::Stop() {
  if (privhelper_pid_ <= 0) return -1;
  kill(privhelper_pid_, SIGTERM);
  int status = -1;
  if (!WaitPidWithin(privhelper_pid_, 120, &status))
    std::fprintf(stderr, "the privhelper did not stop within 120 s of SIGTERM: killed\n");
  privhelper_pid_ = -1;
  RemoveCgroupParent();
  return status;
}

void Service::RemoveCgroupParent() const {
  // Our parent cgroups are empty once every sandbox is gone (rmdir refuses otherwise).
  for (const auto& hierarchy : ListDir("/sys/fs/cgroup"))
    rmdir(("/sys/fs/cgroup/" + hierarchy + "/" + CgroupParent()).c_str());
}

void Service::Crash() {
  if (privhelper_pid_ <= 0) return;
  kill(privhelper_pid_, SIGKILL);
  waitpid(privhelper_pid_, nullptr, 0);
  privhelper_pid_ = -1;
  // The broker ends when its helper socket closes; wait until nothing serves the socket.
  for (int i = 0; i < 100 && CanConnect(socket()); ++i) usleep(50000);
}

void Service::Restart() { Launch(); }

std::string Service::Log() const { return ReadFile(base_ + "/privhelper.log"); }

pid_t Service::broker_pid() const {
  for (pid_t pid : ChildrenOf(privhelper_pid_)) {
    if (ReadFile("/proc/" + std::to_string(pid) + "/cmdline").find("broker") != std::string::npos)
      return pid;
  }
  return -1;
}

std::vector<std::string> Service::Leaks() const {
  std::vector<std::string> leaks;
  for (const auto& n : ListDir(bundles())) leaks.push_back("bundle " + n);
  for (const auto& n : ListDir(runsc_root())) leaks.push_back("runsc state " + n);
  for (const auto& hierarchy : ListDir("/sys/fs/cgroup")) {
    std::string parent = "/sys/fs/cgroup/" + hierarchy + "/" + CgroupParent();
    for (const auto& n : ListDir(parent)) {
      if (n.rfind("sb-", 0) == 0) leaks.push_back("cgroup " + parent + "/" + n);
    }
  }
  // Staging mounts live in the privhelper's private mount namespace; once it has exited,
  // that namespace (and anything left in it) is gone, so look there while it runs.
  std::string mountinfo = privhelper_pid_ > 0
                              ? "/proc/" + std::to_string(privhelper_pid_) + "/mountinfo"
                              : "/proc/self/mountinfo";
  std::istringstream mounts(ReadFile(mountinfo));
  for (std::string line; std::getline(mounts, line);) {
    std::istringstream fields(line);
    std::string id, parent, devs, root, point;
    fields >> id >> parent >> devs >> root >> point;
    // The pinned control netns is expected while the service runs (and must go when it stops).
    if (privhelper_pid_ > 0 && point == base_ + "/run/control-netns") continue;
    if (point.rfind(base_ + "/", 0) == 0) leaks.push_back("mount " + point);
  }
  for (const auto& n : ListDir("/proc")) {
    if (n.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = ReadFile("/proc/" + n + "/cmdline");
    if (cmdline.find(runsc_root()) != std::string::npos) leaks.push_back("process " + n);
  }
  return leaks;
}

int RunTestsWithSharedService(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  signal(SIGPIPE, SIG_IGN);
  Service::Get();
  int rc = RUN_ALL_TESTS();
  auto& svc = Service::Get();
  svc.Stop();
  auto leaks = svc.Leaks();
  for (const auto& l : leaks) std::fprintf(stderr, "leak after shutdown: %s\n", l.c_str());
  svc.RemoveWorkArea();
  return rc != 0 || !leaks.empty() ? 1 : 0;
}

}  // namespace paseo::testing
