// Starting a child program with an exact fd table. The child gets precisely the fds the caller
// maps (everything else is closed by a close_range sweep, whatever close-on-exec says), a clean
// signal mask and default dispositions, and then execs.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace paseo {

struct SpawnRequest {
  // What to run: an open fd of the executable (execveat with AT_EMPTY_PATH, so the file that was
  // verified is the file that runs), or a path when exec_fd is -1.
  int exec_fd = -1;
  std::string path;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  // (child fd, parent fd) pairs. Child fds not listed are closed before exec.
  std::vector<std::pair<int, int>> fds;
  // Runs in the child after the fd table is set up and before exec (for credential changes).
  // Returns an errno value, or 0 to continue. Must not touch the parent's event loop.
  std::function<int()> in_child;
};

// Forks and execs. Returns the child's pid once the exec has succeeded; if the exec or in_child
// failed, the child is reaped and the error is returned (reported through a close-on-exec pipe).
absl::StatusOr<pid_t> Spawn(const SpawnRequest& request);

}  // namespace paseo
