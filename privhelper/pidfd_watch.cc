// See pidfd_watch.h.
#include "privhelper/pidfd_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>

#include <kj/io.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace paseo {
namespace {

// From linux/pidfd.h of Linux 6.15 (Debian 12's headers predate it). The kernel accepts any
// struct size from this first version on, and fills in only what `mask` asked for and it knows.
struct PidfdInfo {
  uint64_t mask;
  uint64_t cgroupid;
  uint32_t pid, tgid, ppid, ruid, rgid, euid, egid, suid, sgid, fsuid, fsgid;
  int32_t exit_code;
};
static_assert(sizeof(PidfdInfo) == 64, "PIDFD_INFO_SIZE_VER0");
constexpr unsigned long kPidfdGetInfo = _IOWR(0xFF, 11, PidfdInfo);
constexpr uint64_t kPidfdInfoExit = 1u << 3;

constexpr kj::Duration kReapPoll = 50 * kj::MILLISECONDS;

// A pidfd is readable once its process has exited.
bool HasExited(int pidfd) {
  pollfd p = {pidfd, POLLIN, 0};
  return poll(&p, 1, 0) == 1;
}

class PidfdProcess final : public WatchedProcess {
 public:
  PidfdProcess(kj::UnixEventPort& events, kj::AutoCloseFd pidfd)
      : timer_(events.getTimer()),
        fd_(kj::mv(pidfd)),
        observer_(events, fd_.get(), kj::UnixEventPort::FdObserver::OBSERVE_READ),
        // Asked for before the event loop runs again, so no edge is missed; an exit before
        // the observer existed is caught by the poll.
        exited_((HasExited(fd_.get()) ? kj::Promise<void>(kj::READY_NOW)
                                      : observer_.whenBecomesReadable())
                    .fork()) {}

  kj::Promise<void> Exited() override { return exited_.addBranch(); }

  kj::Promise<std::optional<int>> Status(kj::Duration patience) override {
    return PollStatus(timer_.now() + patience);
  }

 private:
  // The exit info appears when the parent reaps the process (a zombie has none yet).
  kj::Promise<std::optional<int>> PollStatus(kj::TimePoint deadline) {
    PidfdInfo info = {};
    info.mask = kPidfdInfoExit;
    if (ioctl(fd_.get(), kPidfdGetInfo, &info) != 0) return std::optional<int>();  // < 6.13
    if (info.mask & kPidfdInfoExit) return std::optional<int>(info.exit_code);
    if (timer_.now() >= deadline) return std::optional<int>();
    return timer_.afterDelay(kReapPoll).then([this, deadline] { return PollStatus(deadline); });
  }

  kj::Timer& timer_;
  // Declared before the observer, so it is closed after the observer has left epoll.
  kj::AutoCloseFd fd_;
  kj::UnixEventPort::FdObserver observer_;
  kj::ForkedPromise<void> exited_;
};

}  // namespace

bool InCgroup(const std::string& proc_cgroup, const std::string& cgroup) {
  std::istringstream lines(proc_cgroup);
  for (std::string line; std::getline(lines, line);) {
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second != std::string::npos && line.compare(second + 1, std::string::npos, cgroup) == 0)
      return true;
  }
  return false;
}

absl::StatusOr<kj::Own<WatchedProcess>> PidfdWatcher::Watch(pid_t pid, const std::string& cgroup) {
  if (pid <= 0) return kj::Own<WatchedProcess>();
  int fd = static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (fd < 0) {
    if (errno == ESRCH) return kj::Own<WatchedProcess>();
    return ErrnoStatus("pidfd_open", absl::StrCat("pid ", pid));
  }
  kj::AutoCloseFd pidfd(fd);
  // The pid could name another process by now. Read while the pidfd's process is still alive
  // (checked after the read), /proc/<pid> is that process; a process in the sandbox's cgroup
  // is the sandbox's own (runsc put it there; nothing else is).
  std::ifstream in("/proc/" + std::to_string(pid) + "/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  if (!InCgroup(text.str(), cgroup) || HasExited(pidfd.get())) return kj::Own<WatchedProcess>();
  return kj::Own<WatchedProcess>(kj::heap<PidfdProcess>(events_, kj::mv(pidfd)));
}

}  // namespace paseo
