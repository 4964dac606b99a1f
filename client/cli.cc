// paseo-sandbox: the command-line client of the public API. Parses the command line
// (command_line.h), then runs the command against the service (commands.h).
//
//   paseo-sandbox run --workspace .:/workspace:rw -- sh -c 'echo hi > /workspace/f'
//   paseo-sandbox ps --json
//   paseo-sandbox rm sb-...
#include <signal.h>

#include <cstdio>
#include <string>
#include <vector>

#include <kj/async-io.h>

#include "client/attach.h"
#include "client/client.h"
#include "client/command_line.h"
#include "client/commands.h"

int main(int argc, char** argv) {
  using namespace paseo::client;
  ParsedCommandLine parsed =
      ParseCommandLine(std::vector<std::string>(argv + 1, argv + argc), DefaultSocketPath());
  std::fputs(parsed.out.c_str(), stdout);
  std::fputs(parsed.err.c_str(), stderr);
  if (!parsed.command_line) return parsed.exit_code;
  // Only the attaching commands take over Ctrl-C (passed to the process); for every other
  // (logs -f, wait, ...) SIGINT and SIGTERM end the CLI as usual.
  if (NeedsAttachSignals(*parsed.command_line)) CaptureAttachSignals();
  signal(SIGPIPE, SIG_IGN);
  auto io = kj::setupAsyncIo();
  return Execute(io, *parsed.command_line);
}
