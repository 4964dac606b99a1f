// See commands.h. One method per command; every RPC error ends in Execute's one handler, and
// every message goes through one Messages (messages.h).
#include "client/commands.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>

#include <kj/debug.h>
#include <kj/timer.h>

#include "client/attach.h"
#include "client/client.h"
#include "client/messages.h"
#include "client/output_sink.h"
#include "client/stats_view.h"
#include "common/json_writer.h"

namespace paseo::client {
namespace {

const char* StreamName(api::Stream stream) {
  switch (stream) {
    case api::Stream::STDERR:
      return "stderr";
    case api::Stream::PTY:
      return "pty";
    default:
      return "stdout";
  }
}

// The same exception, its description continued.
kj::Exception Continued(const kj::Exception& e, const std::string& more) {
  return kj::Exception(e.getType(), __FILE__, __LINE__, kj::str(e.getDescription(), more.c_str()));
}

// The client-facing text of an error, with a lost connection in words (capnp's own would be
// "Peer disconnected" or "PromiseFulfiller was destroyed ..."). A connection that could not be
// made is "cannot connect to ..." (client.h).
std::string Describe(const kj::Exception& e) {
  std::string text = ErrorText(e);
  if (e.getType() == kj::Exception::Type::DISCONNECTED &&
      text.rfind(kConnectionLostText, 0) != 0 && text.rfind("cannot connect", 0) != 0) {
    return kConnectionLostText;
  }
  return text;
}

// Writes all of `data` to `fd` (blocking); false if the other side is gone.
bool WriteFully(int fd, const char* data, size_t size, bool socket) {
  while (size > 0) {
    ssize_t n = socket ? send(fd, data, size, MSG_NOSIGNAL) : write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// connect's relay, like nc: `in` to the socket and the socket to `out`, until both directions
// have closed. End-of-file on `in` shuts the socket's sending side (the server sees the end of
// its input); the relay ends when the server has closed its side and `in` has ended or can no
// longer be delivered. Returns the error that broke the connection, if any.
std::optional<std::string> Relay(int in, int out, int sock) {
  bool sending = true, receiving = true;
  char buf[64 << 10];
  while (receiving || sending) {
    pollfd fds[2] = {{sending ? in : -1, POLLIN, 0}, {receiving ? sock : -1, POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return std::string("poll: ") + std::strerror(errno);
    }
    if (fds[0].revents != 0) {
      ssize_t n = read(in, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n > 0 && WriteFully(sock, buf, static_cast<size_t>(n), true)) continue;
      // End of input, or the server no longer takes any: it sees end-of-file.
      sending = false;
      shutdown(sock, SHUT_WR);
    }
    if (fds[1].revents != 0) {
      ssize_t n = read(sock, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return std::string("the connection broke: ") + std::strerror(errno);
      if (n == 0 || !WriteFully(out, buf, static_cast<size_t>(n), false)) {
        receiving = false;
        // The server is done: what we would still send has nowhere to go once it closed.
        if (n == 0 && sending) {
          pollfd probe = {sock, POLLOUT, 0};
          if (poll(&probe, 1, 0) == 1 && (probe.revents & (POLLERR | POLLHUP)) != 0)
            sending = false;
        }
      }
    }
  }
  return std::nullopt;
}

// Regains a lost connection: tries again after 100 ms, doubling up to 2 s, until `seconds`
// have passed since the loss (a broker restart takes about a second, longer after repeated
// crashes). Calls made meanwhile wait no longer than that either.
class Reconnect {
 public:
  Reconnect(kj::Timer& timer, kj::WaitScope& ws, uint32_t seconds)
      : timer_(timer), ws_(ws), seconds_(seconds) {}

  bool regaining() const { return deadline_.has_value(); }
  uint32_t seconds() const { return seconds_; }

  // After a loss, or a failed try since: false once the time is up, else waits and is true.
  bool Retry() {
    if (!deadline_) deadline_ = timer_.now() + seconds_ * kj::SECONDS;
    kj::TimePoint now = timer_.now();
    if (now >= *deadline_) return false;
    timer_.afterDelay(std::min(delay_, *deadline_ - now)).wait(ws_);
    delay_ = std::min(delay_ * 2, 2 * kj::SECONDS);
    return true;
  }
  void Regained() {
    deadline_.reset();
    delay_ = 100 * kj::MILLISECONDS;
  }

  // A disconnect, or a call that timed out while regaining.
  bool IsLost(const kj::Exception& e) const {
    return e.getType() == kj::Exception::Type::DISCONNECTED ||
           (regaining() && e.getType() == kj::Exception::Type::OVERLOADED);
  }

  template <typename T>
  T Wait(kj::Promise<T>&& promise) {
    if (!deadline_) return promise.wait(ws_);
    return timer_.timeoutAt(*deadline_, kj::mv(promise)).wait(ws_);
  }
  template <typename T>
  capnp::Response<T> Wait(capnp::RemotePromise<T>&& promise) {
    return Wait(kj::Promise<capnp::Response<T>>(kj::mv(promise)));
  }

 private:
  kj::Timer& timer_;
  kj::WaitScope& ws_;
  uint32_t seconds_;
  std::optional<kj::TimePoint> deadline_;
  kj::Duration delay_ = 100 * kj::MILLISECONDS;
};

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
  Commands(kj::AsyncIoContext& io, const CommandLine& line, std::shared_ptr<Messages> messages)
      : io_(io),
        ws_(io.waitScope),
        line_(line),
        messages_(kj::mv(messages)),
        conn_(kj::heap<Connection>(io, line.socket)) {}

  int operator()(const RunCommand& run) {
    std::optional<std::string> deployment = ChooseDeployment("run", run.deployment);
    if (!deployment) return kServiceError;
    auto create = CreateRequest(run, *deployment);
    auto creating = create.send();
    api::Sandbox::Client sandbox = creating.getSandbox();
    std::string sandbox_id;
    if (run.keep) {
      sandbox_id = creating.wait(ws_).getInfo().getId();
      // Said first, before any of the process's stderr can reach stderr (messages.h).
      messages_->Say("kept sandbox " + sandbox_id);
    }
    int code = kServiceError;
    kj::Maybe<kj::Exception> error = kj::runCatchingExceptions(
        [&] { code = RunProcess(sandbox, sandbox_id, run.argv, run.process, run.keep); });
    if (!run.keep) {
      // Without --keep the process was started pipelined on the create (no round trip in
      // between): a failed create failed it with the create's own error, and there is nothing
      // to delete.
      kj::Maybe<kj::Exception> not_created =
          kj::runCatchingExceptions([&] { sandbox_id = creating.wait(ws_).getInfo().getId(); });
      KJ_IF_MAYBE (e, not_created) {
        return Fail(Describe(*e));
      }
      std::string why;
      if (!DeleteSandbox(sandbox_id, &why)) {
        std::string undeleted = "sandbox " + sandbox_id + " could not be deleted (" + why +
                                "); delete it with: paseo-sandbox rm " + sandbox_id;
        KJ_IF_MAYBE (e, error) {
          messages_->Say(Describe(*e));
          return Fail(undeleted);
        }
        messages_->Say("the command ended with exit status " + std::to_string(code) + ", but " +
                       undeleted);
        return kCleanupFailed;
      }
    }
    KJ_IF_MAYBE (e, error) {
      return Fail(Describe(*e));
    }
    return code;
  }

  int operator()(const ExecCommand& exec) {
    auto get = conn_->supervisor().getSandboxRequest();
    get.setId(exec.sandbox);
    auto sandbox = get.send().getSandbox();
    return RunProcess(sandbox, exec.sandbox, exec.argv, exec.process, /*detachable=*/true);
  }

  int operator()(const AttachCommand& cmd) {
    auto process = GetProcess(cmd.target);
    // The response owns what its readers point into: keep it while `info` is read.
    auto answer = process.infoRequest().send().wait(ws_);
    auto info = answer.getInfo();
    AttachOptions attach;
    attach.tty = info.getTty();
    attach.forward_stdin = true;
    attach.detach_keys = attach.tty;
    // By default show only what comes next; --from replays history.
    attach.stdout_from = cmd.from ? *cmd.from : info.getStdoutBytes();
    attach.stderr_from = cmd.from ? *cmd.from : info.getStderrBytes();
    attach.messages = messages_;
    if (attach.tty) messages_->Say("attached; Ctrl-P Ctrl-Q detaches");
    int code = kServiceError;
    kj::Maybe<kj::Exception> lost =
        kj::runCatchingExceptions([&] { code = Attach(io_, process, attach); });
    KJ_IF_MAYBE (e, lost) {
      kj::throwFatalException(MayStillRun(kj::mv(*e), cmd.target.sandbox, cmd.target.process));
    }
    return code == kDetached ? 0 : code;
  }

  // Prints a stream from an offset; without --follow, only up to what exists now. A lost
  // connection is regained (Reconnect) and the stream resumed at its next byte.
  int operator()(const LogsCommand& logs) {
    int fd = logs.stream == api::Stream::STDERR ? STDERR_FILENO : STDOUT_FILENO;
    kj::AutoCloseFd file;
    if (!logs.output.empty()) {
      int opened =
          open(logs.output.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0666);
      if (opened < 0) return Fail("cannot open " + logs.output + ": " + std::strerror(errno));
      file = kj::AutoCloseFd(opened);
      fd = opened;
    }
    // All of it goes to `fd`: if that is stderr, none of our messages may (messages.h).
    messages_->StreamWritesTo(fd);

    auto progress = std::make_shared<StreamProgress>();
    progress->next = logs.from;
    api::Stream stream = logs.stream;
    std::optional<uint64_t> until;  // without --follow: the stream's length at the start
    bool resolved = false;           // `stream` and `until` are known
    Reconnect reconnect(io_.provider->getTimer(), ws_, logs.reconnect_seconds);
    auto where = [&] {
      return std::string(StreamName(stream)) + " offset " + std::to_string(progress->next);
    };
    while (true) {
      kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
        if (conn_.get() == nullptr) conn_ = kj::heap<Connection>(io_, line_.socket);
        auto process = GetProcess(logs.target);
        auto answer = reconnect.Wait(process.infoRequest().send());
        auto info = answer.getInfo();  // answer owns what info reads
        if (!resolved) {
          if (info.getTty() && stream == api::Stream::STDOUT) stream = api::Stream::PTY;
          if (!logs.follow) {
            until = stream == api::Stream::STDERR ? info.getStderrBytes() : info.getStdoutBytes();
          }
          resolved = true;
        }
        if (until && progress->next >= *until) return;
        FdOutputSink::Options sink;
        sink.fd = fd;
        sink.stop_at = until;
        sink.messages = messages_;
        sink.progress = progress;
        auto done = kj::newPromiseAndFulfiller<void>();
        auto req = process.subscribeRequest();
        req.setStream(stream);
        req.setFromOffset(progress->next);
        req.setSink(kj::heap<FdOutputSink>(sink, kj::mv(done.fulfiller)));
        std::string resumed_at = where();  // bytes may arrive before the reply
        auto subscription = reconnect.Wait(req.send()).getSubscription();
        if (reconnect.regaining()) {
          messages_->Say("reconnected; resuming at " + resumed_at);
          reconnect.Regained();
        }
        done.promise.wait(ws_);
      });
      KJ_IF_MAYBE (e, error) {
        if (!reconnect.IsLost(*e)) return Fail(ErrorText(*e));
        conn_ = nullptr;
        bool first_loss = !reconnect.regaining();
        if (first_loss && reconnect.seconds() > 0) {
          messages_->Say(std::string(kConnectionLostText) + " at " + where() + "; reconnecting");
        }
        if (!reconnect.Retry()) {
          std::string lost = std::string(kConnectionLostText) + " at " + where();
          if (reconnect.seconds() > 0) {
            lost += " and not regained in " + std::to_string(reconnect.seconds()) + " s";
          }
          messages_->Say(lost + "; resume with: " + ResumeCommand(logs, stream, progress->next));
          return kConnectionLost;
        }
        continue;
      }
      break;
    }
    return progress->lost > 0 ? kOutputIncomplete : 0;
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

  int operator()(const ReleaseCommand& release) {
    GetProcess(release.target).releaseRequest().send().wait(ws_);
    return 0;
  }

  int operator()(const PsCommand&) {
    auto list = conn_->supervisor().listSandboxesRequest().send().wait(ws_);
    JsonWriter json;
    json.BeginArray();
    if (!line_.json) {
      std::printf("%-28s %-16s %-10s %-9s %-15s %s\n", "SANDBOX", "DEPLOYMENT", "STATE",
                  "PROCESSES", "NETWORK", "KEY");
    }
    for (auto sb : list.getSandboxes()) {
      auto get = conn_->supervisor().getSandboxRequest();
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
        if (sb.getKey().size() > 0) {
          json.Key("key");
          json.String(sb.getKey().cStr());
        }
        if (sb.getStateReason().size() > 0) {
          json.Key("stateReason");
          json.String(sb.getStateReason().cStr());
        }
        json.Key("createdAtUnixMs");
        json.Int(sb.getCreatedAtUnixMs());
        json.Key("ownerUid");
        json.Int(sb.getOwnerUid());
        auto network = sb.getNetwork();
        json.Key("network");
        json.BeginObject();
        json.Key("mode");
        json.String(network.getMode().size() > 0 ? network.getMode().cStr() : "none");
        json.Key("address");
        json.String(network.getAddress().cStr());
        json.Key("inboundPorts");
        json.BeginArray();
        for (uint16_t port : network.getInboundPorts()) json.Int(port);
        json.EndArray();
        json.EndObject();
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
        // The sandbox's address, or "none" (loopback only).
        std::string address = sb.getNetwork().getAddress().size() > 0
                                  ? sb.getNetwork().getAddress().cStr()
                                  : "none";
        std::string row(96 + sb.getId().size() + sb.getDeploymentId().size() +
                            sb.getState().size() + address.size() + sb.getKey().size(), '\0');
        row.resize(static_cast<size_t>(std::snprintf(
            row.data(), row.size(), "%-28s %-16s %-10s %-9u %-15s %s", sb.getId().cStr(),
            sb.getDeploymentId().cStr(), sb.getState().cStr(), sb.getProcessCount(),
            address.c_str(), sb.getKey().cStr())));
        row.erase(row.find_last_not_of(' ') + 1);  // no key: no trailing blanks
        std::printf("%s\n", row.c_str());
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

  int operator()(const StatsCommand& stats) {
    bool stream = stats.mode == StatsCommand::Mode::kStream ||
                  (stats.mode == StatsCommand::Mode::kAuto && isatty(STDOUT_FILENO));
    bool terminal = stream && isatty(STDOUT_FILENO) && !line_.json;
    auto sample = [&] {
      auto req = conn_->supervisor().statsRequest();
      auto ids = req.initIds(static_cast<unsigned>(stats.ids.size()));
      for (unsigned i = 0; i < ids.size(); ++i) ids.set(i, stats.ids[i]);
      return req.send().wait(ws_);
    };
    kj::Timer& timer = io_.provider->getTimer();
    // CPU is a rate: the first figures come from two samples one interval apart.
    auto before = sample();
    for (;;) {
      timer.afterDelay(stats.interval_ms * kj::MILLISECONDS).wait(ws_);
      auto now = sample();
      auto rows = StatsRows(before.getStats(), now.getStats());
      std::string text = line_.json ? StatsJson(rows) + "\n" : StatsTable(rows);
      if (terminal) text = "\033[H\033[2J" + text;  // redrawn in place, as docker stats does
      std::fputs(text.c_str(), stdout);
      std::fflush(stdout);
      if (!stream) return 0;
      before = kj::mv(now);
    }
  }

  int operator()(const RmCommand& rm) {
    return EachSandbox(rm.ids, [&](api::Sandbox::Client sandbox) {
      auto del = sandbox.deleteRequest();
      del.setForce(rm.force);
      del.send().wait(ws_);
    });
  }

  int operator()(const PauseCommand& pause) {
    return EachSandbox(pause.ids, [&](api::Sandbox::Client sandbox) {
      sandbox.pauseRequest().send().wait(ws_);
    });
  }

  int operator()(const ResumeCommand& resume) {
    return EachSandbox(resume.ids, [&](api::Sandbox::Client sandbox) {
      sandbox.resumeRequest().send().wait(ws_);
    });
  }

  // Refusals of the connection itself exit 1 (as nc's); a service that cannot be reached is
  // Execute's kServiceError.
  int operator()(const ConnectCommand& cmd) {
    auto get = conn_->supervisor().getSandboxRequest();
    get.setId(cmd.sandbox);
    kj::AutoCloseFd socket;
    kj::Maybe<kj::Exception> refused = kj::runCatchingExceptions(
        [&] { socket = Connect(get.send().getSandbox(), cmd.port).wait(ws_); });
    KJ_IF_MAYBE (e, refused) {
      if (e->getType() == kj::Exception::Type::DISCONNECTED) kj::throwFatalException(kj::mv(*e));
      messages_->Say(Describe(*e));
      return 1;
    }
    std::optional<std::string> broke = Relay(STDIN_FILENO, STDOUT_FILENO, socket.get());
    if (broke) {
      messages_->Say(*broke);
      return 1;
    }
    return 0;
  }

  int operator()(const CreateCommand& cmd) {
    std::optional<std::string> deployment = ChooseDeployment("create", cmd.deployment);
    if (!deployment) return kServiceError;
    auto create = CreateRequest(cmd, *deployment);
    create.getSpec().setKey(cmd.key);
    auto created = create.send().wait(ws_);
    std::string id = created.getInfo().getId();
    if (!created.getCreated())
      messages_->Say("sandbox " + id + " had key " + cmd.key + " already; nothing was created");
    std::printf("%s\n", id.c_str());
    return 0;
  }

  int operator()(const FindCommand& cmd) {
    std::optional<std::string> deployment = ChooseDeployment("find", cmd.deployment);
    if (!deployment) return kServiceError;
    auto find = conn_->supervisor().findSandboxRequest();
    find.setDeploymentId(*deployment);
    find.setKey(cmd.key);
    std::printf("%s\n", find.send().wait(ws_).getInfo().getId().cStr());
    return 0;
  }

  int operator()(const InfoCommand&) {
    auto info = conn_->supervisor().infoRequest().send().wait(ws_);
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
  // The deployment a command names, else $PASEO_SANDBOX_DEPLOYMENT, else the only one the
  // caller may use; nullopt (said) if there is more than one to choose from.
  std::optional<std::string> ChooseDeployment(const std::string& command,
                                              const std::string& named) {
    if (!named.empty()) return named;
    if (std::string env = DefaultDeployment(); !env.empty()) return env;
    auto info = conn_->supervisor().infoRequest().send().wait(ws_);
    if (info.getDeployments().size() == 1) return std::string(info.getDeployments()[0].cStr());
    Fail(command + ": you may use " + std::to_string(info.getDeployments().size()) +
         " deployments; choose one with --deployment or $PASEO_SANDBOX_DEPLOYMENT");
    return std::nullopt;
  }

  // A createSandbox for run's or create's sandbox options.
  template <typename Command>
  capnp::Request<api::Supervisor::CreateSandboxParams, api::Supervisor::CreateSandboxResults>
  CreateRequest(const Command& cmd, const std::string& deployment) {
    auto create = conn_->supervisor().createSandboxRequest();
    auto spec = create.initSpec();
    spec.setDeploymentId(deployment);
    spec.setProfile(cmd.profile);
    auto mounts = spec.initWorkspaces(static_cast<unsigned>(cmd.workspaces.size()));
    for (size_t w = 0; w < cmd.workspaces.size(); ++w) {
      auto mount = mounts[static_cast<unsigned>(w)];
      mount.setPath(cmd.workspaces[w].path);
      mount.setDestination(cmd.workspaces[w].destination);
      mount.setMode(cmd.workspaces[w].mode);
    }
    SetTexts(spec.initCredentials(static_cast<unsigned>(cmd.credentials.size())), cmd.credentials);
    return create;
  }

  // Does `act` to each sandbox by id; an id that fails is said, and the others still go.
  int EachSandbox(const std::vector<std::string>& ids,
                  const std::function<void(api::Sandbox::Client)>& act) {
    int rc = 0;
    for (const auto& id : ids) {
      kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
        auto get = conn_->supervisor().getSandboxRequest();
        get.setId(id);
        act(get.send().getSandbox());
      });
      KJ_IF_MAYBE (e, error) {
        rc = Fail(id + ": " + Describe(*e));
      }
    }
    return rc;
  }

  // Looks up SANDBOX PROCESS for the per-process commands (pipelined: one round trip).
  int Fail(const std::string& message) {
    messages_->Say(message);
    return kServiceError;
  }

  // A lost connection while attached to a process that outlives us: say how to find it again.
  static kj::Exception MayStillRun(kj::Exception&& e, const std::string& sandbox,
                                   const std::string& process) {
    if (e.getType() != kj::Exception::Type::DISCONNECTED) return kj::mv(e);
    return Continued(kj::Exception(e.getType(), __FILE__, __LINE__, kj::str(Describe(e).c_str())),
                     "; process " + process + " in sandbox " + sandbox +
                         " may still be running (paseo-sandbox attach " + sandbox + " " +
                         process + " follows it)");
  }

  // The logs command line that continues a stream at `from`.
  std::string ResumeCommand(const LogsCommand& logs, api::Stream stream, uint64_t from) const {
    std::string cmd = "paseo-sandbox";
    if (line_.socket != DefaultSocketPath()) cmd += " --socket " + line_.socket;
    cmd += std::string(" logs --stream ") + StreamName(stream) + " --from " + std::to_string(from);
    if (logs.follow) cmd += " -f";
    if (!logs.output.empty()) cmd += " -o " + logs.output;
    return cmd + " " + logs.target.sandbox + " " + logs.target.process;
  }

  // Deletes a sandbox (force), on a new connection if the current one is lost. After a loss,
  // not-found means the delete went through.
  bool DeleteSandbox(const std::string& id, std::string* why) {
    Reconnect reconnect(io_.provider->getTimer(), ws_, kDefaultReconnectSeconds);
    while (true) {
      kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
        if (conn_.get() == nullptr) conn_ = kj::heap<Connection>(io_, line_.socket);
        auto get = conn_->supervisor().getSandboxRequest();
        get.setId(id);
        auto del = get.send().getSandbox().deleteRequest();
        del.setForce(true);
        reconnect.Wait(del.send());
      });
      KJ_IF_MAYBE (e, error) {
        if (reconnect.regaining() && ErrorText(*e).rfind("not-found:", 0) == 0) return true;
        if (reconnect.IsLost(*e)) {
          conn_ = nullptr;
          if (reconnect.Retry()) continue;
        }
        *why = Describe(*e);
        return false;
      }
      return true;
    }
  }

  api::Process::Client GetProcess(const ProcessRef& ref) {
    auto get = conn_->supervisor().getSandboxRequest();
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
    spec.setKey(p.key);
    spec.setOutput(DefaultOutputMode(p));
    spec.setReportUnkept(p.report_unkept);
    if (p.tty) {
      uint16_t rows, cols;
      TerminalSize(&rows, &cols);
      spec.setRows(rows);
      spec.setCols(cols);
    }
    auto starting = start.send();
    AttachOptions attach;
    attach.tty = p.tty;
    attach.forward_stdin = p.interactive;
    attach.detach_keys = p.tty && p.interactive && detachable;
    attach.messages = messages_;
    // A process that outlives us (exec, run --keep) is attached once it has an id, which a lost
    // connection's hint names. One that does not (run) is attached pipelined on the promised
    // process: no round trip between the sandbox's creation and the process's end but the
    // service's own work (docs/performance.md, "One-shot command").
    attach.pipelined = !detachable;
    api::Process::Client process = starting.getProcess();
    std::string process_id;
    if (!attach.pipelined) {
      auto started = starting.wait(ws_);
      process = started.getProcess();
      process_id = started.getInfo().getId();
    }
    // Without -i, stdin reads end-of-file at once, as `docker run` without -i gives: a pipe
    // nothing writes to would block whatever reads it (codex exec reads stdin when it is not a
    // terminal). Pipelined: no round trip. A terminal has no end of input (closeInput would type
    // its EOF character), so a tty without -i is left as it is: nothing is typed.
    kj::Promise<void> closing = kj::READY_NOW;
    if (!p.interactive && !p.tty) {
      closing = process.closeInputRequest().send().ignoreResult().catch_(
          [](kj::Exception&&) {});  // a process already gone has nothing to close
    }
    int code = kServiceError;
    kj::Maybe<kj::Exception> lost =
        kj::runCatchingExceptions([&] { code = Attach(io_, process, attach); });
    KJ_IF_MAYBE (e, lost) {
      // Without `detachable` (run without --keep) the sandbox is deleted next: no hint.
      if (detachable) kj::throwFatalException(MayStillRun(kj::mv(*e), sandbox_id, process_id));
      kj::throwFatalException(kj::mv(*e));
    }
    if (code == kDetached) {
      messages_->Say("process " + process_id + " keeps running; reattach with: paseo-sandbox " +
                     "attach " + sandbox_id + " " + process_id);
      return 0;
    }
    return code;
  }

  kj::AsyncIoContext& io_;
  kj::WaitScope& ws_;
  const CommandLine& line_;
  std::shared_ptr<Messages> messages_;
  kj::Own<Connection> conn_;  // replaced after a lost connection (logs, run's clean-up)
};

}  // namespace

bool NeedsAttachSignals(const CommandLine& line) {
  return std::holds_alternative<RunCommand>(line.command) ||
         std::holds_alternative<ExecCommand>(line.command) ||
         std::holds_alternative<AttachCommand>(line.command);
}

int Execute(kj::AsyncIoContext& io, const CommandLine& line) {
  std::shared_ptr<Messages> messages;
  if (line.messages.empty()) {
    messages = std::make_shared<Messages>(STDERR_FILENO);
  } else {
    int fd = open(line.messages.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY,
                  0666);
    if (fd < 0) {
      std::fprintf(stderr, "paseo-sandbox: cannot open %s: %s\n", line.messages.c_str(),
                   std::strerror(errno));
      return kServiceError;
    }
    messages = std::make_shared<Messages>(kj::AutoCloseFd(fd));
  }
  int rc = kServiceError;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&] {
    Commands commands(io, line, messages);
    rc = std::visit(commands, line.command);
  });
  KJ_IF_MAYBE (e, error) {
    messages->Say(Describe(*e));
    return kServiceError;
  }
  return rc;
}

}  // namespace paseo::client
