// paseo-sandbox: the command-line client of the public API.
//
//   paseo-sandbox run --workspace .:/workspace:rw -- sh -c 'echo hi > /workspace/f'
//   paseo-sandbox ps --json
//   paseo-sandbox rm sb-...
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/debug.h>

#include "client/attach.h"
#include "client/client.h"
#include "common/json_writer.h"

namespace paseo::client {
namespace {

constexpr char kUsage[] = R"(usage: paseo-sandbox [--socket PATH] [--json] COMMAND [ARGS]

Runs commands in gVisor sandboxes through the paseo-sandbox service.

Global options:
  --socket PATH   service socket (default $PASEO_SANDBOX_SOCKET or /run/paseo-sandbox/supervisor.sock)
  --json          machine-readable output (ps, info)

Commands:
  run [options] -- ARGV...   create a sandbox, run ARGV in it, stream its stdout and stderr,
                             delete the sandbox, and exit with the command's exit code
      --deployment ID        deployment to use (default: the only one you may use)
      --profile NAME         launch profile (default: the deployment's default)
      --workspace PATH[:DEST][:ro|:rw]
                             show PATH (as you see it) at DEST (default /workspace) inside the
                             sandbox, read-only unless :rw is given; may be repeated
      --credential NAME      mount a credential directory the deployment registered, where the
                             launch profile places it (read-only unless the profile says)
      -t, --tty              run on a pseudo-terminal (implies -i; the local terminal goes raw;
                             with --keep, Ctrl-P Ctrl-Q detaches and leaves it running)
      -i, --interactive      forward stdin to the command (closed at end-of-file)
      --env KEY=VALUE        environment entry (repeatable)
      --cwd DIR              working directory inside the sandbox
      --keep                 keep the sandbox after the command ends (prints its id on stderr)
  exec [-t] [-i] [--env K=V] [--cwd DIR] ID -- ARGV...
                             run ARGV in an existing sandbox (see run --keep); exit status as run;
                             with -t, Ctrl-P Ctrl-Q detaches and leaves it running
  attach [--from OFFSET] SANDBOX PROCESS
                             follow a process's output (from OFFSET, else from now) and send it
                             your input; for a tty, Ctrl-P Ctrl-Q detaches
  logs [--stream stdout|stderr|pty] [--from OFFSET] [-f] SANDBOX PROCESS
                             print a stream from OFFSET (default 0); -f follows until it ends
  wait SANDBOX PROCESS       wait for a process; print how it ended; exit with its code
  kill [--signal NAME|N] SANDBOX PROCESS
                             send a signal (default TERM)
  ps                         list your sandboxes and their processes
  rm [--no-force] ID...      delete sandboxes (running processes are killed unless --no-force)
  info                       service version, your uid as the service sees it, your deployments
  help                       this text

Exit status of run: the command's exit code; 128+N if it was killed by signal N; 125 if the
sandbox could not be created or the service refused the request.
)";

constexpr int kServiceError = 125;

struct Options {
  std::string socket = DefaultSocketPath();
  bool json = false;
};

int Fail(const std::string& message) {
  std::fprintf(stderr, "paseo-sandbox: %s\n", message.c_str());
  return kServiceError;
}

// Makes PATH absolute against the current directory, lexically (no symlink is resolved here:
// the service decides what the path means, and refuses symlinks).
std::string AbsolutePath(const std::string& path) {
  if (!path.empty() && path[0] == '/') return path;
  char cwd[4096];
  if (getcwd(cwd, sizeof(cwd)) == nullptr) return path;
  std::string base = cwd;
  if (path.empty() || path == ".") return base;
  std::string rest = path;
  while (rest.rfind("./", 0) == 0) rest = rest.substr(2);
  return base == "/" ? "/" + rest : base + "/" + rest;
}

bool ParseWorkspace(const std::string& arg, api::WorkspaceMount::Builder out) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t colon = arg.find(':', start);
    parts.push_back(arg.substr(start, colon - start));
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (parts.empty() || parts.size() > 3 || parts[0].empty()) return false;
  api::AccessMode mode = api::AccessMode::READ_ONLY;
  std::string dest;
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "ro") mode = api::AccessMode::READ_ONLY;
    else if (parts[i] == "rw") mode = api::AccessMode::READ_WRITE;
    else if (i == 1) dest = parts[i];
    else return false;
  }
  out.setPath(AbsolutePath(parts[0]));
  out.setDestination(dest);
  out.setMode(mode);
  return true;
}

std::string DescribeStatus(api::ExitStatus::Reader status) {
  switch (status.which()) {
    case api::ExitStatus::RUNNING:
      return "running";
    case api::ExitStatus::EXIT_CODE:
      return "exited " + std::to_string(status.getExitCode());
    case api::ExitStatus::SIGNAL:
      return "signal " + std::to_string(status.getSignal());
    case api::ExitStatus::OOM_KILLED:
      return "oom-killed";
    default:
      return "unknown";
  }
}

struct ProcessOptions {
  std::vector<std::string> env;
  std::string cwd;
  bool tty = false;
  bool interactive = false;
};

// Parses a command's process options (-t, -i, --env, --cwd); returns false on a bad option.
bool ParseProcessOption(const std::vector<std::string>& args, size_t& i, ProcessOptions& p) {
  const std::string& a = args[i];
  if (a == "-t" || a == "--tty") {
    p.tty = true;
    p.interactive = true;
  } else if (a == "-i" || a == "--interactive") {
    p.interactive = true;
  } else if (a == "-it" || a == "-ti") {
    p.tty = p.interactive = true;
  } else if ((a == "--env" || a == "--cwd") && i + 1 < args.size()) {
    (a == "--env" ? p.env.emplace_back() : p.cwd) = args[++i];
  } else {
    return false;
  }
  return true;
}

// Starts argv in the sandbox and attaches to it until it ends; returns its exit code (130 if
// we were interrupted twice). With `detachable` (the sandbox outlives us), Ctrl-P Ctrl-Q on a
// tty detaches and leaves the process running. RPC errors propagate as exceptions.
int RunProcess(kj::AsyncIoContext& io, api::Sandbox::Client& sandbox, const std::string& sandbox_id,
               const std::vector<std::string>& argv, const ProcessOptions& p, bool detachable) {
  auto& ws = io.waitScope;
  auto start = sandbox.startProcessRequest();
  auto pspec = start.initSpec();
  auto pargv = pspec.initArgv(static_cast<unsigned>(argv.size()));
  for (size_t a = 0; a < argv.size(); ++a) pargv.set(static_cast<unsigned>(a), argv[a]);
  auto penv = pspec.initEnv(static_cast<unsigned>(p.env.size()));
  for (size_t e = 0; e < p.env.size(); ++e) penv.set(static_cast<unsigned>(e), p.env[e]);
  pspec.setCwd(p.cwd);
  pspec.setTty(p.tty);
  if (p.tty) {
    uint16_t rows, cols;
    TerminalSize(&rows, &cols);
    pspec.setRows(rows);
    pspec.setCols(cols);
  }
  auto started = start.send().wait(ws);
  AttachOptions attach;
  attach.tty = p.tty;
  attach.forward_stdin = p.interactive;
  attach.detach_keys = p.tty && p.interactive && detachable;
  int code = Attach(io, started.getProcess(), attach);
  if (code == kDetached) {
    std::fprintf(stderr, "paseo-sandbox: process %s keeps running; reattach with: paseo-sandbox attach %s %s\n",
                 started.getInfo().getId().cStr(), sandbox_id.c_str(), started.getInfo().getId().cStr());
    return 0;
  }
  return code;
}

int Run(kj::AsyncIoContext& io, const Options& opts, std::vector<std::string> args) {
  std::string deployment, profile;
  std::vector<std::string> workspaces, credentials, argv;
  ProcessOptions process;
  bool keep = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&](const char* name) -> std::optional<std::string> {
      if (i + 1 >= args.size()) {
        Fail(std::string(name) + " needs a value");
        return std::nullopt;
      }
      return args[++i];
    };
    if (a == "--") {
      ++i;
      break;
    } else if (a == "--deployment") {
      auto v = value("--deployment");
      if (!v) return 2;
      deployment = *v;
    } else if (a == "--profile") {
      auto v = value("--profile");
      if (!v) return 2;
      profile = *v;
    } else if (a == "--workspace") {
      auto v = value("--workspace");
      if (!v) return 2;
      workspaces.push_back(*v);
    } else if (a == "--credential") {
      auto v = value("--credential");
      if (!v) return 2;
      credentials.push_back(*v);
    } else if (ParseProcessOption(args, i, process)) {
    } else if (a == "--keep") {
      keep = true;
    } else if (!a.empty() && a[0] == '-') {
      Fail("run: unknown option " + a);
      return 2;
    } else {
      break;
    }
  }
  argv.assign(args.begin() + static_cast<long>(i), args.end());
  if (argv.empty()) {
    Fail("run: no command given (paseo-sandbox run [options] -- ARGV...)");
    return 2;
  }

  Connection conn(io, opts.socket);
  auto& ws = io.waitScope;
  if (deployment.empty()) {
    auto info = conn.supervisor().infoRequest().send().wait(ws);
    if (info.getDeployments().size() != 1)
      return Fail("run: you may use " + std::to_string(info.getDeployments().size()) +
                  " deployments; choose one with --deployment");
    deployment = info.getDeployments()[0];
  }
  auto create = conn.supervisor().createSandboxRequest();
  auto spec = create.initSpec();
  spec.setDeploymentId(deployment);
  spec.setProfile(profile);
  auto mounts = spec.initWorkspaces(static_cast<unsigned>(workspaces.size()));
  for (size_t w = 0; w < workspaces.size(); ++w) {
    if (!ParseWorkspace(workspaces[w], mounts[static_cast<unsigned>(w)])) {
      Fail("run: bad --workspace " + workspaces[w] + " (PATH[:DEST][:ro|:rw])");
      return 2;
    }
  }
  auto creds = spec.initCredentials(static_cast<unsigned>(credentials.size()));
  for (size_t c = 0; c < credentials.size(); ++c) creds.set(static_cast<unsigned>(c), credentials[c]);
  auto created = create.send().wait(ws);
  auto sandbox = created.getSandbox();
  std::string sandbox_id = created.getInfo().getId();

  int code = kServiceError;
  kj::Maybe<kj::Exception> error =
      kj::runCatchingExceptions([&] { code = RunProcess(io, sandbox, sandbox_id, argv, process, keep); });
  if (keep) {
    std::fprintf(stderr, "paseo-sandbox: kept sandbox %s\n", sandbox_id.c_str());
  } else {
    auto del = sandbox.deleteRequest();
    del.setForce(true);
    kj::Maybe<kj::Exception> del_error =
        kj::runCatchingExceptions([&] { del.send().wait(ws); });
    KJ_IF_MAYBE(e, del_error) {
      Fail("cannot delete sandbox " + sandbox_id + ": " + ErrorText(*e));
    }
  }
  KJ_IF_MAYBE(e, error) { return Fail(ErrorText(*e)); }
  return code;
}

int Exec(kj::AsyncIoContext& io, const Options& opts, const std::vector<std::string>& args) {
  ProcessOptions process;
  std::string id;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    if (args[i] == "--") {
      ++i;
      break;
    } else if (ParseProcessOption(args, i, process)) {
    } else if (id.empty() && !args[i].empty() && args[i][0] != '-') {
      id = args[i];
    } else {
      Fail("exec: unexpected argument " + args[i]);
      return 2;
    }
  }
  std::vector<std::string> argv(args.begin() + static_cast<long>(i), args.end());
  if (id.empty() || argv.empty()) {
    Fail("exec: usage: paseo-sandbox exec [-t] [-i] [--env K=V] [--cwd DIR] SANDBOX-ID -- ARGV...");
    return 2;
  }
  Connection conn(io, opts.socket);
  auto get = conn.supervisor().getSandboxRequest();
  get.setId(id);
  auto sandbox = get.send().getSandbox();
  return RunProcess(io, sandbox, id, argv, process, /*detachable=*/true);
}

// Looks up SANDBOX PROCESS for the per-process commands.
api::Process::Client GetProcess(Connection& conn, const std::string& sandbox,
                                const std::string& process) {
  auto get = conn.supervisor().getSandboxRequest();
  get.setId(sandbox);
  auto req = get.send().getSandbox().getProcessRequest();
  req.setId(process);
  return req.send().getProcess();
}

int Attach(kj::AsyncIoContext& io, const Options& opts, const std::vector<std::string>& args) {
  std::vector<std::string> ids;
  uint64_t from = 0;
  bool have_from = false;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--from" && i + 1 < args.size()) {
      from = std::stoull(args[++i]);
      have_from = true;
    } else {
      ids.push_back(args[i]);
    }
  }
  if (ids.size() != 2) {
    Fail("attach: usage: paseo-sandbox attach [--from OFFSET] SANDBOX-ID PROCESS-ID");
    return 2;
  }
  Connection conn(io, opts.socket);
  auto process = GetProcess(conn, ids[0], ids[1]);
  auto info = process.infoRequest().send().wait(io.waitScope).getInfo();
  AttachOptions attach;
  attach.tty = info.getTty();
  attach.forward_stdin = true;
  attach.detach_keys = attach.tty;
  // By default show only what comes next; --from replays history.
  attach.stdout_from = have_from ? from : info.getStdoutBytes();
  attach.stderr_from = have_from ? from : info.getStderrBytes();
  if (attach.tty) std::fprintf(stderr, "paseo-sandbox: attached; Ctrl-P Ctrl-Q detaches\r\n");
  int code = paseo::client::Attach(io, process, attach);
  return code == kDetached ? 0 : code;
}

// Prints a stream from an offset; with --follow, until it ends.
int Logs(kj::AsyncIoContext& io, const Options& opts, const std::vector<std::string>& args) {
  std::vector<std::string> ids;
  uint64_t from = 0;
  bool follow = false;
  std::string stream = "stdout";
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--from" && i + 1 < args.size()) from = std::stoull(args[++i]);
    else if (args[i] == "--stream" && i + 1 < args.size()) stream = args[++i];
    else if (args[i] == "-f" || args[i] == "--follow") follow = true;
    else ids.push_back(args[i]);
  }
  if (ids.size() != 2 || (stream != "stdout" && stream != "stderr" && stream != "pty")) {
    Fail("logs: usage: paseo-sandbox logs [--stream stdout|stderr|pty] [--from OFFSET] "
         "[--follow] SANDBOX-ID PROCESS-ID");
    return 2;
  }
  Connection conn(io, opts.socket);
  auto& ws = io.waitScope;
  auto process = GetProcess(conn, ids[0], ids[1]);
  auto info = process.infoRequest().send().wait(ws).getInfo();
  api::Stream which = stream == "stderr" ? api::Stream::STDERR
                      : stream == "pty"  ? api::Stream::PTY
                                         : api::Stream::STDOUT;
  if (info.getTty() && which == api::Stream::STDOUT) which = api::Stream::PTY;
  uint64_t until = which == api::Stream::STDERR ? info.getStderrBytes() : info.getStdoutBytes();
  int fd = which == api::Stream::STDERR ? STDERR_FILENO : STDOUT_FILENO;
  // Without --follow, stop at what exists now.
  class Sink final : public api::OutputSink::Server {
   public:
    Sink(int fd, uint64_t until, bool follow, kj::Own<kj::PromiseFulfiller<void>> done)
        : fd_(fd), until_(until), follow_(follow), done_(kj::mv(done)) {}

   protected:
    kj::Promise<void> write(WriteContext context) override {
      auto p = context.getParams();
      auto data = p.getData();
      size_t n = data.size();
      if (!follow_ && p.getOffset() + n > until_) n = until_ > p.getOffset() ? until_ - p.getOffset() : 0;
      for (size_t off = 0; off < n;) {
        ssize_t w = ::write(fd_, data.begin() + off, n - off);
        if (w <= 0) break;
        off += static_cast<size_t>(w);
      }
      if (!follow_ && p.getOffset() + data.size() >= until_) Finish();
      return kj::READY_NOW;
    }
    kj::Promise<void> gap(GapContext context) override {
      std::fprintf(stderr, "paseo-sandbox: %llu earlier bytes are no longer kept\n",
                   static_cast<unsigned long long>(context.getParams().getLostBytes()));
      return kj::READY_NOW;
    }
    kj::Promise<void> end(EndContext context) override {
      Finish();
      return kj::READY_NOW;
    }

   private:
    void Finish() {
      if (done_->isWaiting()) done_->fulfill();
    }
    int fd_;
    uint64_t until_;
    bool follow_;
    kj::Own<kj::PromiseFulfiller<void>> done_;
  };
  auto done = kj::newPromiseAndFulfiller<void>();
  if (!follow && from >= until) return 0;
  auto req = process.subscribeRequest();
  req.setStream(which);
  req.setFromOffset(from);
  req.setSink(kj::heap<Sink>(fd, until, follow, kj::mv(done.fulfiller)));
  auto subscription = req.send().wait(ws).getSubscription();
  done.promise.wait(ws);
  return 0;
}

int Wait(kj::AsyncIoContext& io, const Options& opts, const std::vector<std::string>& args) {
  if (args.size() != 2) {
    Fail("wait: usage: paseo-sandbox wait SANDBOX-ID PROCESS-ID");
    return 2;
  }
  Connection conn(io, opts.socket);
  auto status = GetProcess(conn, args[0], args[1]).waitRequest().send().wait(io.waitScope);
  std::printf("%s\n", DescribeStatus(status.getStatus()).c_str());
  return ExitCodeOf(status.getStatus());
}

int Kill(kj::AsyncIoContext& io, const Options& opts, const std::vector<std::string>& args) {
  int sig = SIGTERM;
  std::vector<std::string> ids;
  for (size_t i = 0; i < args.size(); ++i) {
    if ((args[i] == "-s" || args[i] == "--signal") && i + 1 < args.size()) {
      std::string name = args[++i];
      if (name.rfind("SIG", 0) == 0) name = name.substr(3);
      static const std::pair<const char*, int> kNames[] = {
          {"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT}, {"KILL", SIGKILL},
          {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"TERM", SIGTERM}, {"CONT", SIGCONT},
          {"STOP", SIGSTOP}, {"WINCH", SIGWINCH}};
      sig = 0;
      for (const auto& [n, v] : kNames) {
        if (name == n) sig = v;
      }
      if (sig == 0) sig = std::atoi(name.c_str());
    } else {
      ids.push_back(args[i]);
    }
  }
  if (ids.size() != 2 || sig < 1 || sig > 64) {
    Fail("kill: usage: paseo-sandbox kill [--signal NAME|N] SANDBOX-ID PROCESS-ID");
    return 2;
  }
  Connection conn(io, opts.socket);
  auto req = GetProcess(conn, ids[0], ids[1]).signalRequest();
  req.setSignal(sig);
  req.send().wait(io.waitScope);
  return 0;
}

int Ps(kj::AsyncIoContext& io, const Options& opts) {
  Connection conn(io, opts.socket);
  auto& ws = io.waitScope;
  auto list = conn.supervisor().listSandboxesRequest().send().wait(ws);
  JsonWriter json;
  json.BeginArray();
  if (!opts.json) std::printf("%-28s %-16s %-10s %s\n", "SANDBOX", "DEPLOYMENT", "STATE", "PROCESSES");
  for (auto sb : list.getSandboxes()) {
    auto get = conn.supervisor().getSandboxRequest();
    get.setId(sb.getId());
    auto procs = get.send().getSandbox().listProcessesRequest().send().wait(ws);
    if (opts.json) {
      json.BeginObject();
      json.Key("id");
      json.String(sb.getId().cStr());
      json.Key("deployment");
      json.String(sb.getDeploymentId().cStr());
      json.Key("profile");
      json.String(sb.getProfile().cStr());
      json.Key("state");
      json.String(sb.getState().cStr());
      json.Key("createdAtUnixMs");
      json.Int(sb.getCreatedAtUnixMs());
      json.Key("ownerUid");
      json.Int(sb.getOwnerUid());
      json.Key("processes");
      json.BeginArray();
      for (auto p : procs.getProcesses()) {
        json.BeginObject();
        json.Key("id");
        json.String(p.getId().cStr());
        json.Key("argv");
        json.BeginArray();
        for (auto a : p.getArgv()) json.String(a.cStr());
        json.EndArray();
        json.Key("status");
        json.String(DescribeStatus(p.getStatus()));
        json.Key("stdoutBytes");
        json.Int(static_cast<int64_t>(p.getStdoutBytes()));
        json.Key("stderrBytes");
        json.Int(static_cast<int64_t>(p.getStderrBytes()));
        json.EndObject();
      }
      json.EndArray();
      json.EndObject();
    } else {
      std::printf("%-28s %-16s %-10s %u\n", sb.getId().cStr(), sb.getDeploymentId().cStr(),
                  sb.getState().cStr(), sb.getProcessCount());
      for (auto p : procs.getProcesses()) {
        std::string cmd;
        for (auto a : p.getArgv()) cmd += (cmd.empty() ? "" : " ") + std::string(a.cStr());
        std::printf("  %-26s %-12s %s\n", p.getId().cStr(), DescribeStatus(p.getStatus()).c_str(),
                    cmd.c_str());
      }
    }
  }
  json.EndArray();
  if (opts.json) std::printf("%s\n", json.Take().c_str());
  return 0;
}

int Rm(kj::AsyncIoContext& io, const Options& opts, const std::vector<std::string>& args) {
  bool force = true;
  std::vector<std::string> ids;
  for (const auto& a : args) {
    if (a == "--no-force") force = false;
    else if (a == "--force") force = true;
    else ids.push_back(a);
  }
  if (ids.empty()) {
    Fail("rm: no sandbox id given");
    return 2;
  }
  Connection conn(io, opts.socket);
  int rc = 0;
  for (const auto& id : ids) {
    kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
      auto get = conn.supervisor().getSandboxRequest();
      get.setId(id);
      auto del = get.send().getSandbox().deleteRequest();
      del.setForce(force);
      del.send().wait(io.waitScope);
    });
    KJ_IF_MAYBE(e, error) {
      rc = Fail(id + ": " + ErrorText(*e));
    }
  }
  return rc;
}

int Info(kj::AsyncIoContext& io, const Options& opts) {
  Connection conn(io, opts.socket);
  auto info = conn.supervisor().infoRequest().send().wait(io.waitScope);
  if (opts.json) {
    JsonWriter json;
    json.BeginObject();
    json.Key("version");
    json.String(info.getVersion().cStr());
    json.Key("peerUid");
    json.Int(info.getPeerUid());
    json.Key("deployments");
    json.BeginArray();
    for (auto d : info.getDeployments()) json.String(d.cStr());
    json.EndArray();
    json.EndObject();
    std::printf("%s\n", json.Take().c_str());
  } else {
    std::printf("version: %s\nyour uid: %u\ndeployments:", info.getVersion().cStr(),
                info.getPeerUid());
    for (auto d : info.getDeployments()) std::printf(" %s", d.cStr());
    std::printf("\n");
  }
  return 0;
}

int Main(int argc, char** argv) {
  Options opts;
  std::vector<std::string> args(argv + 1, argv + argc);
  size_t i = 0;
  for (; i < args.size(); ++i) {
    if (args[i] == "--socket" && i + 1 < args.size()) {
      opts.socket = args[++i];
    } else if (args[i] == "--json") {
      opts.json = true;
    } else if (args[i] == "-h" || args[i] == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else {
      break;
    }
  }
  if (i >= args.size()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::string command = args[i];
  std::vector<std::string> rest(args.begin() + static_cast<long>(i) + 1, args.end());
  if (command == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  kj::UnixEventPort::captureSignal(SIGINT);
  kj::UnixEventPort::captureSignal(SIGTERM);
  kj::UnixEventPort::captureSignal(SIGWINCH);
  signal(SIGPIPE, SIG_IGN);
  auto io = kj::setupAsyncIo();
  int rc = 0;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
    if (command == "run") rc = Run(io, opts, rest);
    else if (command == "exec") rc = Exec(io, opts, rest);
    else if (command == "attach") rc = Attach(io, opts, rest);
    else if (command == "logs") rc = Logs(io, opts, rest);
    else if (command == "wait") rc = Wait(io, opts, rest);
    else if (command == "kill") rc = Kill(io, opts, rest);
    else if (command == "ps") rc = Ps(io, opts);
    else if (command == "rm") rc = Rm(io, opts, rest);
    else if (command == "info") rc = Info(io, opts);
    else {
      Fail("unknown command \"" + command + "\" (try paseo-sandbox help)");
      rc = 2;
    }
  });
  KJ_IF_MAYBE(e, error) { return Fail(ErrorText(*e)); }
  return rc;
}

}  // namespace
}  // namespace paseo::client

int main(int argc, char** argv) { return paseo::client::Main(argc, argv); }
