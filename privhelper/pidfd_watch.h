// Watching host processes the privhelper did not start: a sandbox's sentry (runsc-sandbox, the
// gVisor kernel) and gofer (runsc-gofer, its file server) are children of a `runsc create` that
// has exited, so neither waitpid nor kj's onChildExit sees them end. A pidfd (pidfd_open, Linux
// 5.3) becomes readable when its process exits, which the event loop observes like any fd; once
// whoever is now its parent (init) has reaped it, PIDFD_GET_INFO with PIDFD_INFO_EXIT (Linux
// 6.15) gives its wait status, even to a holder that is not its parent.
//
// ProcessWatcher is the seam: SandboxHost is tested with a fake one (sandbox_host_test.cc).
//
//   PidfdWatcher watcher(events);
//   ASSIGN_OR_RETURN(kj::Own<WatchedProcess> sentry, watcher.Watch(pid, "/paseo-sandbox/sb-1"));
//   if (sentry.get() == nullptr) ...;  // not running (any more)
//   sentry->Exited().then([&] { return sentry->Status(3 * kj::SECONDS); });
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include <kj/async-unix.h>
#include <kj/async.h>

#include "absl/status/statusor.h"

namespace paseo {

// One watched process. Its promises must not outlive it.
class WatchedProcess {
 public:
  virtual ~WatchedProcess() noexcept(false) = default;  // kj members may throw
  // Resolves once the process has exited.
  virtual kj::Promise<void> Exited() = 0;
  // After Exited: its wait status, once its parent has reaped it; nullopt if that takes longer
  // than `patience` or the kernel cannot tell (before Linux 6.15).
  virtual kj::Promise<std::optional<int>> Status(kj::Duration patience) = 0;
};

class ProcessWatcher {
 public:
  virtual ~ProcessWatcher() = default;
  // Watches `pid` if it runs now and is a member of the cgroup `cgroup` (a path such as
  // "/paseo-sandbox/<id>", in any hierarchy). A null Own if no such process runs: it has
  // exited, or its pid now names another process, which cannot be in the sandbox's cgroup.
  // An error only if the watch itself failed (out of fds), which says nothing about the process.
  virtual absl::StatusOr<kj::Own<WatchedProcess>> Watch(pid_t pid, const std::string& cgroup) = 0;
};

class PidfdWatcher final : public ProcessWatcher {
 public:
  explicit PidfdWatcher(kj::UnixEventPort& events) : events_(events) {}
  absl::StatusOr<kj::Own<WatchedProcess>> Watch(pid_t pid, const std::string& cgroup) override;

 private:
  kj::UnixEventPort& events_;
};

// Whether /proc/<pid>/cgroup's text ("N:controllers:/path" lines) puts the process in `cgroup`.
bool InCgroup(const std::string& proc_cgroup, const std::string& cgroup);

}  // namespace paseo
