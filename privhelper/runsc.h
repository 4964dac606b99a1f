// RunscRunner: the only code that builds a runsc command line. Flags are fixed here
// (--root, --platform from config, --network=none; never --directfs, never host networking),
// the binary is the pinned file the privhelper hashed at start, and every call runs in the
// privhelper's private control network namespace (it unshared one at start), so runsc's
// abstract control sockets are unreachable from the host netns.
#pragma once

#include <sys/types.h>

#include <string>
#include <utility>
#include <vector>

#include <kj/async-unix.h>
#include <kj/async.h>

#include "absl/status/statusor.h"

namespace paseo {

struct RunscResult {
  int wait_status = 0;  // as from waitpid
  std::string stderr_text;
  std::string stdout_text;
  bool ok() const { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }
  std::string Describe() const;
};

// What a runsc call wrote into a memfd (at most 4 MiB).
std::string ReadMemfd(int fd);

// Resolves to the wait status of `pid`. Call right after the child was created.
kj::Promise<int> WatchChild(kj::UnixEventPort& events, pid_t pid);

class RunscRunner {
 public:
  // `runsc_fd` is an open (O_RDONLY) fd of the verified runsc binary; the runner keeps it.
  RunscRunner(kj::UnixEventPort& events, int runsc_fd, std::string root_dir, std::string platform);

  // How long one short runsc call (create, start, kill, delete) may take before it is killed.
  static constexpr kj::Duration kTimeout = 60 * kj::SECONDS;

  // Runs `runsc <fixed flags> <args...>` with stdin/stdout on /dev/null and stderr captured;
  // a call still running after kTimeout is killed (and reported as killed by signal 9).
  kj::Promise<RunscResult> Run(std::vector<std::string> args);

  // Starts `runsc <fixed flags> <args...>` with the given fds as its stdin, stdout and stderr.
  // With `log_fd` >= 0, runsc also writes its log there (`--debug-log`, as fd 3): that is where
  // `runsc exec` records its process's raw wait status (exit_status.h).
  // Returns the pid; the caller must call events.onChildExit for it right away.
  absl::StatusOr<pid_t> Start(std::vector<std::string> args, int stdin_fd, int stdout_fd,
                              int stderr_fd, int log_fd = -1);

  // Every runsc invocation's full argv, for tests and logs.
  std::vector<std::string> Argv(const std::vector<std::string>& args, bool with_log = false) const;

  kj::UnixEventPort& events() { return events_; }

 private:
  kj::UnixEventPort& events_;
  int runsc_fd_;
  std::string root_dir_;
  std::string platform_;
};

}  // namespace paseo
