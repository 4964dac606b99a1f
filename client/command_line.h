// The CLI's command line, parsed without touching the service: kj::MainBuilder sub-commands
// fill one typed struct per command, so the whole grammar (options, `--`, per-command --help,
// refusals and their exit code) is unit-tested without a socket. cli.cc runs what this returns.
//
//   ParsedCommandLine p = ParseCommandLine({"run", "-t", "--", "sh"}, DefaultSocketPath());
//   if (!p.command_line) { print p.out / p.err; return p.exit_code; }
#pragma once

#include <csignal>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "schema/api.capnp.h"

namespace paseo::client {

// The exit code of a command line the CLI does not understand (the usage error).
inline constexpr int kUsageError = 2;

// A workspace to mount. `path` is what the user typed, normalized (NormalizePath). An empty
// destination lets the service choose (/workspace).
struct WorkspaceSpec {
  std::string path;
  std::string destination;
  api::AccessMode mode = api::AccessMode::READ_ONLY;
  bool operator==(const WorkspaceSpec&) const = default;
};

// The absolute path `typed` names, spelled the one way the service accepts, without resolving
// any symlink (the service decides what a path means, and refuses symlinks): a relative path
// is taken from `cwd` (physical, as getcwd gives it), and its leading ".." components step up
// from there; "." and empty components and a trailing "/" are dropped. Any other ".." is kept
// as typed, since its meaning depends on symlinks (the service refuses it).
//   NormalizePath("./proj/", "/home/u") == "/home/u/proj"
//   NormalizePath("../b//c", "/home/u") == "/home/b/c"
std::string NormalizePath(std::string_view typed, std::string_view cwd);

// --workspace PATH[:DEST][:ro|:rw], with PATH normalized against the current directory. DEST,
// if given, is absolute. A PATH containing ':' needs --mount.
std::optional<WorkspaceSpec> ParseWorkspace(std::string_view arg);

// --mount src=PATH[,dst=DEST][,ro|,rw]: any PATH, since within a value "\," is a comma and
// "\\" a backslash (a value may contain '=' and ':'). PATH is normalized as above.
std::optional<WorkspaceSpec> ParseMount(std::string_view arg);

// "TERM", "SIGTERM" or a number, 1..64.
std::optional<int> ParseSignal(std::string_view name);

// "lossless" or "drop-oldest" (--output).
std::optional<api::OutputMode> ParseOutputMode(std::string_view name);

// How a process is started (run and exec): -t, -i, --env, --cwd, --key, --output,
// --report-unkept.
struct ProcessOptions {
  std::vector<std::string> env;
  std::string cwd;
  bool tty = false;
  bool interactive = false;
  std::string key;  // empty: none
  std::optional<api::OutputMode> output;  // none: DefaultOutputMode
  bool report_unkept = false;  // --report-unkept (api.capnp ProcessSpec.reportUnkept)
};

// The output mode when --output is not given: lossless for a pipe process, whose output this
// CLI follows to the end (a reader that keeps up never loses a byte, and a slow terminal
// slows the command instead of cutting bytes out of the middle of its output); drop-oldest
// for a terminal process, which can be detached (Ctrl-P Ctrl-Q) and must then keep running
// with nobody reading, and whose newest screen is what matters.
api::OutputMode DefaultOutputMode(const ProcessOptions& p);

struct RunCommand {
  std::string deployment;  // empty: the only one the caller may use
  std::string profile;
  std::vector<WorkspaceSpec> workspaces;
  std::vector<std::string> credentials;
  ProcessOptions process;
  bool keep = false;
  std::vector<std::string> argv;
};

struct ExecCommand {
  std::string sandbox;
  ProcessOptions process;
  std::vector<std::string> argv;
};

// SANDBOX PROCESS, the operands of the per-process commands.
struct ProcessRef {
  std::string sandbox;
  std::string process;
};

struct AttachCommand {
  ProcessRef target;
  std::optional<uint64_t> from;  // none: from what comes next
};

// The default of logs --reconnect-for: a broker restart takes about a second (plus the
// privhelper's backoff after repeated crashes, up to 30 s).
inline constexpr uint32_t kDefaultReconnectSeconds = 60;

struct LogsCommand {
  ProcessRef target;
  api::Stream stream = api::Stream::STDOUT;
  uint64_t from = 0;
  bool follow = false;
  // -o FILE: the stream's bytes are appended to FILE instead of stdout/stderr.
  std::string output;
  // After a lost connection, reconnect and resume for at most this long (0: give up at once).
  uint32_t reconnect_seconds = kDefaultReconnectSeconds;
};

struct WaitCommand {
  ProcessRef target;
};

struct KillCommand {
  ProcessRef target;
  int signal = SIGTERM;
};

struct ReleaseCommand {
  ProcessRef target;
};

struct PsCommand {};

// stats [SANDBOX...]: what sandboxes use (CPU, memory, host tasks, processes, output, network),
// like `docker stats`; refreshing on a terminal, one sample otherwise.
struct StatsCommand {
  std::vector<std::string> ids;  // empty: every sandbox the caller may see
  enum class Mode { kAuto, kOnce, kStream };
  Mode mode = Mode::kAuto;  // kAuto: kStream when stdout is a terminal, kOnce otherwise
  uint32_t interval_ms = 1000;  // between samples (CPU is their difference)
};

struct RmCommand {
  std::vector<std::string> ids;
  bool force = true;
};

struct InfoCommand {};

// create: a sandbox that stays (as run --keep, without a command); with --key, the one that
// key names if the caller created it already.
struct CreateCommand {
  std::string deployment;  // empty: the only one the caller may use
  std::string profile;
  std::vector<WorkspaceSpec> workspaces;
  std::vector<std::string> credentials;
  std::string key;
};

// find: the sandbox of a deployment created with a key.
struct FindCommand {
  std::string deployment;  // empty: the only one the caller may use
  std::string key;
};

struct PauseCommand {
  std::vector<std::string> ids;
};

struct ResumeCommand {
  std::vector<std::string> ids;
};

// connect SANDBOX PORT: relays stdin and stdout to a TCP port inside the sandbox (like nc).
struct ConnectCommand {
  std::string sandbox;
  uint16_t port = 0;
};

// A TCP port, 1..65535.
std::optional<uint16_t> ParsePort(std::string_view text);
// stats --interval: seconds (decimals allowed) from 0.1 to 3600, as milliseconds.
std::optional<uint32_t> ParseInterval(std::string_view text);

using Command = std::variant<RunCommand, ExecCommand, AttachCommand, LogsCommand, WaitCommand,
                             KillCommand, PsCommand, RmCommand, InfoCommand, CreateCommand,
                             FindCommand, PauseCommand, ResumeCommand,
                             ReleaseCommand, ConnectCommand, StatsCommand>;

struct CommandLine {
  std::string socket;  // --socket, before or after the command name
  bool json = false;   // --json, before the command or after ps / info / stats
  // --messages FILE, before or after the command name: the CLI's own messages are appended to
  // FILE instead of going to stderr (commands.h says where they go otherwise).
  std::string messages;
  Command command;
};

// Either a command to run, or what to print and how to exit: help and --version go to stdout
// with 0, a usage error goes to stderr with kUsageError.
struct ParsedCommandLine {
  std::optional<CommandLine> command_line;
  int exit_code = 0;
  std::string out;
  std::string err;
};

// `args` is argv without argv[0].
ParsedCommandLine ParseCommandLine(const std::vector<std::string>& args,
                                   const std::string& default_socket);

}  // namespace paseo::client
