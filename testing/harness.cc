// See harness.h.
#include "testing/harness.h"

#include <fcntl.h>
#include <net/if.h>
#include <grp.h>
#include <poll.h>
#include <pwd.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/spawn.h"
#include "gtest/gtest.h"
#include "privhelper/network/firewall.h"

namespace paseo::testing {

namespace {

// A suite's `_runsc_exec` twin (defs.bzl service_test, both_process_paths) runs every process
// through runsc exec: the same tests cover both ways a process starts.
std::string SpawnerSwitch() {
  const char* path = getenv("PASEO_TEST_PROCESS_PATH");
  return path != nullptr && std::string(path) == "runsc-exec" ? ", \"spawner\": false" : "";
}

}  // namespace

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
  if (activation_fd_ >= 0) close(activation_fd_);
  activation_fd_ = -1;
  if (base_.empty()) return;
  const char* outputs = getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  const ::testing::UnitTest* gtest = ::testing::UnitTest::GetInstance();
  std::string log = Log();  // empty once the work area is gone (a second call)
  if (outputs != nullptr && !log.empty() &&
      (keep_log_ || gtest->failed_test_count() > 0 ||
       (gtest->current_test_info() != nullptr && ::testing::Test::HasFailure()))) {
    std::string name = base_.substr(base_.rfind('/') + 1);
    WriteText(std::string(outputs) + "/" + name + "-privhelper.log", log);
  }
  umount2(base_.c_str(), MNT_DETACH);
  rmdir(base_.c_str());
}

void Service::Start() {
  if (geteuid() != 0) Die("the integration suites and the bench need root");
  const std::string runsc = options_.runsc_path.empty() ? RunscPath() : options_.runsc_path;
  const std::string platform =
      options_.runsc_platform.empty() ? RunscPlatform() : options_.runsc_platform;
  if (access(runsc.c_str(), X_OK) != 0)
    Die(runsc + " is missing (installer/install-deps installs the pinned runsc)");
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
  Check(mount("tmpfs", base_.c_str(), "tmpfs", 0, ("mode=0755,size=" + options_.tmpfs_size).c_str()) == 0,
        "mount tmpfs");
  for (const char* d : {"/bin", "/etc", "/etc/deployments", "/etc/profiles", "/state", "/run",
                        "/ws-alpha", "/ws-beta", "/outside", "/creds", "/creds/tokens", "/ws-docker",
                        "/ws-docker/proj", "/ws-io", "/ws-shared", "/creds/locked"}) {
    Check(mkdir((base_ + d).c_str(), 0755) == 0, std::string("mkdir ") + d);
  }
  Check(chown((base_ + "/ws-alpha").c_str(), 4242, 4242) == 0, "chown ws-alpha");
  Check(chown((base_ + "/ws-beta").c_str(), 4343, 4343) == 0, "chown ws-beta");
  Check(chown((base_ + "/ws-docker/proj").c_str(), 1000, 1000) == 0, "chown ws-docker/proj");
  // The in-process clients of deployment "io" are uid 0, which the privhelper judges by the
  // mode bits like any uid (privhelper/peer_access.h): they write to ws-io through group 0.
  Check(chown((base_ + "/ws-io").c_str(), 4242, 0) == 0 && chmod((base_ + "/ws-io").c_str(), 0775) == 0,
        "chown ws-io");
  // A root shared by several clients (its owner 2101, and 2102), for the suites that check
  // the privhelper gives only what a client could open itself.
  Check(chown((base_ + "/ws-shared").c_str(), 2101, 2101) == 0, "chown ws-shared");
  // A credential root only root may enter: credentials are granted by the deployment, not by
  // the client's own permissions, so it is still mounted.
  Check(chmod((base_ + "/creds/locked").c_str(), 0700) == 0, "chmod creds/locked");
  // Binaries must be executable by the broker user and the test uids: copy them out of
  // Bazel's runfiles (which live under root's 0700 home).
  CopyExecutable(Runfile("privhelper/paseo-sandbox-privhelper"),
                 base_ + "/bin/paseo-sandbox-privhelper");
  CopyExecutable(Runfile(options_.broker_runfile.empty() ? "broker/paseo-sandbox-broker"
                                                         : options_.broker_runfile),
                 base_ + "/bin/paseo-sandbox-broker");
  CopyExecutable(Runfile("egress/paseo-sandbox-egress"), base_ + "/bin/paseo-sandbox-egress");
  CopyExecutable(Runfile("client/paseo-sandbox"), base_ + "/bin/paseo-sandbox");
  CopyExecutable(Runfile("sandbox/paseo-sandbox-shim"), base_ + "/bin/paseo-sandbox-shim");
  rootfs_version_ =
      Capture("bash " + Runfile("rootfs/build-rootfs") + " --out " + base_ + "/state/rootfs");
  if (!options_.extra_rootfs.empty()) {
    std::string at = base_ + "/state/rootfs/" + extra_rootfs_version();
    Check(access((options_.extra_rootfs + "/rootfs").c_str(), F_OK) == 0,
          options_.extra_rootfs + "/rootfs does not exist (build it with rootfs/build-rootfs)");
    Check(mkdir(at.c_str(), 0755) == 0, "mkdir " + at);
    Check(mount(options_.extra_rootfs.c_str(), at.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
              mount(nullptr, at.c_str(), nullptr, MS_BIND | MS_REMOUNT | MS_RDONLY, nullptr) == 0,
          "bind " + options_.extra_rootfs);
  }
  std::string sha = Capture("sha256sum " + runsc + " | cut -c1-64");

  WriteText(base_ + "/etc/helper.json",
            "{\"stateDir\": \"" + base_ + "/state\", \"runDir\": \"" + base_ +
                "/run\", \"runsc\": {\"path\": \"" + runsc + "\", \"sha256\": \"" + sha +
                "\", \"platform\": \"" + platform + "\"}, \"rootfsVersion\": \"" +
                rootfs_version_ + "\", \"cgroupParent\": \"/" + CgroupParent() + "\"" +
                SpawnerSwitch() + options_.helper_json_extra + "}");
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
  WriteText(base_ + "/etc/deployments/shared.json",
            "{\"id\": \"shared\", \"allowedUids\": [2101, 2102], \"workspaceRoots\": [{\"hostPath\": \"" +
                base_ + "/ws-shared\"}], \"credentialRoots\": [{\"name\": \"tokens\", \"hostPath\": \"" +
                base_ + "/creds/locked\"}]}");
  WriteText(base_ + "/etc/deployments/beta.json",
            "{\"id\": \"beta\", \"allowedUids\": [4343], \"workspaceRoots\": [{\"hostPath\": \"" +
                base_ + "/ws-beta\"}]}");

  // With runsc.platform "auto", a privhelper's first start on a host measures systrap against
  // ptrace (privhelper/runsc_probe.h), about 10 s. One test run measures once: the first
  // service's record is kept at $PASEO_RUNSC_PROBE_RECORD (run-tests sets it) and every later
  // service starts from a copy, so the suites all run on what auto chose, through its code.
  if (!options_.fresh_runsc_probe) SeedRunscProbe();
  if (options_.before_start) options_.before_start(base_);
  if (options_.socket_activation) {
    // What systemd makes from paseo-sandbox.socket: root:<socket group> 0660, listening.
    std::string path = socket();
    sockaddr_un addr = {};
    addr.sun_family = AF_UNIX;
    Check(path.size() < sizeof(addr.sun_path), "socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    activation_fd_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    Check(activation_fd_ >= 0, "socket");
    Check(bind(activation_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
              chown(path.c_str(), 0, socket_gid_) == 0 && chmod(path.c_str(), 0660) == 0 &&
              listen(activation_fd_, 128) == 0,
          "bind/chown/chmod/listen " + path);
  }
  Launch();
}

void Service::Launch() {
  std::string log = base_ + "/privhelper.log";
  int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  Check(fd >= 0, "open " + log);
  std::vector<std::string> args = {base_ + "/bin/paseo-sandbox-privhelper", "--config-dir",
                                   base_ + "/etc"};
  args.insert(args.end(), options_.privhelper_args.begin(), options_.privhelper_args.end());
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.push_back(*e);
  pid_t pid;
  if (activation_fd_ >= 0) {
    // LISTEN_PID must be the privhelper's own pid: a shell learns it ($$) and execs it.
    env.push_back("LISTEN_FDS=1");
    SpawnRequest request;
    request.path = "/bin/sh";
    request.argv = {"/bin/sh", "-c", "LISTEN_PID=$$ exec \"$0\" \"$@\""};
    request.argv.insert(request.argv.end(), args.begin(), args.end());
    request.env = env;
    request.fds = {{0, STDIN_FILENO}, {1, fd}, {2, fd}, {3, activation_fd_}};
    auto spawned = Spawn(request);
    if (!spawned.ok()) Die(std::string(spawned.status().message()));
    pid = *spawned;
  } else {
    pid = SpawnStdio(args, STDIN_FILENO, fd, fd, env);
  }
  close(fd);
  privhelper_pid_ = pid;
  if (!options_.wait_for_socket) return;
  // The privhelper listens on the socket before it starts the broker: wait for both, so that
  // broker_pid() is the broker as soon as this returns.
  auto ready = [this] { return CanConnect(socket()) && broker_pid() > 0; };
  // 60 s: a first start on a host measures the platform (about 10 s, more on a loaded one).
  for (int i = 0; i < 1200 && !ready(); ++i) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) Die("privhelper exited: " + ReadFile(log));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (!ready()) Die("privhelper did not serve its socket with a broker: " + ReadFile(log));
  KeepRunscProbe();
}

std::string Service::Platform() const {
  const std::string platform =
      options_.runsc_platform.empty() ? RunscPlatform() : options_.runsc_platform;
  if (platform != "auto") return platform;
  std::istringstream record(ReadFile(base_ + "/state/runsc-probe"));
  for (std::string line; std::getline(record, line);)
    if (line.rfind("platform ", 0) == 0) return line.substr(9);
  return "";
}

void Service::SeedRunscProbe() {
  const char* shared = getenv("PASEO_RUNSC_PROBE_RECORD");
  if (shared == nullptr || *shared == 0 || access(shared, R_OK) != 0) return;
  WriteText(base_ + "/state/runsc-probe", ReadFile(shared));
}

void Service::KeepRunscProbe() {
  const char* shared = getenv("PASEO_RUNSC_PROBE_RECORD");
  std::string mine = base_ + "/state/runsc-probe";
  if (shared == nullptr || *shared == 0 || access(shared, F_OK) == 0 || access(mine.c_str(), R_OK) != 0)
    return;
  std::string tmp = std::string(shared) + ".new." + std::to_string(getpid());
  WriteText(tmp, ReadFile(mine));
  rename(tmp.c_str(), shared);
}

CliResult Service::Cli(const Identity& who, const std::vector<std::string>& args) const {
  // Bounded, so a CLI that hangs fails its test instead of hanging the suite.
  return Cli(who, args, std::chrono::seconds(120));
}

CliResult Service::Cli(const Identity& who, const std::vector<std::string>& args,
                       std::chrono::milliseconds deadline) const {
  using Clock = std::chrono::steady_clock;
  const bool bounded = deadline != std::chrono::milliseconds::max();
  const Clock::time_point end = bounded ? Clock::now() + deadline : Clock::time_point::max();
  int out[2], err[2];
  Check(pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0, "pipe2");
  std::vector<std::string> argv = {base_ + "/bin/paseo-sandbox", "--socket", socket()};
  argv.insert(argv.end(), args.begin(), args.end());
  pid_t pid = SpawnStdio(argv, STDIN_FILENO, out[1], err[1], {}, [this, &who] {
    if (chdir(base_.c_str()) != 0) return errno;
    if (setgroups(who.groups.size(), who.groups.data()) != 0 ||
        setresgid(who.gid, who.gid, who.gid) != 0 || setresuid(who.uid, who.uid, who.uid) != 0)
      return errno;
    return 0;
  });
  close(out[1]);
  close(err[1]);
  CliResult result;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open_fds = 2;
  char buf[65536];
  bool killed = false;
  while (open_fds > 0) {
    int timeout_ms = -1;
    if (bounded) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      if (left.count() <= 0) {
        kill(pid, SIGKILL);  // its pipe ends close with it: the CLI has no children
        killed = true;
        for (auto& f : fds) {
          if (f.fd >= 0) close(f.fd);
        }
        break;
      }
      timeout_ms = static_cast<int>(std::min<int64_t>(left.count(), 1000));
    }
    if (poll(fds, 2, timeout_ms) < 0 && errno != EINTR) break;
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
  int status = WaitPid(pid);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (killed) {
    result.exit_code = -1;
    result.err += "(killed at the deadline)";
  }
  return result;
}

int Service::Stop(int signal) {
  if (privhelper_pid_ <= 0) return -1;
  kill(privhelper_pid_, signal);
  int status = -1;
  pid_t done = 0;
  for (int i = 0; i < 6000; ++i) {
    done = waitpid(privhelper_pid_, &status, WNOHANG);
    if (done != 0 && !(done < 0 && errno == EINTR)) break;
    usleep(10000);
  }
  if (done == 0) {
    std::fprintf(stderr, "privhelper did not stop in 60 s; killing it\n");
    kill(privhelper_pid_, SIGKILL);
    status = WaitPid(privhelper_pid_);
  }
  privhelper_pid_ = -1;
  RemoveCgroupParent();
  return status;
}

void Service::RemoveCgroupParent() const {
  // Our parent cgroups are empty once every sandbox is gone (rmdir refuses otherwise).
  RemoveCgroup("/" + CgroupParent());
}

void Service::Crash() {
  if (privhelper_pid_ <= 0) return;
  pid_t broker = broker_pid();
  kill(privhelper_pid_, SIGKILL);
  WaitPid(privhelper_pid_);
  privhelper_pid_ = -1;
  // The broker ends when its helper socket closes; wait until nothing serves the socket (with
  // socket activation the socket always accepts: wait for the broker itself to be gone).
  if (activation_fd_ >= 0) {
    const std::string cmdline = "/proc/" + std::to_string(broker) + "/cmdline";
    for (int i = 0; i < 100 && broker > 0 && !ReadFile(cmdline).empty(); ++i) usleep(50000);
    return;
  }
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

pid_t Service::SandboxProcess(const std::string& kind, const std::string& id) const {
  std::vector<pid_t> found;
  for (pid_t pid : PidsMatching(kind)) {
    std::string cmd = Cmdline(pid);
    // Its own runsc root and bundle: not another service's sandbox, nor a stub's text.
    if (cmd.rfind(kind, 0) == 0 && cmd.find(runsc_root()) != std::string::npos &&
        cmd.find(bundles() + "/" + id) != std::string::npos)
      found.push_back(pid);
  }
  return found.size() == 1 ? found[0] : -1;
}

std::vector<std::string> Service::LeaksAfter(int seconds) const {
  std::vector<std::string> leaks = Leaks();
  for (int i = 0; i < seconds * 10 && !leaks.empty(); ++i) {
    usleep(100000);
    leaks = Leaks();
  }
  return leaks;
}

std::string Service::extra_rootfs_version() const {
  const std::string& dir = options_.extra_rootfs;
  return dir.empty() ? "" : dir.substr(dir.rfind('/') + 1);
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
    if (!options_.extra_rootfs.empty() &&
        point == base_ + "/state/rootfs/" + extra_rootfs_version())
      continue;
    if (point.rfind(base_ + "/", 0) == 0) leaks.push_back("mount " + point);
  }
  for (pid_t pid : PidsMatching(runsc_root())) leaks.push_back("process " + std::to_string(pid));
  // Sandbox networks: namespace pins, host ends of veth pairs in this (the privhelper's host)
  // namespace, and firewall chains; the table itself once the service has stopped.
  for (const auto& n : ListDir(base_ + "/run/netns")) leaks.push_back("netns " + n);
  if (struct if_nameindex* links = if_nameindex()) {
    for (struct if_nameindex* l = links; l->if_index != 0; ++l) {
      if (std::strncmp(l->if_name, "psb-", 4) == 0) leaks.push_back(std::string("link ") + l->if_name);
    }
    if_freenameindex(links);
  }
  std::string listing;
  if (network::RunNft("list table inet paseo_sandbox\n", &listing).ok()) {
    for (const auto& tag : network::SandboxTagsIn(listing)) leaks.push_back("nft chain sb_" + tag);
    if (privhelper_pid_ <= 0) leaks.push_back("nft table inet paseo_sandbox");
  }
  return leaks;
}

namespace {

// Runs the tests on `svc`, stops it and fails if anything leaked.
int RunTestsOn(Service& svc) {
  int rc = RUN_ALL_TESTS();
  svc.Stop();
  auto leaks = svc.Leaks();
  for (const auto& l : leaks) std::fprintf(stderr, "leak after shutdown: %s\n", l.c_str());
  svc.RemoveWorkArea();
  return rc != 0 || !leaks.empty() ? 1 : 0;
}

}  // namespace

int RunTestsWithSharedService(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  signal(SIGPIPE, SIG_IGN);
  return RunTestsOn(Service::Get());
}

int RunTestsWithOwnService(int argc, char** argv, ServiceOptions options, Service** service) {
  ::testing::InitGoogleTest(&argc, argv);
  signal(SIGPIPE, SIG_IGN);
  // Made before any thread exists (the first service unshares namespaces for the process).
  *service = new Service(std::move(options));
  return RunTestsOn(**service);
}

std::string AgentRootfsFromEnv(const std::string& suite) {
  const char* rootfs = getenv("PASEO_AGENT_ROOTFS");
  if (rootfs != nullptr && *rootfs != '\0') return rootfs;
  std::fprintf(stderr,
               "%s: PASEO_AGENT_ROOTFS must name a built agent rootfs version (<out>/<version>); "
               "testing/run-tests builds one with rootfs/build-rootfs --profile agent\n",
               suite.c_str());
  return "";
}

}  // namespace paseo::testing
