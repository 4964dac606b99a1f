// What each CLI command does against the service, given its parsed command line
// (command_line.h): it prints to stdout and stderr and returns the CLI's exit code. Apart from
// main() so that tests run the commands against a fake service.
#pragma once

#include <kj/async-io.h>

#include "client/command_line.h"

namespace paseo::client {

// The exit code when the service refused or could not be reached (docs/running.md).
inline constexpr int kServiceError = 125;

// Connects to line.socket and runs line.command. An RPC error is printed on stderr as
// "paseo-sandbox: <reason>: <message>" and gives kServiceError. Attaching commands need
// SIGINT, SIGTERM and SIGWINCH captured before `io` was set up (see attach.h).
int Execute(kj::AsyncIoContext& io, const CommandLine& line);

}  // namespace paseo::client
