// See util.h.
#include "testing/util.h"

#include "common/dir_entries.h"

#include <dirent.h>
#include <errno.h>
#include <net/if.h>
#include <signal.h>
#include <sys/ioctl.h>
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

#include "common/spawn.h"

namespace paseo::testing {

std::string RunscPath() {
  const char* path = getenv("PASEO_RUNSC");
  return path != nullptr && *path != 0 ? path : "/usr/local/lib/paseo-sandbox/runsc/20240729/runsc";
}

std::string RunscPlatform() {
  const char* platform = getenv("PASEO_RUNSC_PLATFORM");
  return platform != nullptr && *platform != 0 ? platform : "auto";
}

void Die(const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, why.c_str());
  std::exit(2);
}

void Check(bool ok, const std::string& what) {
  if (!ok) Die(what + ": " + std::strerror(errno));
}

std::string Runfile(const std::string& rel) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* ws = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr || ws == nullptr)
    Die("TEST_SRCDIR/TEST_WORKSPACE unset: run me with bazel test (or testing/bench/run)");
  return std::string(srcdir) + "/" + ws + "/" + rel;
}

void CopyExecutable(const std::string& from, const std::string& to) {
  std::ifstream in(from, std::ios::binary);
  if (!in) Die("missing " + from);
  std::ofstream out(to, std::ios::binary);
  out << in.rdbuf();
  out.close();
  Check(static_cast<bool>(out), "copy " + from);
  Check(chmod(to.c_str(), 0755) == 0, "chmod " + to);
}

std::string Capture(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  Check(p != nullptr, "popen " + cmd);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  if (pclose(p) != 0) Die("command failed: " + cmd);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) Die("cannot write " + path);
}

std::vector<std::string> ListDir(const std::string& dir) { return DirEntries(dir); }

void LoopbackUp() {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ifreq ifr = {};
  std::strcpy(ifr.ifr_name, "lo");
  ioctl(s, SIOCGIFFLAGS, &ifr);
  ifr.ifr_flags |= IFF_UP;
  ioctl(s, SIOCSIFFLAGS, &ifr);
  close(s);
}

bool CanConnect(const std::string& unix_socket_path) {
  sockaddr_un addr = {};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, unix_socket_path.c_str(), sizeof(addr.sun_path) - 1);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool ok = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> kids;
  std::istringstream in(ReadFile("/proc/" + std::to_string(parent) + "/task/" +
                                 std::to_string(parent) + "/children"));
  for (pid_t pid; in >> pid;) kids.push_back(pid);
  return kids;
}

std::string Cmdline(pid_t pid) {
  std::string c = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  std::replace(c.begin(), c.end(), '\0', ' ');
  return c;
}

std::vector<pid_t> PidsMatching(const std::string& needle) {
  std::vector<pid_t> pids;
  for (const auto& n : ListDir("/proc")) {
    if (n.find_first_not_of("0123456789") != std::string::npos) continue;
    pid_t pid = std::stoi(n);
    if (Cmdline(pid).find(needle) != std::string::npos) pids.push_back(pid);
  }
  return pids;
}

uint64_t ProcKiB(pid_t pid, const std::string& file, const std::string& key) {
  std::istringstream in(ReadFile("/proc/" + std::to_string(pid) + "/" + file));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + key.size(), nullptr, 10);
  }
  return 0;
}

uint64_t RssKiB(pid_t pid) { return ProcKiB(pid, "status", "VmRSS:"); }

pid_t SpawnStdio(const std::vector<std::string>& argv, int in, int out, int err,
                 const std::vector<std::string>& env, std::function<int()> in_child) {
  SpawnRequest request;
  request.path = argv.at(0);
  request.argv = argv;
  request.env = env;
  request.fds = {{0, in}, {1, out}, {2, err}};
  request.in_child = std::move(in_child);
  auto pid = Spawn(request);
  if (!pid.ok()) Die(std::string(pid.status().message()));
  return *pid;
}

int WaitPid(pid_t pid) {
  int status = -1;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

void RemoveCgroup(const std::string& rel) {
  for (const auto& hierarchy : ListDir("/sys/fs/cgroup"))
    rmdir(("/sys/fs/cgroup/" + hierarchy + rel).c_str());
  rmdir(("/sys/fs/cgroup" + rel).c_str());
}

bool WaitPidWithin(pid_t pid, int seconds, int* status) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = waitpid(pid, status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) return false;
    usleep(10000);
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, status, 0) < 0 && errno == EINTR) {
  }
  return false;
}

}  // namespace paseo::testing
