// See runsc.h.
#include "privhelper/runsc.h"

#include <fcntl.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <unistd.h>

#include <kj/debug.h>
#include <kj/io.h>

#include "absl/strings/str_cat.h"
#include "common/rpc_errors.h"
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

RunscProcessRunner::RunscProcessRunner(kj::UnixEventPort& events, int runsc_fd, RunscFlags flags)
    : events_(events), runsc_fd_(runsc_fd), flags_(std::move(flags)) {}

namespace {

// In the child, before exec: a mount namespace of its own for this one runsc (a slave of ours,
// so our later unmounts of staging binds still reach it) with a read-only, empty tmpfs over
// /proc/sys/net. Debian's runsc 20221219 decides it runs in the root network namespace (and
// refuses --network=sandbox) when /proc/sys/net/core/rmem_default exists, which on kernels
// like 6.18 it does in every namespace. Measured: with this, the sandbox reaches its host end.
int HideProcSysNet() {
  if (unshare(CLONE_NEWNS) != 0) return errno;
  if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0) return errno;
  if (mount("tmpfs", "/proc/sys/net", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC,
            "size=4k,mode=0555") != 0)
    return errno;
  return 0;
}

}  // namespace

absl::StatusOr<pid_t> RunscProcessRunner::Spawn(std::vector<std::string> args,
                                                const RunscStdio& stdio, RunscNetwork network) {
  // The argv and the fds must agree: an exec without its log fd would log into whatever fd 3
  // is, and the exit status would be lost.
  if (RunscWritesDebugLog(args) != (stdio.log_fd >= 0))
    return absl::InternalError("runsc exec needs a log fd, and only exec has one");
  SpawnRequest request;
  request.exec_fd = runsc_fd_;
  request.path = "runsc";
  request.argv = RunscArgv(flags_, args, network);
  if (network == RunscNetwork::kSandbox && flags_.hide_proc_sys_net)
    request.in_child = HideProcSysNet;
  request.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C"};
  request.fds = {{0, stdio.stdin_fd}, {1, stdio.stdout_fd}, {2, stdio.stderr_fd}};
  if (stdio.log_fd >= 0) request.fds.push_back({kRunscLogFd, stdio.log_fd});
  return paseo::Spawn(request);
}

absl::StatusOr<kj::Promise<int>> RunscProcessRunner::Start(std::vector<std::string> args,
                                                           const RunscStdio& stdio) {
  ASSIGN_OR_RETURN(pid_t pid, Spawn(std::move(args), stdio));
  return WatchChild(events_, pid);
}

kj::Promise<RunscResult> RunscProcessRunner::Run(std::vector<std::string> args,
                                                 RunscNetwork network, InitStdio init) {
  // stdout and stderr go to memfds, not pipes: `runsc create` passes its stdio on to the
  // sandbox's init, which would hold a pipe open forever and a reader waiting for EOF would hang.
  kj::AutoCloseFd err_fd(memfd_create("runsc-stderr", MFD_CLOEXEC));
  kj::AutoCloseFd out_fd(memfd_create("runsc-stdout", MFD_CLOEXEC));
  if (err_fd.get() < 0 || out_fd.get() < 0)
    return StatusToException(ErrnoStatus("memfd_create", "runsc output"));
  kj::AutoCloseFd null_fd(open("/dev/null", O_RDWR | O_CLOEXEC));
  if (null_fd.get() < 0) return StatusToException(ErrnoStatus("open", "/dev/null"));
  auto pid = Spawn(std::move(args),
                   {init.in >= 0 ? init.in : null_fd.get(), init.out >= 0 ? init.out : out_fd.get(),
                    err_fd.get()},
                   network);
  if (!pid.ok()) {
    return StatusToException(absl::InternalError(
        absl::StrCat("cannot start runsc: ", pid.status().message())));
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
