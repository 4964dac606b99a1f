// See commands.h. One method per command; every RPC error ends in Execute's one handler.
#include "client/commands.h"

#include <unistd.h>

#include <cstdio>
#include <string>
#include <variant>

#include <kj/debug.h>

#include "client/attach.h"
#include "client/client.h"
#include "client/output_sink.h"
#include "common/json_writer.h"

namespace paseo::client {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "paseo-sandbox: %s\n", message.c_str());
  return kServiceError;
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

template <typename T>
void SetTexts(capnp::List<capnp::Text>::Builder list, const std::vector<T>& values) {
  for (size_t i = 0; i < values.size(); ++i) list.set(static_cast<unsigned>(i), values[i]);
}

// Runs one command against the service; RPC errors propagate as exceptions to Execute.
class Commands {
 public:
  Commands(kj::AsyncIoContext& io, const CommandLine& line)
      : io_(io), ws_(io.waitScope), line_(line), conn_(io, line.socket) {}

  int operator()(const RunCommand& run) {
    std::string deployment = run.deployment;
    if (deployment.empty()) {
      auto info = conn_.supervisor().infoRequest().send().wait(ws_);
      if (info.getDeployments().size() != 1)
        return Fail("run: you may use " + std::to_string(info.getDeployments().size()) +
                    " deployments; choose one with --deployment");
      deployment = info.getDeployments()[0];
    }
    auto create = conn_.supervisor().createSandboxRequest();
    auto spec = create.initSpec();
    spec.setDeploymentId(deployment);
    spec.setProfile(run.profile);
    auto mounts = spec.initWorkspaces(static_cast<unsigned>(run.workspaces.size()));
    for (size_t w = 0; w < run.workspaces.size(); ++w) {
      auto mount = mounts[static_cast<unsigned>(w)];
      mount.setPath(run.workspaces[w].path);
      mount.setDestination(run.workspaces[w].destination);
      mount.setMode(run.workspaces[w].mode);
    }
    SetTexts(spec.initCredentials(static_cast<unsigned>(run.credentials.size())), run.credentials);
    auto created = create.send().wait(ws_);
    auto sandbox = created.getSandbox();
    std::string sandbox_id = created.getInfo().getId();

    int code = kServiceError;
    kj::Maybe<kj::Exception> error = kj::runCatchingExceptions(
        [&] { code = RunProcess(sandbox, sandbox_id, run.argv, run.process, run.keep); });
    if (run.keep) {
      std::fprintf(stderr, "paseo-sandbox: kept sandbox %s\n", sandbox_id.c_str());
    } else {
      auto del = sandbox.deleteRequest();
      del.setForce(true);
      kj::Maybe<kj::Exception> del_error = kj::runCatchingExceptions([&] { del.send().wait(ws_); });
      KJ_IF_MAYBE (e, del_error) {
        Fail("cannot delete sandbox " + sandbox_id + ": " + ErrorText(*e));
      }
    }
    KJ_IF_MAYBE (e, error) {
      return Fail(ErrorText(*e));
    }
    return code;
  }

  int operator()(const ExecCommand& exec) {
    auto get = conn_.supervisor().getSandboxRequest();
    get.setId(exec.sandbox);
    auto sandbox = get.send().getSandbox();
    return RunProcess(sandbox, exec.sandbox, exec.argv, exec.process, /*detachable=*/true);
  }

  int operator()(const AttachCommand& cmd) {
    auto process = GetProcess(cmd.target);
    auto info = process.infoRequest().send().wait(ws_).getInfo();
    AttachOptions attach;
    attach.tty = info.getTty();
    attach.forward_stdin = true;
    attach.detach_keys = attach.tty;
    // By default show only what comes next; --from replays history.
    attach.stdout_from = cmd.from ? *cmd.from : info.getStdoutBytes();
    attach.stderr_from = cmd.from ? *cmd.from : info.getStderrBytes();
    if (attach.tty) std::fprintf(stderr, "paseo-sandbox: attached; Ctrl-P Ctrl-Q detaches\r\n");
    int code = Attach(io_, process, attach);
    return code == kDetached ? 0 : code;
  }

  // Prints a stream from an offset; without --follow, only up to what exists now.
  int operator()(const LogsCommand& logs) {
    auto process = GetProcess(logs.target);
    auto info = process.infoRequest().send().wait(ws_).getInfo();
    api::Stream stream = logs.stream;
    if (info.getTty() && stream == api::Stream::STDOUT) stream = api::Stream::PTY;
    uint64_t until = stream == api::Stream::STDERR ? info.getStderrBytes() : info.getStdoutBytes();
    if (!logs.follow && logs.from >= until) return 0;
    FdOutputSink::Options sink;
    sink.fd = stream == api::Stream::STDERR ? STDERR_FILENO : STDOUT_FILENO;
    if (!logs.follow) sink.stop_at = until;
    auto done = kj::newPromiseAndFulfiller<void>();
    auto req = process.subscribeRequest();
    req.setStream(stream);
    req.setFromOffset(logs.from);
    req.setSink(kj::heap<FdOutputSink>(sink, kj::mv(done.fulfiller)));
    auto subscription = req.send().wait(ws_).getSubscription();
    done.promise.wait(ws_);
    return 0;
  }

  int operator()(const WaitCommand& wait) {
    auto status = GetProcess(wait.target).waitRequest().send().wait(ws_);
    std::printf("%s\n", DescribeStatus(status.getStatus()).c_str());
    return ExitCodeOf(status.getStatus());
  }

  int operator()(const KillCommand& kill) {
    auto req = GetProcess(kill.target).signalRequest();
    req.setSignal(kill.signal);
    req.send().wait(ws_);
    return 0;
  }

  int operator()(const PsCommand&) {
    auto list = conn_.supervisor().listSandboxesRequest().send().wait(ws_);
    JsonWriter json;
    json.BeginArray();
    if (!line_.json) {
      std::printf("%-28s %-16s %-10s %s\n", "SANDBOX", "DEPLOYMENT", "STATE", "PROCESSES");
    }
    for (auto sb : list.getSandboxes()) {
      auto get = conn_.supervisor().getSandboxRequest();
      get.setId(sb.getId());
      auto procs = get.send().getSandbox().listProcessesRequest().send().wait(ws_);
      if (line_.json) {
        json.BeginObject();
        json.Key("id");
        json.String(sb.getId().cStr());
        json.Key("deployment");
        json.String(sb.getDeploymentId().cStr());
        json.Key("profile");
        json.String(sb.getProfile().cStr());
        json.Key("state");
        json.String(sb.getState().cStr());
        if (sb.getStateReason().size() > 0) {
          json.Key("stateReason");
          json.String(sb.getStateReason().cStr());
        }
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
        // Why a stopped or oom-killed sandbox stopped.
        if (sb.getStateReason().size() > 0) std::printf("  (%s)\n", sb.getStateReason().cStr());
        for (auto p : procs.getProcesses()) {
          std::string cmd;
          for (auto a : p.getArgv()) cmd += (cmd.empty() ? "" : " ") + std::string(a.cStr());
          std::printf("  %-26s %-12s %s\n", p.getId().cStr(), DescribeStatus(p.getStatus()).c_str(),
                      cmd.c_str());
        }
      }
    }
    json.EndArray();
    if (line_.json) std::printf("%s\n", json.Take().c_str());
    return 0;
  }

  int operator()(const RmCommand& rm) {
    int rc = 0;
    for (const auto& id : rm.ids) {
      kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
        auto get = conn_.supervisor().getSandboxRequest();
        get.setId(id);
        auto del = get.send().getSandbox().deleteRequest();
        del.setForce(rm.force);
        del.send().wait(ws_);
      });
      KJ_IF_MAYBE (e, error) {
        rc = Fail(id + ": " + ErrorText(*e));
      }
    }
    return rc;
  }

  int operator()(const InfoCommand&) {
    auto info = conn_.supervisor().infoRequest().send().wait(ws_);
    if (line_.json) {
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

 private:
  // Looks up SANDBOX PROCESS for the per-process commands (pipelined: one round trip).
  api::Process::Client GetProcess(const ProcessRef& ref) {
    auto get = conn_.supervisor().getSandboxRequest();
    get.setId(ref.sandbox);
    auto req = get.send().getSandbox().getProcessRequest();
    req.setId(ref.process);
    return req.send().getProcess();
  }

  // Starts argv in the sandbox and attaches to it until it ends; returns its exit code (130 if
  // we were interrupted twice). With `detachable` (the sandbox outlives us), Ctrl-P Ctrl-Q on a
  // tty detaches and leaves the process running.
  int RunProcess(api::Sandbox::Client& sandbox, const std::string& sandbox_id,
                 const std::vector<std::string>& argv, const ProcessOptions& p, bool detachable) {
    auto start = sandbox.startProcessRequest();
    auto spec = start.initSpec();
    SetTexts(spec.initArgv(static_cast<unsigned>(argv.size())), argv);
    SetTexts(spec.initEnv(static_cast<unsigned>(p.env.size())), p.env);
    spec.setCwd(p.cwd);
    spec.setTty(p.tty);
    if (p.tty) {
      uint16_t rows, cols;
      TerminalSize(&rows, &cols);
      spec.setRows(rows);
      spec.setCols(cols);
    }
    auto started = start.send().wait(ws_);
    AttachOptions attach;
    attach.tty = p.tty;
    attach.forward_stdin = p.interactive;
    attach.detach_keys = p.tty && p.interactive && detachable;
    int code = Attach(io_, started.getProcess(), attach);
    if (code == kDetached) {
      const char* process_id = started.getInfo().getId().cStr();
      std::fprintf(stderr,
                   "paseo-sandbox: process %s keeps running; reattach with: paseo-sandbox attach "
                   "%s %s\n",
                   process_id, sandbox_id.c_str(), process_id);
      return 0;
    }
    return code;
  }

  kj::AsyncIoContext& io_;
  kj::WaitScope& ws_;
  const CommandLine& line_;
  Connection conn_;
};

}  // namespace

int Execute(kj::AsyncIoContext& io, const CommandLine& line) {
  int rc = kServiceError;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
    Commands commands(io, line);
    rc = std::visit(commands, line.command);
  });
  KJ_IF_MAYBE (e, error) {
    return Fail(ErrorText(*e));
  }
  return rc;
}

}  // namespace paseo::client
