// See docker_engine.h.
#include "testing/docker_engine.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace paseo::testing {

namespace {

using Clock = std::chrono::steady_clock;

// Reads what is available on `fds` (stdout, stderr) into `result`; -1 marks an ended stream.
// False once both have ended.
bool ReadStreams(int fds[2], CliResult& result, int timeout_ms) {
  pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
  if (fds[0] < 0 && fds[1] < 0) return false;
  if (poll(p, 2, timeout_ms) < 0 && errno != EINTR) return false;
  char buf[65536];
  for (int i = 0; i < 2; ++i) {
    if (fds[i] < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
    ssize_t n = read(fds[i], buf, sizeof(buf));
    if (n <= 0) {
      close(fds[i]);
      fds[i] = -1;
    } else {
      (i == 0 ? result.out : result.err).append(buf, static_cast<size_t>(n));
    }
  }
  return fds[0] >= 0 || fds[1] >= 0;
}

int ExitCode(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : "..." + text.substr(text.size() - bytes);
}

}  // namespace

RunningCommand::RunningCommand(const std::vector<std::string>& argv,
                               const std::vector<std::string>& env,
                               std::function<int()> in_child) {
  int in[2], out[2], err[2];
  Check(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0 && pipe2(err, O_CLOEXEC) == 0,
        "pipe2");
  pid_ = SpawnStdio(argv, in[0], out[1], err[1], env, std::move(in_child));
  close(in[0]);
  close(out[1]);
  close(err[1]);
  in_ = in[1];
  fds_[0] = out[0];
  fds_[1] = err[0];
}

RunningCommand::~RunningCommand() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    WaitPid(pid_);
  }
  CloseInput();
  for (int& fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

void RunningCommand::Write(const std::string& bytes) {
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = write(in_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // it stopped reading: what it got is what the test sees
    done += static_cast<size_t>(n);
  }
}

void RunningCommand::CloseInput() {
  if (in_ >= 0) close(in_);
  in_ = -1;
}

bool RunningCommand::ReadSome(int timeout_ms) { return ReadStreams(fds_, result_, timeout_ms); }

bool RunningCommand::ReadUntil(const std::string& needle, std::chrono::milliseconds deadline) {
  const auto end = Clock::now() + deadline;
  while (!absl::StrContains(result_.out, needle)) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0 || !ReadSome(static_cast<int>(std::min<int64_t>(left.count(), 200))))
      return absl::StrContains(result_.out, needle);
  }
  return true;
}

CliResult RunningCommand::Finish(std::chrono::milliseconds deadline) {
  CloseInput();
  const auto end = Clock::now() + deadline;
  bool killed = false;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
    if (left.count() <= 0) {
      kill(pid_, SIGKILL);
      killed = true;
      break;
    }
    if (!ReadSome(static_cast<int>(std::min<int64_t>(left.count(), 200)))) break;
  }
  result_.exit_code = ExitCode(WaitPid(pid_));
  pid_ = -1;
  if (killed) {
    result_.exit_code = -1;
    result_.err += "(killed at the deadline)";
  }
  return result_;
}

CliResult RunArgv(const std::vector<std::string>& argv, const std::string& input,
                  std::chrono::milliseconds deadline, const std::vector<std::string>& env) {
  RunningCommand command(argv, env);
  // Small inputs (all the tests send) fit the pipe: no writer thread needed.
  command.Write(input);
  return command.Finish(deadline);
}

absl::StatusOr<std::unique_ptr<DockerEngine>> DockerEngine::Start() {
  std::unique_ptr<DockerEngine> engine(new DockerEngine());
  absl::Status st = engine->Launch();
  if (!st.ok()) return st;  // the destructor cleans up what Launch made
  return engine;
}

absl::Status DockerEngine::Launch() {
  // $PASEO_TEST_DOCKERD names another dockerd (a run can show the skip path with a missing one).
  const char* override_path = getenv("PASEO_TEST_DOCKERD");
  std::string dockerd = override_path != nullptr && *override_path != '\0' ? override_path : "";
  for (const char* candidate : {"/usr/sbin/dockerd", "/usr/bin/dockerd"}) {
    if (dockerd.empty() && access(candidate, X_OK) == 0) dockerd = candidate;
  }
  if (dockerd.empty() || access(dockerd.c_str(), X_OK) != 0)
    return absl::UnavailableError(absl::StrCat(
        "dockerd is not installed", dockerd.empty() ? "" : " at " + dockerd,
        " (Debian's docker.io; installer/install-deps installs it unless "
        "PASEO_SKIP_DOCKER_INSTALL=1)"));
  // Debian's CLI, which speaks the daemon's API version; any other `docker` on PATH too.
  docker_ = access("/usr/bin/docker", X_OK) == 0 ? "/usr/bin/docker" : "";
  if (docker_.empty() && access("/usr/local/bin/docker", X_OK) == 0) docker_ = "/usr/local/bin/docker";
  if (docker_.empty()) return absl::UnavailableError("no docker CLI (Debian's docker.io has one)");

  char templ[] = "/tmp/paseo-docker.XXXXXX";
  if (mkdtemp(templ) == nullptr) return absl::InternalError("mkdtemp /tmp/paseo-docker.XXXXXX");
  dir_ = templ;
  // A tmpfs of our own (in the test's mount namespace): the data root and every mount dockerd
  // makes beneath it go with one unmount.
  if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "mode=0711,size=1g") != 0)
    return absl::UnavailableError(absl::StrCat("mount tmpfs on ", dir_, ": ", strerror(errno)));
  for (const char* d : {"/data", "/exec", "/run", "/cli", "/build"}) {
    if (mkdir((dir_ + d).c_str(), 0700) != 0)
      return absl::InternalError(absl::StrCat("mkdir ", dir_, d, ": ", strerror(errno)));
  }
  int log = open((dir_ + "/dockerd.log").c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (log < 0) return absl::InternalError("open dockerd.log");
  // No bridge, no iptables, no forwarding or masquerading: containers get --network none, and
  // dockerd changes nothing in any network namespace (ours is private anyway). Its own
  // containerd (under the exec root), and containers' cgroups under a parent of our own.
  std::vector<std::string> argv = {
      dockerd,
      "--data-root=" + dir_ + "/data",
      "--exec-root=" + dir_ + "/exec",
      "--pidfile=" + dir_ + "/run/dockerd.pid",
      "--host=unix://" + dir_ + "/run/docker.sock",
      "--bridge=none",
      "--iptables=false",
      "--ip6tables=false",
      "--ip-forward=false",
      "--ip-masq=false",
      "--userland-proxy=false",
      "--cgroup-parent=/" + CgroupParent(),
      "--log-level=warn",
  };
  std::vector<std::string> env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir_ + "/cli"};
  dockerd_pid_ = SpawnStdio(argv, STDIN_FILENO, log, log, env);
  close(log);
  for (int i = 0; i < 300; ++i) {
    int status;
    if (waitpid(dockerd_pid_, &status, WNOHANG) == dockerd_pid_) {
      dockerd_pid_ = -1;
      return absl::UnavailableError(absl::StrCat(dockerd, " exited at start (exit status ",
                                                 ExitCode(status), "): ", Tail(Log(), 1500)));
    }
    if (CanConnect(dir_ + "/run/docker.sock") &&
        Docker({"version", "--format", "{{.Server.Version}}"}, std::chrono::seconds(20))
                .exit_code == 0)
      return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return absl::UnavailableError("dockerd did not serve within 60 s: " + Tail(Log(), 1500));
}

std::string DockerEngine::CgroupParent() const {
  return "paseo-docker-" + dir_.substr(dir_.rfind('.') + 1);
}

DockerEngine::~DockerEngine() { Stop(); }

std::vector<std::string> DockerEngine::Stop() {
  std::vector<std::string> left;
  if (dockerd_pid_ > 0) {
    CliResult ids = Docker({"ps", "-aq"}, std::chrono::seconds(60));
    std::vector<std::string> rm = {"rm", "-f", "-v"};
    for (size_t at = 0; at < ids.out.size();) {
      size_t nl = ids.out.find('\n', at);
      if (nl == std::string::npos) nl = ids.out.size();
      if (nl > at) rm.push_back(ids.out.substr(at, nl - at));
      at = nl + 1;
    }
    if (rm.size() > 3) Docker(rm, std::chrono::seconds(60));
    kill(dockerd_pid_, SIGTERM);
    int status;
    if (!WaitPidWithin(dockerd_pid_, 60, &status)) left.push_back("dockerd (killed after 60 s)");
    dockerd_pid_ = -1;
  }
  if (dir_.empty()) return left;
  // Whatever survived dockerd (a containerd or shim): by pid, from our exec root only.
  for (pid_t pid : Processes()) {
    left.push_back(absl::StrCat("process ", pid, ": ", Cmdline(pid)));
    kill(pid, SIGKILL);
  }
  if (umount2(dir_.c_str(), MNT_DETACH) != 0 || rmdir(dir_.c_str()) != 0)
    left.push_back(absl::StrCat(dir_, ": ", strerror(errno)));
  RemoveCgroup("/" + CgroupParent());
  std::vector<std::string> parents = {"/sys/fs/cgroup/" + CgroupParent()};  // cgroup v2
  for (const auto& hierarchy : ListDir("/sys/fs/cgroup"))  // v1 hierarchies
    parents.push_back("/sys/fs/cgroup/" + hierarchy + "/" + CgroupParent());
  for (const auto& parent : parents) {
    if (access(parent.c_str(), F_OK) == 0) left.push_back("cgroup " + parent);
  }
  dir_.clear();
  return left;
}

std::vector<pid_t> DockerEngine::Processes() const {
  return dir_.empty() ? std::vector<pid_t>{} : PidsMatching(dir_ + "/");
}

std::vector<std::string> DockerEngine::DockerArgv(const std::vector<std::string>& args) const {
  std::vector<std::string> argv = {docker_, "--host=unix://" + dir_ + "/run/docker.sock"};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

std::vector<std::string> DockerEngine::DockerEnv() const {
  // The legacy builder: Debian's docker.io 20.10 has no buildx plugin.
  return {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + dir_ + "/cli",
          "DOCKER_CONFIG=" + dir_ + "/cli", "DOCKER_BUILDKIT=0"};
}

CliResult DockerEngine::Docker(const std::vector<std::string>& args,
                               std::chrono::milliseconds deadline) const {
  return RunArgv(DockerArgv(args), "", deadline, DockerEnv());
}

absl::Status DockerEngine::BuildImage(const std::string& tag,
                                      const std::vector<std::pair<std::string, std::string>>& files,
                                      const std::vector<std::string>& cmd) const {
  const std::string context = dir_ + "/build/" + tag.substr(0, tag.find(':'));
  const std::string root = context + "/root";
  std::string script = "set -e; mkdir -p " + root + "/etc " + root + "/tmp " + root + "/bin; chmod 1777 " +
                       root + "/tmp; ";
  for (const auto& [from, to] : files) {
    script += "mkdir -p " + root + to.substr(0, to.rfind('/')) + "; cp " + from + " " + root + to + "; ";
  }
  script += "echo 'root:x:0:0::/:/bin/sh' > " + root + "/etc/passwd; echo 'paseo:x:1000:1000::/tmp:/bin/sh' >> " +
            root + "/etc/passwd; printf 'root:x:0:\\npaseo:x:1000:\\n' > " + root + "/etc/group; ";
  script += "tar --numeric-owner --owner=0 --group=0 -C " + root + " -cf " + context + "/root.tar .; ";
  std::string cmd_line;
  // (words without quotes, backslashes or %: they go into a single-quoted printf format)
  for (const auto& word : cmd) cmd_line += std::string(cmd_line.empty() ? "CMD [" : ", ") + "\"" + word + "\"";
  if (!cmd_line.empty()) cmd_line += "]\\n";
  script += "printf 'FROM scratch\\nADD root.tar /\\nUSER 1000:1000\\n" + cmd_line + "' > " + context + "/Dockerfile";
  CliResult made = RunArgv({"/bin/sh", "-c", script}, "", std::chrono::seconds(60),
                           {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"});
  if (made.exit_code != 0) return absl::InternalError("making the image's tarball: " + made.err);
  CliResult built = Docker({"build", "-q", "-t", tag, context}, std::chrono::seconds(300));
  if (built.exit_code != 0)
    return absl::InternalError("docker build " + tag + ": " + built.err + Tail(Log(), 1500));
  return absl::OkStatus();
}

std::string DockerEngine::Log() const { return ReadFile(dir_ + "/dockerd.log"); }

}  // namespace paseo::testing
