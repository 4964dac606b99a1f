// `exec`: runs one workload in the workspace's sandbox with the contract's file descriptors:
// fd 0/1/2 are the workload's stdin/stdout/stderr, fd 3 brings the spawn envelope (and, for a
// pty, resize and signal frames), fd 4 gets the events started -> [resized] -> eof -> exit.
// The process is started with key = execId and lossless output, so the wrapper's output
// reaches Paseo like a pipe's: nothing dropped, the workload waits when Paseo reads slowly. If
// the connection to the broker drops, the wrapper reconnects, finds the process by its key and
// resubscribes from the offsets it already wrote: nothing lost, nothing duplicated.
#pragma once

#include <optional>
#include <string>

#include <kj/async-io.h>

#include "runtime/protocol.h"

namespace paseo::runtime {

struct ExecFds {
  int in = 0, out = 1, err = 2, control = 3, events = 4;
};

// How the wrapper itself should end: mirror the workload (exit code or signal), or fail.
struct ExecOutcome {
  std::optional<int> exit_code;  // the workload's exit code
  int signal = 0;                // the workload's terminating signal
  bool failed = false;           // an error event was written (or nothing could be)
};

// Reads one newline-terminated message of at most kMaxMessageBytes from `fd` (blocking),
// leaving anything after the newline in `rest`. nullopt at a clean EOF before any byte.
absl::StatusOr<std::optional<std::string>> ReadLine(int fd, std::string& rest);

// The workload's environment as ProcessSpec.env: exactly the envelope's env (nothing
// inherited), plus TERM=<stdio.term> for a pty whose env has no TERM.
std::vector<std::string> WorkloadEnv(const SpawnEnvelope& envelope);

// Runs the whole exec. `default_socket` is used when options.socket is absent. SIGINT,
// SIGTERM and SIGHUP must have been captured (kj::UnixEventPort::captureSignal) before `io`
// was set up.
ExecOutcome RunExec(kj::AsyncIoContext& io, const std::string& workspace_id,
                    const std::string& default_socket, const ExecFds& fds);

}  // namespace paseo::runtime
