// How the privhelper runs runsc. SandboxHost sees only the RunscRunner interface, so its logic
// is tested with a fake runner and no root (sandbox_host_test.cc); RunscProcessRunner is the
// real one: it executes the pinned binary the privhelper hashed at start (execveat on its fd)
// with the fixed flags of runsc_command.h, in the privhelper's private control network
// namespace (main.cc unshared one), so runsc's abstract control sockets are unreachable from
// the host netns.
#pragma once

#include <sys/types.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include <kj/async-unix.h>
#include <kj/async.h>

#include "absl/status/statusor.h"
#include "privhelper/runsc_command.h"

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

// Resolves to the wait status of `pid`. Call right after the child was created: kj reaps only
// children it was told about.
kj::Promise<int> WatchChild(kj::UnixEventPort& events, pid_t pid);

// The fds a long-running runsc (`exec`) gets. `log_fd` becomes fd 3, where `runsc exec` writes
// its debug log (exit_status.h); it must be given for exec and only for exec.
struct RunscStdio {
  int stdin_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int log_fd = -1;
};

// The stdin and stdout `runsc run` passes on to the sandbox's init (-1: /dev/null in, runsc's
// captured stdout out). The caller keeps ownership and may close them once Run returns.
struct InitStdio {
  int in = -1;
  int out = -1;
};

class RunscRunner {
 public:
  virtual ~RunscRunner() = default;

  // Runs `runsc <fixed flags> <args...>` to its end (create, start, kill, delete, list), with
  // stdin on /dev/null and stdout and stderr captured. Never fails as a promise unless runsc
  // could not be started; a failed runsc is a result that is not ok(). `network` is kSandbox
  // only for the `create` and `start` of a sandbox with network mode
  // "sandbox".
  virtual kj::Promise<RunscResult> Run(std::vector<std::string> args,
                                       RunscNetwork network = RunscNetwork::kNone,
                                       InitStdio init = {}) = 0;

  // Starts `runsc <fixed flags> <args...>` on `stdio` and returns at once; the promise
  // resolves to runsc's wait status when it ends.
  virtual absl::StatusOr<kj::Promise<int>> Start(std::vector<std::string> args,
                                                 const RunscStdio& stdio) = 0;
};

class RunscProcessRunner final : public RunscRunner {
 public:
  // `runsc_fd` is an open (O_RDONLY) fd of the verified runsc binary; the runner uses it for
  // every call and does not close it.
  RunscProcessRunner(kj::UnixEventPort& events, int runsc_fd, RunscFlags flags);
  // Set once at start from SandboxNetworks' probe.
  void SetHideProcSysNet(bool hide) { flags_.hide_proc_sys_net = hide; }

  // How long one short runsc call (create, start, kill, delete, list) may take before it is
  // killed (and reported as killed by signal 9): a hung runsc must not wedge its sandbox.
  static constexpr kj::Duration kTimeout = 60 * kj::SECONDS;

  kj::Promise<RunscResult> Run(std::vector<std::string> args,
                               RunscNetwork network = RunscNetwork::kNone,
                               InitStdio init = {}) override;
  absl::StatusOr<kj::Promise<int>> Start(std::vector<std::string> args,
                                         const RunscStdio& stdio) override;

 private:
  absl::StatusOr<pid_t> Spawn(std::vector<std::string> args, const RunscStdio& stdio,
                              RunscNetwork network = RunscNetwork::kNone);

  kj::UnixEventPort& events_;
  int runsc_fd_;
  RunscFlags flags_;
};

}  // namespace paseo
