// Tests only: runs a check as root of a fresh user namespace with its own mount and network
// namespaces, in a forked child, so the unit suites (which run unprivileged) can exercise real
// namespaces, links and nftables without touching the host.
#pragma once

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

namespace paseo::network::testing {

inline bool WriteProcFile(const char* path, const std::string& text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

// A fresh directory under $TEST_TMPDIR (or /tmp); empty if it cannot be made.
inline std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  std::string tmpl = std::string(base != nullptr && *base ? base : "/tmp") + "/" + name + ".XXXXXX";
  return mkdtemp(tmpl.data()) != nullptr ? tmpl : "";
}

// In a check run by InUserNamespace: fails it (with the condition on stderr) unless `cond`.
#define CHECK_OR_FAIL(cond)                              \
  do {                                                   \
    if (!(cond)) {                                       \
      std::fprintf(stderr, "check failed: %s\n", #cond); \
      return false;                                      \
    }                                                    \
  } while (0)

// 0: `check` returned true; 1: it returned false; 77: no user namespaces here (skip).
inline int InUserNamespace(const std::function<bool()>& check) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET) != 0) _exit(77);
    WriteProcFile("/proc/self/setgroups", "deny");
    if (!WriteProcFile("/proc/self/uid_map", "0 " + std::to_string(uid) + " 1") ||
        !WriteProcFile("/proc/self/gid_map", "0 " + std::to_string(gid) + " 1"))
      _exit(77);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) _exit(77);
    bool ok = check();
    std::fflush(nullptr);
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 1;
  return WEXITSTATUS(status);
}

}  // namespace paseo::network::testing
