// Attaching a terminal (or pipes) to a process: streams its output from given offsets to our
// stdout/stderr, optionally forwards our stdin, and for a tty process sets the local terminal
// raw, forwards window-size changes and honours a detach key sequence. Shared by the CLI's
// `run`, `exec` and `attach`.
#pragma once

#include <cstdint>
#include <memory>

#include <kj/async-io.h>

#include "client/messages.h"
#include "schema/api.capnp.h"

namespace paseo::client {

struct AttachOptions {
  bool tty = false;            // the process is a tty process (one `pty` stream)
  bool forward_stdin = false;  // copy our stdin to the process (closeInput at EOF)
  bool detach_keys = false;    // Ctrl-P Ctrl-Q detaches (only when forwarding a terminal)
  uint64_t stdout_from = 0;    // stdout (or pty) offset to replay from
  uint64_t stderr_from = 0;
  // Our side of the process's streams (tests substitute pipes).
  int stdin_fd = 0;
  int stdout_fd = 1;
  int stderr_fd = 2;
  // Subscribe and ask for the exit status at once, without a round trip each (run's one-shot
  // path). Off, each subscription is answered before the next goes out, so a connection lost
  // early still finds the streams where the service got them to (what exec and attach report).
  bool pipelined = false;
  // Where notices go (a gap, "detached"); default: stderr. Silenced once stream bytes go to
  // the same fd (messages.h).
  std::shared_ptr<Messages> messages;
};

inline constexpr int kDetached = -1;

// Makes SIGINT, SIGTERM and SIGWINCH events of the kj event loop, as Attach needs. Call it once,
// before kj::setupAsyncIo() and before any thread exists (kj::UnixEventPort::captureSignal).
void CaptureAttachSignals();

// Returns the process's exit code (128+N for signal N), kDetached, or 130 if interrupted twice.
// A lost connection throws DISCONNECTED, described as "the connection to the service was lost
// at stdout offset N and stderr offset M" (pty offset N for a tty). Needs CaptureAttachSignals().
int Attach(kj::AsyncIoContext& io, api::Process::Client process, const AttachOptions& options);

// Our terminal's size, or 24x80 if stdin is not a terminal.
void TerminalSize(uint16_t* rows, uint16_t* cols);

int ExitCodeOf(api::ExitStatus::Reader status);

}  // namespace paseo::client
