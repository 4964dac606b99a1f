// See command_line.h. One kj::MainBuilder per command; a ProcessContext that collects what
// MainBuilder would print and turns its exit() into a return, so parsing never exits the
// process and tests can read the help and the errors.
#include "client/command_line.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <csignal>
#include <initializer_list>
#include <set>
#include <utility>

#include <kj/debug.h>
#include <kj/main.h>

namespace paseo::client {

std::string NormalizePath(std::string_view typed, std::string_view cwd) {
  const bool relative = typed.empty() || typed[0] != '/';
  if (relative && (cwd.empty() || cwd[0] != '/')) return std::string(typed);  // the service refuses it
  std::vector<std::string_view> parts;
  auto each = [](std::string_view path, auto&& take) {
    for (size_t start = 0; start <= path.size();) {
      size_t slash = path.find('/', start);
      if (slash == std::string_view::npos) slash = path.size();
      take(path.substr(start, slash - start));
      start = slash + 1;
    }
  };
  if (relative) {
    each(cwd, [&](std::string_view part) {
      if (!part.empty()) parts.push_back(part);
    });
  }
  bool named = false;  // a component the user typed has been kept
  each(typed, [&](std::string_view part) {
    if (part.empty() || part == ".") return;
    if (part == ".." && relative && !named) {
      // The current directory is physical, so stepping up from it is exact ("/.." is "/").
      if (!parts.empty()) parts.pop_back();
      return;
    }
    named = true;
    parts.push_back(part);
  });
  std::string out;
  for (std::string_view part : parts) {
    out += '/';
    out += part;
  }
  return out.empty() ? "/" : out;
}

namespace {

std::string CurrentDirectory() {
  char cwd[4096];
  return getcwd(cwd, sizeof(cwd)) != nullptr ? cwd : "";
}

}  // namespace

std::optional<WorkspaceSpec> ParseWorkspace(std::string_view arg) {
  std::vector<std::string_view> parts;
  for (size_t start = 0;;) {
    size_t colon = arg.find(':', start);
    parts.push_back(arg.substr(start, colon == std::string_view::npos ? colon : colon - start));
    if (colon == std::string_view::npos) break;
    start = colon + 1;
  }
  if (parts.size() > 3 || parts[0].empty()) return std::nullopt;
  WorkspaceSpec spec;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "ro")
      spec.mode = api::AccessMode::READ_ONLY;
    else if (parts[i] == "rw")
      spec.mode = api::AccessMode::READ_WRITE;
    else if (i == 1 && !parts[i].empty() && parts[i][0] == '/')
      spec.destination = NormalizePath(parts[i], "");
    else
      return std::nullopt;  // e.g. a PATH with ':' in it ("/a:b"): that needs --mount
  }
  spec.path = NormalizePath(parts[0], CurrentDirectory());
  return spec;
}

std::optional<WorkspaceSpec> ParseMount(std::string_view arg) {
  // Split at the commas that are not escaped, unescaping "\," and "\\".
  std::vector<std::string> fields(1);
  for (size_t i = 0; i < arg.size(); ++i) {
    char c = arg[i];
    if (c == '\\') {
      if (i + 1 == arg.size() || (arg[i + 1] != ',' && arg[i + 1] != '\\')) return std::nullopt;
      fields.back() += arg[++i];
    } else if (c == ',') {
      fields.emplace_back();
    } else {
      fields.back() += c;
    }
  }
  std::optional<std::string> src, dst;
  std::optional<api::AccessMode> mode;
  for (const std::string& field : fields) {
    if (field == "ro" || field == "rw") {
      if (mode) return std::nullopt;
      mode = field == "rw" ? api::AccessMode::READ_WRITE : api::AccessMode::READ_ONLY;
      continue;
    }
    size_t eq = field.find('=');
    if (eq == std::string::npos) return std::nullopt;
    std::string key = field.substr(0, eq), value = field.substr(eq + 1);
    std::optional<std::string>* slot = key == "src" ? &src : key == "dst" ? &dst : nullptr;
    if (slot == nullptr || slot->has_value() || value.empty()) return std::nullopt;
    *slot = value;
  }
  if (!src || (dst && (*dst)[0] != '/')) return std::nullopt;
  WorkspaceSpec spec;
  spec.path = NormalizePath(*src, CurrentDirectory());
  if (dst) spec.destination = NormalizePath(*dst, "");
  if (mode) spec.mode = *mode;
  return spec;
}

std::optional<api::OutputMode> ParseOutputMode(std::string_view name) {
  if (name == "lossless") return api::OutputMode::LOSSLESS;
  if (name == "drop-oldest") return api::OutputMode::DROP_OLDEST;
  return std::nullopt;
}

api::OutputMode DefaultOutputMode(const ProcessOptions& p) {
  if (p.output) return *p.output;
  return p.tty ? api::OutputMode::DROP_OLDEST : api::OutputMode::LOSSLESS;
}

std::optional<int> ParseSignal(std::string_view name) {
  if (name.substr(0, 3) == "SIG") name.remove_prefix(3);
  static constexpr std::pair<std::string_view, int> kNames[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
      {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT},
      {"STOP", SIGSTOP}, {"WINCH", SIGWINCH}};
  for (const auto& [n, v] : kNames) {
    if (name == n) return v;
  }
  int sig = 0;
  auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), sig);
  if (ec != std::errc() || end != name.data() + name.size() || sig < 1 || sig > 64)
    return std::nullopt;
  return sig;
}

namespace {

using Validity = kj::MainBuilder::Validity;

constexpr char kVersion[] = "paseo-sandbox 0.1.0";

constexpr char kBrief[] = "Runs commands in gVisor sandboxes through the paseo-sandbox service.";

constexpr char kExitStatus[] =
    "Exit status of run and exec: the command's exit code; 128+N if it was killed by signal N "
    "(137 when the sandbox was OOM-killed); 125 if the sandbox could not be created, the "
    "service refused the request or the connection to it was lost (stderr then starts with the "
    "reason, e.g. \"permission-denied: ...\"); 124 if the command ended but run could not "
    "delete its sandbox (the message gives the command's exit code); 2 for a command line "
    "paseo-sandbox does not understand.";

constexpr char kPlacement[] =
    "--socket, --messages and --json may also follow the command name. Use --option=VALUE for "
    "a value that starts with '-'.\n\n"
    "The CLI's own messages go to stderr, but never into a stream's bytes: once stderr (if not "
    "a terminal) has carried a byte of a process's stderr -- from the start for logs --stream "
    "stderr -- they are written to --messages <file> if given, else only the exit status tells.";

constexpr char kSocketHelp[] =
    "Service socket (default: $PASEO_SANDBOX_SOCKET, else /run/paseo-sandbox/supervisor.sock).";
constexpr char kMessagesHelp[] =
    "Append the CLI's own messages (errors, notices) to <file> instead of stderr, which then "
    "carries only a process's stderr.";

constexpr char kLogsExitStatus[] =
    "Exit status: 0 when every byte from --from on was written (with -f, to the stream's end); "
    "3 when some were no longer kept (the rest was written); 4 when the connection to the "
    "service was lost and not regained within --reconnect-for (what was written is exact; the "
    "message gives the offset to resume from); 125 if the service refused or could not be "
    "reached; 2 for a command line paseo-sandbox does not understand.";
constexpr char kJsonHelp[] = "Machine-readable output.";
constexpr char kDeploymentHelp[] =
    "Deployment to use (default: $PASEO_SANDBOX_DEPLOYMENT, else the only one you may use).";

// Ends parsing from inside MainBuilder (help, --version, a usage error): kj's exit() must not
// return, and a test must not lose its process.
struct StopParsing {
  int exit_code;
};

// What MainBuilder prints is kept for the caller; its exit() stops parsing with 0 (help,
// --version) or kUsageError after an error. kj's TopLevelProcessContext would _exit(1).
class CollectingContext final : public kj::ProcessContext {
 public:
  kj::StringPtr getProgramName() override { return "paseo-sandbox"; }
  KJ_NORETURN(void exit() override) { throw StopParsing{failed_ ? kUsageError : 0}; }
  void warning(kj::StringPtr message) override { AppendLine(err, message); }
  void error(kj::StringPtr message) override {
    failed_ = true;
    AppendLine(err, message);
  }
  KJ_NORETURN(void exitError(kj::StringPtr message) override) {
    error(message);
    exit();
  }
  KJ_NORETURN(void exitInfo(kj::StringPtr message) override) {
    AppendLine(out, message);
    exit();
  }
  void increaseLoggingVerbosity() override {
    kj::_::Debug::setLogLevel(kj::_::Debug::Severity::INFO);
  }

  std::string out, err;

 private:
  static void AppendLine(std::string& to, kj::StringPtr message) {
    if (message.size() == 0) return;
    to += message.cStr();
    if (!message.endsWith("\n")) to += '\n';
  }
  bool failed_ = false;
};

// MainBuilder reads options anywhere before "--" (getopt's permutation). The words at and after
// `rest_at` operands are not ours: the sub-command's for the top level, ARGV for run and exec,
// where `run ls -la` must not read -la as run's option. They are passed on untouched, after a
// "--" if `separate`, as the hand-written loops did by stopping at the first operand. `-h`
// before them becomes --help. `value_options` are the long options whose value may be the next
// word (it is neither an operand nor an option).
std::vector<kj::StringPtr> MarkRest(kj::ArrayPtr<const kj::StringPtr> params,
                                    const std::set<std::string>& value_options,
                                    std::optional<size_t> rest_at, bool separate) {
  std::vector<kj::StringPtr> out;
  size_t operands = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    kj::StringPtr p = params[i];
    if (p == "--") {
      out.insert(out.end(), params.begin() + i, params.end());
      break;
    }
    if (p.startsWith("-") && p.size() > 1) {
      out.push_back(p == "-h" ? kj::StringPtr("--help") : p);
      if (value_options.count(p.cStr()) > 0 && i + 1 < params.size()) out.push_back(params[++i]);
      continue;
    }
    if (rest_at && operands == *rest_at) {
      if (separate) out.push_back("--");
      out.insert(out.end(), params.begin() + i, params.end());
      break;
    }
    ++operands;
    out.push_back(p);
  }
  return out;
}

// A MainBuilder that also remembers which long options take a value, for MarkRest. Every
// command, and the top level, takes --socket.
class Grammar {
 public:
  Grammar(kj::ProcessContext& context, CommandLine& line, kj::StringPtr brief,
          kj::StringPtr details = nullptr)
      : builder_(context, kVersion, brief, details) {
    Value("socket", line.socket, "<path>", kSocketHelp);
    Value("messages", line.messages, "<file>", kMessagesHelp);
  }

  Grammar& Flag(std::initializer_list<kj::MainBuilder::OptionName> names,
                kj::Function<Validity()> callback, kj::StringPtr help) {
    builder_.addOption(names, kj::mv(callback), help);
    return *this;
  }
  Grammar& Flag(std::initializer_list<kj::MainBuilder::OptionName> names, bool& target,
                kj::StringPtr help) {
    return Flag(
        names,
        [&target]() -> Validity {
          target = true;
          return true;
        },
        help);
  }
  // A long option with a value (`--name VALUE` or `--name=VALUE`), and `-short VALUE` if given.
  Grammar& Value(char short_name, const char* long_name,
                 kj::Function<Validity(kj::StringPtr)> callback, kj::StringPtr title,
                 kj::StringPtr help) {
    value_options_.insert(std::string("--") + long_name);
    if (short_name != '\0') {
      value_options_.insert(std::string("-") + short_name);
      builder_.addOptionWithArg({short_name, long_name}, kj::mv(callback), title, help);
    } else {
      builder_.addOptionWithArg({long_name}, kj::mv(callback), title, help);
    }
    return *this;
  }
  Grammar& Value(const char* long_name, std::string& target, kj::StringPtr title,
                 kj::StringPtr help) {
    return Value(
        '\0', long_name,
        [&target](kj::StringPtr v) -> Validity {
          target = v.cStr();
          return true;
        },
        title, help);
  }
  Grammar& Values(const char* long_name, std::vector<std::string>& target, kj::StringPtr title,
                  kj::StringPtr help) {
    return Value(
        '\0', long_name,
        [&target](kj::StringPtr v) -> Validity {
          target.emplace_back(v.cStr());
          return true;
        },
        title, help);
  }
  // A value option whose text `parse` (std::string_view -> std::optional<T>) turns into what
  // `keep` keeps; a nullopt refuses it with `expected`.
  template <typename Parse, typename Keep>
  Grammar& Parsed(char short_name, const char* long_name, Parse parse, Keep keep,
                  kj::StringPtr title, const char* expected, kj::StringPtr help) {
    return Value(
        short_name, long_name,
        [parse, keep, expected](kj::StringPtr text) mutable -> Validity {
          auto value = parse(std::string_view(text.cStr(), text.size()));
          if (!value) return expected;
          keep(*value);
          return true;
        },
        title, help);
  }
  Grammar& Operand(kj::StringPtr title, std::string& target) {
    builder_.expectArg(title, [&target](kj::StringPtr v) -> Validity {
      target = v.cStr();
      return true;
    });
    return *this;
  }
  Grammar& Operands(kj::StringPtr title, std::vector<std::string>& target) {
    builder_.expectOneOrMoreArgs(title, [&target](kj::StringPtr v) -> Validity {
      target.emplace_back(v.cStr());
      return true;
    });
    return *this;
  }
  kj::MainBuilder& builder() { return builder_; }

  // The parser; `rest_at` and `separate` as in MarkRest.
  kj::MainFunc Build(std::optional<size_t> rest_at = std::nullopt, bool separate = false) {
    return [main = builder_.build(), values = std::move(value_options_), rest_at, separate](
               kj::StringPtr program, kj::ArrayPtr<const kj::StringPtr> params) mutable {
      std::vector<kj::StringPtr> marked = MarkRest(params, values, rest_at, separate);
      main(program, kj::arrayPtr(marked.data(), marked.size()));
    };
  }

 private:
  kj::MainBuilder builder_;
  std::set<std::string> value_options_;
};

std::optional<uint64_t> ParseOffset(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

std::optional<uint32_t> ParseSeconds(std::string_view text) {
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || value > 86400)
    return std::nullopt;
  return value;
}

std::optional<api::Stream> ParseStream(std::string_view text) {
  if (text == "stdout") return api::Stream::STDOUT;
  if (text == "stderr") return api::Stream::STDERR;
  if (text == "pty") return api::Stream::PTY;
  return std::nullopt;
}

constexpr char kOffsetExpected[] = "a byte offset (0, 1, ...) expected";

class Parser {
 public:
  explicit Parser(const std::string& default_socket) { line_.socket = default_socket; }

  ParsedCommandLine Parse(const std::vector<std::string>& args) {
    ParsedCommandLine result;
    std::vector<kj::StringPtr> params;
    for (const auto& a : args) params.emplace_back(a.c_str());
    try {
      kj::MainFunc main = TopLevel();
      main(context_.getProgramName(), kj::arrayPtr(params.data(), params.size()));
      KJ_ASSERT(chosen_, "MainBuilder returned without a command");
      result.command_line = std::move(line_);
    } catch (const StopParsing& stop) {
      result.exit_code = stop.exit_code;
    }
    result.out = std::move(context_.out);
    result.err = std::move(context_.err);
    return result;
  }

 private:
  // Makes `T` the command and returns it for the grammar's callbacks to fill.
  template <typename T>
  T& Choose() {
    chosen_ = true;
    return line_.command.emplace<T>();
  }

  void AddProcessOptions(Grammar& g, ProcessOptions& p) {
    g.Flag(
         {'t', "tty"},
         [&p]() -> Validity {
           p.tty = p.interactive = true;
           return true;
         },
         "Run on a pseudo-terminal (implies -i): the local terminal goes raw and its size "
         "follows. With exec, or run --keep, Ctrl-P Ctrl-Q detaches and leaves it running.")
        .Flag({'i', "interactive"}, p.interactive,
              "Forward stdin to the command (its input is closed at end-of-file). Without -i "
              "the command's stdin is at end-of-file at once (with -t: a terminal nothing types "
              "at).")
        .Flag({"report-unkept"}, p.report_unkept,
              "When the command ends, list on its stderr what it wrote outside the sandbox's "
              "kept directories (those go with the sandbox; advisory).")
        .Values("env", p.env, "<key>=<value>", "Environment entry; may be repeated.")
        .Value("cwd", p.cwd, "<dir>", "Working directory inside the sandbox.")
        .Value("key", p.key, "<key>",
               "A name for the process, unique in the sandbox (find it again by this name).")
        .Parsed(
            '\0', "output", ParseOutputMode,
            [&p](api::OutputMode mode) { p.output = mode; }, "lossless|drop-oldest",
            "lossless or drop-oldest expected",
            "What happens when the command writes faster than its output is read: lossless "
            "(the command waits; the default without -t) or drop-oldest (the oldest unread "
            "bytes go; the default with -t).");
  }

  kj::MainFunc TopLevel() {
    top_details_ = std::string(kPlacement) + "\n\n" + kExitStatus;
    Grammar g(context_, line_, kBrief, top_details_.c_str());
    g.Flag({"json"}, line_.json, "Machine-readable output (ps, info, stats).");
    g.builder()
        .addSubCommand("run", KJ_BIND_METHOD(*this, Run),
                       "create a sandbox, run a command in it, delete it")
        .addSubCommand("exec", KJ_BIND_METHOD(*this, Exec),
                       "run a command in an existing sandbox (see run --keep)")
        .addSubCommand("attach", KJ_BIND_METHOD(*this, Attach),
                       "follow a process's output and send it your input")
        .addSubCommand("logs", KJ_BIND_METHOD(*this, Logs), "print a stream of a process's output")
        .addSubCommand("wait", KJ_BIND_METHOD(*this, Wait),
                       "wait for a process; exit with its exit code")
        .addSubCommand("kill", KJ_BIND_METHOD(*this, Kill), "send a signal to a process")
        .addSubCommand("release", KJ_BIND_METHOD(*this, Release),
                       "forget an ended process and its output")
        .addSubCommand("ps", KJ_BIND_METHOD(*this, Ps), "list your sandboxes and their processes")
        .addSubCommand("stats", KJ_BIND_METHOD(*this, Stats),
                       "what your sandboxes use: CPU, memory, tasks, output, network")
        .addSubCommand("rm", KJ_BIND_METHOD(*this, Rm), "delete sandboxes")
        .addSubCommand("create", KJ_BIND_METHOD(*this, Create),
                       "create a sandbox that stays (with --key: idempotently); print its id")
        .addSubCommand("find", KJ_BIND_METHOD(*this, Find),
                       "print the id of the sandbox created with a key")
        .addSubCommand("pause", KJ_BIND_METHOD(*this, Pause), "freeze sandboxes")
        .addSubCommand("resume", KJ_BIND_METHOD(*this, Resume), "continue paused sandboxes")
        .addSubCommand("connect", KJ_BIND_METHOD(*this, Connect),
                       "relay stdin and stdout to a TCP port inside a sandbox (like nc)")
        .addSubCommand("info", KJ_BIND_METHOD(*this, Info),
                       "the service's version, your uid as it sees it, your deployments");
    return g.Build(/*rest_at=*/0);
  }

  kj::MainFunc Run() {
    auto& run = Choose<RunCommand>();
    Grammar g(context_, line_,
              "Creates a sandbox, runs <argv> in it (streaming its stdout and stderr), deletes "
              "the sandbox and exits with the command's exit code. <argv> starts after \"--\" "
              "or at the first word that is not an option.",
              kExitStatus);
    AddSandboxOptions(g, run);
    g.Flag({"keep"}, run.keep,
           "Keep the sandbox after the command ends (its id is printed on stderr).");
    AddProcessOptions(g, run.process);
    g.Operands("-- <argv>", run.argv);
    return g.Build(/*rest_at=*/0, /*separate=*/true);
  }

  kj::MainFunc Create() {
    auto& create = Choose<CreateCommand>();
    Grammar g(context_, line_,
              "Creates a sandbox that stays until rm, and prints its id. With --key, a sandbox "
              "you created with that key before is printed instead (and nothing is created); "
              "two creates with one key at once make one sandbox.");
    AddSandboxOptions(g, create);
    g.Value("key", create.key, "<key>",
            "Your name for the sandbox, unique in the deployment (at most 256 bytes); find "
            "prints its id.");
    return g.Build();
  }

  kj::MainFunc Find() {
    auto& find = Choose<FindCommand>();
    Grammar g(context_, line_,
              "Prints the id of the sandbox created with <key> in the deployment (also after "
              "the service restarted). Exits 125 if there is none.");
    g.Value("deployment", find.deployment, "<id>", kDeploymentHelp);
    g.Operand("<key>", find.key);
    return g.Build();
  }

  kj::MainFunc Pause() {
    auto& pause = Choose<PauseCommand>();
    Grammar g(context_, line_,
              "Freezes every process of each sandbox (runsc pause): nothing new starts in it "
              "until resume; its output stays readable, signals are delivered on resume. Exits "
              "125 if any could not be paused.");
    g.Operands("<sandbox>", pause.ids);
    return g.Build();
  }

  kj::MainFunc Resume() {
    auto& resume = Choose<ResumeCommand>();
    Grammar g(context_, line_,
              "Continues paused sandboxes. Exits 125 if any could not be resumed.");
    g.Operands("<sandbox>", resume.ids);
    return g.Build();
  }

  kj::MainFunc Connect() {
    auto& connect = Choose<ConnectCommand>();
    Grammar g(context_, line_,
              "Connects to TCP port <port> inside the sandbox (one its launch profile lists in "
              "network.inboundPorts) and relays stdin to it and what it sends to stdout, until "
              "both directions are closed. The connection is made for you alone; nothing "
              "listens on the host. Exits 0 when the connection closed normally, 1 if it was "
              "refused (the message says why) or broke, 125 if the service could not be "
              "reached.");
    g.Operand("<sandbox>", connect.sandbox);
    g.builder().expectArg("<port>", [&connect](kj::StringPtr text) -> Validity {
      auto port = ParsePort(std::string_view(text.cStr(), text.size()));
      if (!port) return "a port 1-65535 expected";
      connect.port = *port;
      return true;
    });
    return g.Build();
  }

  // What run and create say about the sandbox to create.
  template <typename Command>
  static void AddSandboxOptions(Grammar& g, Command& run) {
    g.Value("deployment", run.deployment, "<id>", kDeploymentHelp)
        .Value("profile", run.profile, "<name>", "Launch profile (default: the deployment's).")
        .Parsed(
            '\0', "workspace", ParseWorkspace,
            [&run](const WorkspaceSpec& w) { run.workspaces.push_back(w); },
            "<path>[:<dest>][:ro|:rw]",
            "<path>[:<dest>][:ro|:rw] expected (<dest> absolute; a <path> with ':' needs "
            "--mount)",
            "Show <path> (as you see it; relative to the current directory, \"./\" and a "
            "trailing \"/\" dropped) at <dest> (default /workspace) inside the sandbox, "
            "read-only unless :rw is given; may be repeated.")
        .Parsed(
            '\0', "mount", ParseMount,
            [&run](const WorkspaceSpec& w) { run.workspaces.push_back(w); },
            "src=<path>[,dst=<dest>][,ro|,rw]",
            "src=<path>[,dst=<dest>][,ro|,rw] expected (\\, is a comma in a value, \\\\ a "
            "backslash)",
            "--workspace for any <path>, one containing ':' too: write \\, for a comma and "
            "\\\\ for a backslash in a value; may be repeated.")
        .Values("credential", run.credentials, "<name>",
                "Mount a credential directory the deployment registered where the launch "
                "profile places it (read-only unless the profile says); may be repeated.");
  }

  kj::MainFunc Exec() {
    auto& exec = Choose<ExecCommand>();
    Grammar g(context_, line_,
              "Runs <argv> in the sandbox <sandbox> (see run --keep) and exits as run does.",
              kExitStatus);
    AddProcessOptions(g, exec.process);
    g.Operand("<sandbox>", exec.sandbox).Operands("-- <argv>", exec.argv);
    return g.Build(/*rest_at=*/1, /*separate=*/true);
  }

  kj::MainFunc Attach() {
    auto& attach = Choose<AttachCommand>();
    Grammar g(context_, line_,
              "Follows the output of a process (from --from, else from now) and sends it your "
              "input; for a terminal process Ctrl-P Ctrl-Q detaches. Exits with the process's "
              "exit code.");
    g.Parsed(
        '\0', "from", ParseOffset, [&attach](uint64_t from) { attach.from = from; }, "<offset>",
        kOffsetExpected, "Replay each stream from byte <offset>.");
    return PerProcess(g, attach.target);
  }

  kj::MainFunc Logs() {
    auto& logs = Choose<LogsCommand>();
    Grammar g(context_, line_,
              "Prints a stream of a process's output from --from (default 0) up to what it "
              "holds now; with -f, follows it until it ends. Only the stream's bytes go where "
              "it is printed. A lost connection is regained by itself (see --reconnect-for), "
              "resuming at the next byte.",
              kLogsExitStatus);
    g.Parsed(
         '\0', "stream", ParseStream, [&logs](api::Stream stream) { logs.stream = stream; },
         "stdout|stderr|pty", "stdout, stderr or pty expected",
         "The stream (default stdout; a terminal process has one stream, pty).")
        .Parsed(
            '\0', "from", ParseOffset, [&logs](uint64_t from) { logs.from = from; }, "<offset>",
            kOffsetExpected, "Start at byte <offset>.")
        .Flag({'f', "follow"}, logs.follow, "Follow the stream until the process ends.")
        .Value('o', "output",
               [&logs](kj::StringPtr file) -> Validity {
                 logs.output = file.cStr();
                 return true;
               },
               "<file>",
               "Append the stream's bytes to <file> (created if missing) instead of stdout "
               "(stderr for --stream stderr). With --from set to its size, a file that started "
               "at offset 0 resumes exactly.")
        .Parsed(
            '\0', "reconnect-for", ParseSeconds,
            [&logs](uint32_t seconds) { logs.reconnect_seconds = seconds; }, "<seconds>",
            "a number of seconds expected",
            "After a lost connection, keep reconnecting (with backoff) for <seconds> and resume "
            "at the next byte; default 60, 0 gives up at once.");
    return PerProcess(g, logs.target);
  }

  kj::MainFunc Wait() {
    auto& wait = Choose<WaitCommand>();
    Grammar g(context_, line_,
              "Waits for a process to end, prints how it ended (exited N, signal N, oom-killed) "
              "and exits with its exit code (128+N for signal N).");
    return PerProcess(g, wait.target);
  }

  kj::MainFunc Kill() {
    auto& kill = Choose<KillCommand>();
    Grammar g(context_, line_, "Sends a signal to a process.");
    g.Parsed(
        's', "signal", ParseSignal, [&kill](int sig) { kill.signal = sig; }, "<name>|<number>",
        "a signal name (TERM, SIGINT, ...) or number 1-64 expected",
        "HUP, INT, QUIT, KILL, USR1, USR2, TERM, CONT, STOP, WINCH (with or without SIG) "
        "or a number, 1-64; default TERM.");
    return PerProcess(g, kill.target);
  }

  kj::MainFunc Release() {
    auto& release = Choose<ReleaseCommand>();
    Grammar g(context_, line_,
              "Forgets an ended process: its output and record go (the service remembers its "
              "key). Refused while it runs.");
    return PerProcess(g, release.target);
  }

  kj::MainFunc Ps() {
    Choose<PsCommand>();
    Grammar g(context_, line_, "Lists your sandboxes and their processes.");
    g.Flag({"json"}, line_.json, kJsonHelp);
    return g.Build();
  }

  kj::MainFunc Stats() {
    auto& stats = Choose<StatsCommand>();
    Grammar g(context_, line_,
              "Shows what sandboxes use, like `docker stats`: CPU in cores (1.00 = one core busy, "
              "measured between two samples), memory used and its limit, host tasks and their "
              "limit, running processes, output written and kept for replay, and network bytes "
              "in and out for networked sandboxes. Without a sandbox, every sandbox you may see. "
              "Refreshes every interval on a terminal until interrupted; otherwise prints one "
              "sample (taken over one interval) and exits. --json prints one JSON document per "
              "sample (docs/stats.schema.json).");
    g.Flag({"json"}, line_.json, kJsonHelp);
    g.Flag(
        {"no-stream"},
        [&stats]() -> Validity {
          stats.mode = StatsCommand::Mode::kOnce;
          return true;
        },
        "Print one sample and exit, even on a terminal.");
    g.Flag(
        {"stream"},
        [&stats]() -> Validity {
          stats.mode = StatsCommand::Mode::kStream;
          return true;
        },
        "Refresh until interrupted, even when stdout is not a terminal (one table or JSON "
        "line per interval).");
    g.Parsed(
        '\0', "interval", ParseInterval, [&stats](uint32_t ms) { stats.interval_ms = ms; },
        "<seconds>", "a number of seconds from 0.1 to 3600 expected",
        "Seconds between samples (default 1; decimals allowed).");
    g.builder().expectZeroOrMoreArgs("<sandbox>", [&stats](kj::StringPtr v) -> Validity {
      stats.ids.emplace_back(v.cStr());
      return true;
    });
    return g.Build();
  }

  kj::MainFunc Rm() {
    auto& rm = Choose<RmCommand>();
    Grammar g(context_, line_,
              "Deletes sandboxes, killing their running processes unless --no-force. Exits 125 "
              "if any could not be deleted.");
    g.Flag(
         {"no-force"},
         [&rm]() -> Validity {
           rm.force = false;
           return true;
         },
         "Refuse to delete a sandbox with a running process.")
        .Flag(
            {"force"},
            [&rm]() -> Validity {
              rm.force = true;
              return true;
            },
            "Kill running processes (the default).");
    g.Operands("<sandbox>", rm.ids);
    return g.Build();
  }

  kj::MainFunc Info() {
    Choose<InfoCommand>();
    Grammar g(context_, line_,
              "Prints the service's version, your uid as the service sees it and the "
              "deployments you may use.");
    g.Flag({"json"}, line_.json, kJsonHelp);
    return g.Build();
  }

  // The per-process commands end alike: SANDBOX PROCESS.
  static kj::MainFunc PerProcess(Grammar& g, ProcessRef& target) {
    g.Operand("<sandbox>", target.sandbox).Operand("<process>", target.process);
    return g.Build();
  }

  CollectingContext context_;
  std::string top_details_;  // outlives parsing, as MainBuilder requires of its texts
  CommandLine line_;
  bool chosen_ = false;
};

}  // namespace

std::optional<uint32_t> ParseInterval(std::string_view text) {
  double seconds = 0;
  std::string copy(text);
  char* end = nullptr;
  seconds = std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !(seconds >= 0.1) || seconds > 3600)
    return std::nullopt;
  return static_cast<uint32_t>(seconds * 1000 + 0.5);
}

std::optional<uint16_t> ParsePort(std::string_view text) {
  uint32_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty() || value == 0 ||
      value > 65535)
    return std::nullopt;
  return static_cast<uint16_t>(value);
}

ParsedCommandLine ParseCommandLine(const std::vector<std::string>& args,
                                   const std::string& default_socket) {
  return Parser(default_socket).Parse(args);
}

}  // namespace paseo::client
