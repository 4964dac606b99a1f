// Attaching a terminal (or pipes) to a process: streams its output from given offsets to our
// stdout/stderr, optionally forwards our stdin, and for a tty process sets the local terminal
// raw, forwards window-size changes and honours a detach key sequence. Shared by the CLI's
// `run`, `exec` and `attach`.
#pragma once

#include <cstdint>

#include <kj/async-io.h>

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
};

inline constexpr int kDetached = -1;

// Makes SIGINT, SIGTERM and SIGWINCH events of the kj event loop, as Attach needs. Call it once,
// before kj::setupAsyncIo() and before any thread exists (kj::UnixEventPort::captureSignal).
void CaptureAttachSignals();

// Returns the process's exit code (128+N for signal N), kDetached, or 130 if interrupted twice.
// Needs CaptureAttachSignals().
int Attach(kj::AsyncIoContext& io, api::Process::Client process, const AttachOptions& options);

// Our terminal's size, or 24x80 if stdin is not a terminal.
void TerminalSize(uint16_t* rows, uint16_t* cols);

int ExitCodeOf(api::ExitStatus::Reader status);

}  // namespace paseo::client
