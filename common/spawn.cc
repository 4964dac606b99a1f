// See spawn.h.
#include "common/spawn.h"

#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "common/status.h"

namespace paseo {
namespace {

[[noreturn]] void ChildFail(int report_fd, int err) {
  // The parent reads this errno through the pipe; a short write is as good as none.
  (void)!write(report_fd, &err, sizeof(err));
  _exit(127);
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const SpawnRequest& request) {
  // Everything the child touches is prepared before fork: no allocation after it.
  std::vector<char*> argv;
  for (const auto& a : request.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<char*> envp;
  for (const auto& e : request.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  int max_target = 2;
  for (const auto& [child, parent] : request.fds) max_target = std::max(max_target, child);

  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", "");

  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(report[0]);
    close(report[1]);
    return ErrnoStatus("fork", request.path, err);
  }
  if (pid == 0) {
    close(report[0]);
    // Move the report pipe and every source fd above all targets first, so that dup2 into the
    // targets cannot clobber a source that is still needed.
    int floor = max_target + 1;
    int rep = fcntl(report[1], F_DUPFD_CLOEXEC, floor);
    if (rep < 0) ChildFail(report[1], errno);
    floor = rep + 1;
    std::vector<std::pair<int, int>> moved;  // allocated: fine, we are single-threaded here
    for (const auto& [child, parent] : request.fds) {
      int high = fcntl(parent, F_DUPFD_CLOEXEC, floor);
      if (high < 0) ChildFail(rep, errno);
      floor = high + 1;
      moved.emplace_back(child, high);
    }
    int exec_fd = -1;
    if (request.exec_fd >= 0) {
      exec_fd = fcntl(request.exec_fd, F_DUPFD_CLOEXEC, floor);
      if (exec_fd < 0) ChildFail(rep, errno);
      floor = exec_fd + 1;
    }
    for (const auto& [child, high] : moved) {
      if (dup2(high, child) < 0) ChildFail(rep, errno);  // dup2 clears close-on-exec
    }
    // Close every fd that is not a target, the report pipe or the exec fd.
    for (int fd = 0; fd <= max_target; ++fd) {
      bool wanted = std::any_of(request.fds.begin(), request.fds.end(),
                                [fd](const auto& p) { return p.first == fd; });
      if (!wanted) close(fd);
    }
    for (const auto& [child, high] : moved) close(high);
    for (int fd = max_target + 1; fd < floor; ++fd) {
      if (fd != rep && fd != exec_fd) close(fd);
    }
    if (syscall(SYS_close_range, floor, ~0U, 0) != 0) ChildFail(rep, errno);

    sigset_t all;
    sigemptyset(&all);
    sigprocmask(SIG_SETMASK, &all, nullptr);
    for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);

    if (request.in_child) {
      int err = request.in_child();
      if (err != 0) ChildFail(rep, err);
    }
    if (exec_fd >= 0) {
      syscall(SYS_execveat, exec_fd, "", argv.data(), envp.data(), AT_EMPTY_PATH);
    } else {
      execve(request.path.c_str(), argv.data(), envp.data());
    }
    ChildFail(rep, errno);
  }

  close(report[1]);
  int child_err = 0;
  ssize_t n;
  do {
    n = read(report[0], &child_err, sizeof(child_err));
  } while (n < 0 && errno == EINTR);
  close(report[0]);
  if (n == sizeof(child_err)) {
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return ErrnoStatus("spawn", request.path.empty() ? request.argv.at(0) : request.path,
                       child_err);
  }
  return pid;
}

}  // namespace paseo
