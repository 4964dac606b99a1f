// See runsc.h.
#include "privhelper/runsc.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <kj/debug.h>
#include <kj/io.h>

#include "absl/strings/str_cat.h"
#include "common/spawn.h"
#include "common/status.h"

namespace paseo {

std::string RunscResult::Describe() const {
  std::string how = WIFEXITED(wait_status)
                        ? absl::StrCat("exit status ", WEXITSTATUS(wait_status))
                        : absl::StrCat("signal ", WTERMSIG(wait_status));
  std::string text = stderr_text;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  if (text.size() > 2000) text = text.substr(text.size() - 2000);
  return absl::StrCat("runsc failed (", how, ")", text.empty() ? "" : ": ", text);
}

std::string ReadMemfd(int fd) {
  std::string text;
  char buf[65536];
  ssize_t n;
  off_t off = 0;
  while (off < (4 << 20) && (n = pread(fd, buf, sizeof(buf), off)) > 0) {
    text.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return text;
}

kj::Promise<int> WatchChild(kj::UnixEventPort& events, pid_t pid) {
  // onChildExit keeps a reference to the Maybe until the child is reaped: keep it on the heap.
  auto child = kj::heap<kj::Maybe<pid_t>>(pid);
  auto promise = events.onChildExit(*child);
  return promise.attach(kj::mv(child));
}

RunscRunner::RunscRunner(kj::UnixEventPort& events, int runsc_fd, std::string root_dir,
                         std::string platform)
    : events_(events),
      runsc_fd_(runsc_fd),
      root_dir_(std::move(root_dir)),
      platform_(std::move(platform)) {}

std::vector<std::string> RunscRunner::Argv(const std::vector<std::string>& args,
                                           bool with_log) const {
  std::vector<std::string> argv = {
      "runsc",
      absl::StrCat("--root=", root_dir_),
      absl::StrCat("--platform=", platform_),
      "--network=none",
  };
  if (with_log) argv.push_back("--debug-log=/proc/self/fd/3");
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

absl::StatusOr<pid_t> RunscRunner::Start(std::vector<std::string> args, int stdin_fd,
                                         int stdout_fd, int stderr_fd, int log_fd) {
  SpawnRequest request;
  request.exec_fd = runsc_fd_;
  request.path = "runsc";
  request.argv = Argv(args, log_fd >= 0);
  request.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"};
  request.fds = {{0, stdin_fd}, {1, stdout_fd}, {2, stderr_fd}};
  if (log_fd >= 0) request.fds.push_back({3, log_fd});
  return Spawn(request);
}

kj::Promise<RunscResult> RunscRunner::Run(std::vector<std::string> args) {
  // stderr goes to a memfd, not a pipe: `runsc create` passes its stdio on to the sandbox's
  // init, which would hold a pipe open forever and a reader waiting for EOF would hang.
  int memfd = memfd_create("runsc-stderr", MFD_CLOEXEC);
  int outfd = memfd_create("runsc-stdout", MFD_CLOEXEC);
  if (memfd < 0 || outfd < 0) return KJ_EXCEPTION(FAILED, "internal: memfd_create failed");
  kj::AutoCloseFd err_fd(memfd);
  kj::AutoCloseFd out_fd(outfd);
  int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null_fd < 0) return KJ_EXCEPTION(FAILED, "internal: open /dev/null failed");
  kj::AutoCloseFd null_owned(null_fd);
  auto pid = Start(std::move(args), null_fd, outfd, memfd);
  if (!pid.ok()) {
    return KJ_EXCEPTION(FAILED, "internal: cannot start runsc", pid.status().ToString());
  }
  // A runsc that hangs must not wedge the sandbox it works on: kill it after kTimeout. It is
  // our own uid-0 child, so no CAP_KILL is needed, and it is not yet reaped when the timer
  // fires (the exit branch would have won the race).
  auto exited = WatchChild(events_, *pid).fork();
  pid_t child = *pid;
  auto timed_out = events_.getTimer().afterDelay(kTimeout).then(
      [child, late = exited.addBranch()]() mutable {
        kill(child, SIGKILL);
        return kj::mv(late);
      });
  return exited.addBranch().exclusiveJoin(kj::mv(timed_out)).then(
      [err_fd = kj::mv(err_fd), out_fd = kj::mv(out_fd)](int status) mutable {
        RunscResult result;
        result.wait_status = status;
        result.stderr_text = ReadMemfd(err_fd.get());
        result.stdout_text = ReadMemfd(out_fd.get());
        return result;
      });
}

}  // namespace paseo
