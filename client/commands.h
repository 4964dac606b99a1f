// What each CLI command does against the service, given its parsed command line
// (command_line.h): it prints to stdout and stderr and returns the CLI's exit code. Apart from
// main() so that tests run the commands against a fake service.
#pragma once

#include <kj/async-io.h>

#include "client/command_line.h"

namespace paseo::client {

// Exit codes besides a command's own (docs/running.md):
// the service refused, could not be reached, or the connection to it was lost;
inline constexpr int kServiceError = 125;
// run: the command ended (the message gives its exit status) but its sandbox could not be
// deleted;
inline constexpr int kCleanupFailed = 124;
// logs: some bytes were no longer kept (a gap); the rest was written;
inline constexpr int kOutputIncomplete = 3;
// logs: the connection was lost and not regained in time; what was written is exact and the
// message gives the offset to resume from.
inline constexpr int kConnectionLost = 4;

// Connects to line.socket and runs line.command. The CLI's own messages go to stderr, or to
// line.messages, and never into a stream's bytes (messages.h): an RPC error is reported as
// "paseo-sandbox: <reason>: <message>" and gives kServiceError, a lost connection as "the
// connection to the service was lost ...". run, exec and attach need SIGINT, SIGTERM and
// SIGWINCH captured before `io` was set up (see attach.h; NeedsAttachSignals).
int Execute(kj::AsyncIoContext& io, const CommandLine& line);

// Whether the command attaches to a process (run, exec, attach), which takes over Ctrl-C and
// the window size; every other command leaves SIGINT and SIGTERM to end it.
bool NeedsAttachSignals(const CommandLine& line);

}  // namespace paseo::client
