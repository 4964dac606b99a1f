// See exec.h.
#include "runtime/exec.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <vector>

#include <kj/async-unix.h>
#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "common/process_exit.h"
#include "runtime/event_order.h"
#include "runtime/lifecycle.h"
#include "runtime/strict_json.h"

namespace paseo::runtime {

absl::StatusOr<std::optional<std::string>> ReadLine(int fd, std::string& rest) {
  std::string line = std::move(rest);
  rest.clear();
  size_t scanned = 0;
  for (;;) {
    size_t nl = line.find('\n', scanned);
    if (nl != std::string::npos) {
      rest = line.substr(nl + 1);
      line.resize(nl);
      if (line.size() > kMaxMessageBytes)
        return absl::InvalidArgumentError(absl::StrCat("a message on fd ", fd, " is longer than ",
                                                       kMaxMessageBytes, " bytes"));
      return std::optional<std::string>(std::move(line));
    }
    scanned = line.size();
    if (line.size() > kMaxMessageBytes)
      return absl::InvalidArgumentError(absl::StrCat("a message on fd ", fd, " is longer than ",
                                                     kMaxMessageBytes, " bytes"));
    char buf[16384];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLIN, 0};
      poll(&p, 1, -1);
      continue;
    }
    if (n < 0) return absl::UnavailableError(absl::StrCat("reading fd ", fd, ": ", strerror(errno)));
    if (n == 0) {
      if (line.empty()) return std::optional<std::string>();
      return absl::InvalidArgumentError(
          absl::StrCat("fd ", fd, " ended inside a message (every message ends in a newline)"));
    }
    line.append(buf, static_cast<size_t>(n));
  }
}

std::vector<std::string> WorkloadEnv(const SpawnEnvelope& envelope) {
  std::vector<std::string> env;
  bool has_term = false;
  for (const auto& [name, value] : envelope.env) {
    env.push_back(absl::StrCat(name, "=", value));
    has_term = has_term || name == "TERM";
  }
  if (envelope.pty && envelope.pty->term && !has_term) env.push_back("TERM=" + *envelope.pty->term);
  return env;
}

namespace {

constexpr int64_t kDefaultReconnectMs = 60000;
constexpr size_t kStdinChunk = 64 * 1024;
// How long a forwarded signal is retried while the workload is still starting.
constexpr int64_t kSignalRetryMs = 5000;

// Blocking write of all of `text` (fd 4 events are small; Paseo reads them as they come).
void WriteAll(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      pollfd p{fd, POLLOUT, 0};
      poll(&p, 1, -1);
      continue;
    }
    if (n <= 0) return;  // Paseo is gone; nobody to tell
    done += static_cast<size_t>(n);
  }
}

class ExecRun;

// One output stream of the workload, forwarded to fd 1 or fd 2.
struct StreamState {
  api::Stream which;
  kj::Own<kj::AsyncOutputStream> out;
  uint64_t written = 0;  // bytes of the stream already on the fd: where a resubscribe starts
  bool ended = false;
  bool broken = false;  // the reader closed the fd; the rest is discarded
  kj::Maybe<api::Subscription::Client> subscription;
};

class ExecRun final : public kj::TaskSet::ErrorHandler {
 public:
  ExecRun(kj::AsyncIoContext& io, std::string workspace_id, std::string default_socket,
          ExecFds fds)
      : io_(io),
        workspace_id_(std::move(workspace_id)),
        default_socket_(std::move(default_socket)),
        fds_(fds),
        tasks_(*this) {}

  ExecOutcome Run();

  void taskFailed(kj::Exception&& e) override { Fail(client::ErrorText(e)); }

  // OutputSink callbacks.
  kj::Promise<void> OnWrite(StreamState& st, uint64_t generation, uint64_t offset,
                            capnp::Data::Reader data);
  void OnGap(uint64_t generation, uint64_t lost);
  void OnEnd(StreamState& st, uint64_t generation, ProcessExit status, uint64_t end_offset);

 private:
  absl::Status Prepare();
  absl::Status Start();
  void Subscribe();
  kj::Promise<void> PumpStdin();
  kj::Promise<void> CloseInput();
  kj::Promise<void> ReadControl();
  kj::Promise<void> HandleControl(const std::string& line);
  kj::Promise<void> ApplyResize(const ResizeControl& resize);
  void SendSignal(int sig);
  kj::Promise<void> ForwardSignals(int sig);
  kj::Promise<void> WatchConnection();
  void Reconnect();
  absl::Status FindProcess();
  void Wake();
  void KillWorkload();
  void Emit(const absl::StatusOr<std::string>& events);
  void Finish();
  void Fail(const std::string& message);
  void FailAndKill(const std::string& message);

  kj::AsyncIoContext& io_;
  std::string workspace_id_, default_socket_;
  ExecFds fds_;
  SpawnEnvelope envelope_;
  std::string control_rest_;  // bytes read from fd 3 after the envelope
  std::string socket_;
  std::vector<kj::Own<client::Connection>> connections_;  // the current one last
  kj::Maybe<Session> session_;
  kj::Maybe<api::Process::Client> process_;
  kj::Maybe<EventOrder> order_;
  StreamState streams_[2];
  int stream_count_ = 0;
  uint64_t generation_ = 0;  // bumped per connection: callbacks of older ones are ignored
  std::vector<ResizeControl> pending_resizes_;
  std::vector<int> pending_signals_;
  kj::Own<kj::AsyncInputStream> stdin_;
  kj::Own<kj::AsyncInputStream> control_;  // fd 3 after the envelope (a pty's frames)
  kj::Array<kj::byte> stdin_buf_;
  bool stdin_in_flight_ = false;
  bool close_input_ = false;  // closeInput sent and not yet answered
  bool done_ = false;
  bool disconnected_ = false;
  bool kill_ = false;  // failed with the workload still running: kill it before exiting
  ExecOutcome outcome_;
  kj::Own<kj::PromiseFulfiller<void>> wake_;  // Run's loop: done_ or disconnected_ changed
  kj::TaskSet tasks_;
};

class Sink final : public api::OutputSink::Server {
 public:
  Sink(ExecRun& run, StreamState& st, uint64_t generation)
      : run_(run), st_(st), generation_(generation) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto params = context.getParams();
    return run_.OnWrite(st_, generation_, params.getOffset(), params.getData());
  }
  kj::Promise<void> gap(GapContext context) override {
    run_.OnGap(generation_, context.getParams().getLostBytes());
    return kj::READY_NOW;
  }
  kj::Promise<void> end(EndContext context) override {
    auto params = context.getParams();
    run_.OnEnd(st_, generation_, FromCapnp(params.getStatus()), params.getEndOffset());
    return kj::READY_NOW;
  }

 private:
  ExecRun& run_;
  StreamState& st_;
  uint64_t generation_;
};

absl::Status ExecRun::Prepare() {
  auto line = ReadLine(fds_.control, control_rest_);
  if (!line.ok()) return line.status();
  if (!line->has_value()) return absl::InvalidArgumentError("fd 3 ended without a spawn envelope");
  auto envelope = ParseSpawnEnvelope(**line);
  if (!envelope.ok()) return envelope.status();
  envelope_ = *std::move(envelope);
  if (!envelope_.pty && !control_rest_.empty())
    return absl::InvalidArgumentError("fd 3 carries more than the spawn envelope for pipes");
  if (envelope_.pty && (envelope_.pty->rows > 65535 || envelope_.pty->cols > 65535))
    return absl::InvalidArgumentError("spawn.stdio: rows and cols must be at most 65535");
  for (const auto& arg : envelope_.argv) {
    if (arg.empty() && &arg == &envelope_.argv[0])
      return absl::InvalidArgumentError("spawn.argv[0]: must not be empty");
  }
  socket_ = envelope_.options.socket.value_or(default_socket_);
  connections_.push_back(kj::heap<client::Connection>(io_, socket_));
  auto supervisor = connections_.back()->supervisor();
  auto deployment = ResolveDeployment(io_.waitScope, supervisor, envelope_.options);
  if (!deployment.ok()) return deployment.status();
  session_ = Session{io_.waitScope, io_.provider->getTimer(), supervisor, *deployment,
                     envelope_.runtime_instance_id, envelope_.options};
  return absl::OkStatus();
}

absl::Status ExecRun::Start() {
  Session& s = KJ_ASSERT_NONNULL(session_);
  auto found = FindWorkspace(s, workspace_id_);
  if (!found.ok()) return found.status();
  if (!found->has_value())
    return absl::FailedPreconditionError(absl::StrCat("workspace ", workspace_id_, " has no sandbox"));
  absl::Status owned = CheckOwned(s, **found, workspace_id_);
  if (!owned.ok()) return owned;
  auto req = (*found)->sandbox.startProcessRequest();
  auto spec = req.initSpec();
  auto argv = spec.initArgv(static_cast<unsigned>(envelope_.argv.size()));
  for (unsigned i = 0; i < envelope_.argv.size(); ++i) argv.set(i, envelope_.argv[i]);
  std::vector<std::string> env = WorkloadEnv(envelope_);
  auto env_list = spec.initEnv(static_cast<unsigned>(env.size()));
  for (unsigned i = 0; i < env.size(); ++i) env_list.set(i, env[i]);
  if (envelope_.cwd && !envelope_.cwd->empty()) spec.setWorkspaceCwd(*envelope_.cwd);
  spec.setExactEnv(true);  // the contract: exactly the envelope's env, nothing added
  if (envelope_.pty) {
    spec.setTty(true);
    spec.setRows(static_cast<uint16_t>(envelope_.pty->rows));
    spec.setCols(static_cast<uint16_t>(envelope_.pty->cols));
  }
  spec.setKey(envelope_.exec_id);
  spec.setOutput(api::OutputMode::LOSSLESS);
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    process_ = req.send().wait(io_.waitScope).getProcess();
  });
  KJ_IF_MAYBE(e, error) {
    return absl::FailedPreconditionError(absl::StrCat("starting the workload: ", client::ErrorText(*e)));
  }
  return absl::OkStatus();
}

void ExecRun::Subscribe() {
  ++generation_;
  for (int i = 0; i < stream_count_; ++i) {
    StreamState& st = streams_[i];
    if (st.ended) continue;
    auto req = KJ_ASSERT_NONNULL(process_).subscribeRequest();
    req.setStream(st.which);
    req.setFromOffset(st.written);
    req.setSink(kj::heap<Sink>(*this, st, generation_));
    st.subscription = req.send().getSubscription();
  }
}

kj::Promise<void> ExecRun::OnWrite(StreamState& st, uint64_t generation, uint64_t offset,
                                   capnp::Data::Reader data) {
  if (generation != generation_ || done_) return kj::READY_NOW;
  uint64_t end = offset + data.size();
  if (offset > st.written) {
    Fail(absl::StrCat("output bytes ", st.written, "..", offset, " never arrived"));
    return kj::READY_NOW;
  }
  if (end <= st.written) return kj::READY_NOW;  // already written before a reconnect
  auto rest = data.slice(st.written - offset, data.size());
  st.written = end;
  if (st.broken) return kj::READY_NOW;
  return st.out->write(rest.begin(), rest.size()).catch_([&st](kj::Exception&&) {
    // Paseo closed this stream's reading end: keep the workload going, drop what it writes.
    st.broken = true;
  });
}

void ExecRun::OnGap(uint64_t generation, uint64_t lost) {
  if (generation != generation_) return;
  Fail(absl::StrCat(lost, " bytes of output were lost (gap on a lossless stream)"));
}

void ExecRun::OnEnd(StreamState& st, uint64_t generation, ProcessExit status,
                    uint64_t end_offset) {
  if (generation != generation_ || done_ || st.ended) return;
  if (end_offset != st.written) {
    Fail(absl::StrCat("output ended at ", end_offset, " but ", st.written, " bytes arrived"));
    return;
  }
  st.ended = true;
  EventOrder& order = KJ_ASSERT_NONNULL(order_);
  Emit(order.StreamEnded());
  for (int i = 0; i < stream_count_; ++i) {
    if (!streams_[i].ended) return;
  }
  std::optional<int> code;
  std::optional<std::string> signal;
  switch (status.kind) {
    case ProcessExit::kExited:
      code = status.value;
      outcome_.exit_code = status.value;
      break;
    case ProcessExit::kSignaled: {
      std::string name = SignalName(status.value);
      if (name.empty()) {
        code = 128 + status.value;  // no name Node knows
        outcome_.exit_code = code;
      } else {
        signal = name;
        outcome_.signal = status.value;
      }
      break;
    }
    case ProcessExit::kOomKilled:
      // As on a host: the kernel's OOM killer sends SIGKILL.
      fprintf(stderr, "paseo-sandbox-runtime: the sandbox exceeded its memory limit\n");
      signal = "SIGKILL";
      outcome_.signal = SIGKILL;
      break;
    default:
      Fail("the service could not learn how the workload ended (see its stderr)");
      return;
  }
  Emit(order.Exit(code, signal));
  Finish();
}

void ExecRun::Emit(const absl::StatusOr<std::string>& events) {
  if (!events.ok()) {
    Fail(absl::StrCat("internal error: fd 4 event order: ", events.status().message()));
    return;
  }
  if (!events->empty()) WriteAll(fds_.events, *events);
}

void ExecRun::Finish() {
  if (done_) return;
  done_ = true;
  close(fds_.events);
  Wake();
}

void ExecRun::Wake() {
  if (wake_ && wake_->isWaiting()) wake_->fulfill();
}

void ExecRun::Fail(const std::string& message) {
  if (done_) return;
  fprintf(stderr, "paseo-sandbox-runtime exec: %s\n", message.c_str());
  std::string event = order_ == nullptr ? ErrorEvent(message)
                                        : KJ_ASSERT_NONNULL(order_).Error(message);
  if (!event.empty()) WriteAll(fds_.events, event);
  outcome_.failed = true;
  Finish();
}

void ExecRun::FailAndKill(const std::string& message) {
  kill_ = true;
  Fail(message);
}

// Outside event callbacks (it waits), bounded: the wrapper exits right after, and Paseo's
// `signal` cleanup is the backstop.
void ExecRun::KillWorkload() {
  KJ_IF_MAYBE(p, process_) {
    auto req = p->signalRequest();
    req.setSignal(SIGKILL);
    req.send()
        .ignoreResult()
        .catch_([](kj::Exception&&) {})
        .exclusiveJoin(io_.provider->getTimer().afterDelay(500 * kj::MILLISECONDS))
        .wait(io_.waitScope);
  }
}

kj::Promise<void> ExecRun::PumpStdin() {
  if (stdin_.get() == nullptr) {
    stdin_ = io_.lowLevelProvider->wrapInputFd(fds_.in);
    stdin_buf_ = kj::heapArray<kj::byte>(kStdinChunk);
  }
  return stdin_->tryRead(stdin_buf_.begin(), 1, stdin_buf_.size())
      .then([this](size_t n) -> kj::Promise<void> {
        if (done_) return kj::READY_NOW;
        auto& process = KJ_ASSERT_NONNULL(process_);
        if (n == 0) {
          // A terminal has no end of input; a pipe workload reads end-of-file.
          if (envelope_.pty) return kj::READY_NOW;
          return CloseInput();
        }
        auto req = process.writeInputRequest();
        req.setData(capnp::Data::Reader(stdin_buf_.begin(), n));
        stdin_in_flight_ = true;
        return req.send().then(
            [this]() {
              stdin_in_flight_ = false;
              return PumpStdin();
            },
            [this](kj::Exception&& e) {
              // Whether those bytes reached the workload is unknown: resending could
              // duplicate them, dropping could lose them. Either breaks an agent's protocol.
              Fail(absl::StrCat("stdin bytes were in flight when the connection to "
                                "paseo-sandbox failed: ", client::ErrorText(e)));
            });
      });
}

kj::Promise<void> ExecRun::CloseInput() {
  close_input_ = true;
  return KJ_ASSERT_NONNULL(process_).closeInputRequest().send().ignoreResult().then(
      [this]() { close_input_ = false; },
      [this](kj::Exception&& e) {
        // closeInput is idempotent: after a reconnect it is sent again (Reconnect).
        if (e.getType() != kj::Exception::Type::DISCONNECTED) Fail(client::ErrorText(e));
      });
}

kj::Promise<void> ExecRun::ReadControl() {
  size_t nl = control_rest_.find('\n');
  if (nl != std::string::npos) {
    std::string line = control_rest_.substr(0, nl);
    control_rest_.erase(0, nl + 1);
    return HandleControl(line).then([this]() { return done_ ? kj::Promise<void>(kj::READY_NOW) : ReadControl(); });
  }
  if (control_rest_.size() > kMaxMessageBytes) {
    FailAndKill("a control frame on fd 3 is too long");
    return kj::READY_NOW;
  }
  // Wrapped once: the event port refuses a second registration of the same fd.
  if (control_.get() == nullptr) control_ = io_.lowLevelProvider->wrapInputFd(fds_.control);
  auto buf = kj::heapArray<char>(16384);
  auto read = control_->tryRead(buf.begin(), 1, buf.size());
  return read.then([this, buf = kj::mv(buf)](size_t n) mutable -> kj::Promise<void> {
    if (done_) return kj::READY_NOW;
    if (n == 0) {
      // Closing fd 3 is the control EOF; a partial frame before it is not.
      if (!control_rest_.empty()) FailAndKill("fd 3 ended inside a control frame");
      return kj::READY_NOW;
    }
    control_rest_.append(buf.begin(), n);
    return ReadControl();
  });
}

kj::Promise<void> ExecRun::HandleControl(const std::string& line) {
  auto control = ParseControl(line);
  if (control.ok() && std::holds_alternative<ResizeControl>(*control)) {
    const auto& r = std::get<ResizeControl>(*control);
    if (r.rows > 65535 || r.cols > 65535)
      control = absl::InvalidArgumentError("resize: rows and cols must be at most 65535");
  }
  if (!control.ok()) {
    FailAndKill(absl::StrCat("invalid control frame on fd 3: ", control.status().message()));
    return kj::READY_NOW;
  }
  if (auto* signal = std::get_if<SignalControl>(&*control)) {
    SendSignal(SignalNumber(signal->signal));
    return kj::READY_NOW;
  }
  const auto& resize = std::get<ResizeControl>(*control);
  if (process_ == nullptr) {
    pending_resizes_.push_back(resize);
    return kj::READY_NOW;
  }
  return ApplyResize(resize);
}

kj::Promise<void> ExecRun::ApplyResize(const ResizeControl& resize) {
  auto req = KJ_ASSERT_NONNULL(process_).resizeRequest();
  req.setRows(static_cast<uint16_t>(resize.rows));
  req.setCols(static_cast<uint16_t>(resize.cols));
  int64_t id = resize.id;
  return req.send().ignoreResult().then(
      [this, id]() {
        if (done_) return;
        EventOrder& order = KJ_ASSERT_NONNULL(order_);
        // After eof the terminal is gone: nothing to acknowledge (Paseo forbids resized then).
        if (order.started() && !order.finished()) {
          auto ack = order.Resized(id);
          if (ack.ok()) WriteAll(fds_.events, *ack);
        }
      },
      [](kj::Exception&&) {
        // The process ended meanwhile (resize of an ended tty fails): its exit follows.
      });
}

void ExecRun::SendSignal(int sig) {
  if (process_ == nullptr) {
    pending_signals_.push_back(sig);
    return;
  }
  auto& timer = io_.provider->getTimer();
  // A signal to a process that just ended is refused; its exit follows anyway.
  tasks_.add(SignalWhenStarted(KJ_ASSERT_NONNULL(process_), sig, timer,
                               timer.now() + kSignalRetryMs * kj::MILLISECONDS)
                 .catch_([](kj::Exception&&) {}));
}

kj::Promise<void> ExecRun::ForwardSignals(int sig) {
  return io_.unixEventPort.onSignal(sig).then([this, sig](siginfo_t) {
    if (done_) return kj::Promise<void>(kj::READY_NOW);
    SendSignal(sig);
    return ForwardSignals(sig);
  });
}

absl::Status ExecRun::FindProcess() {
  Session& s = KJ_ASSERT_NONNULL(session_);
  auto found = FindWorkspace(s, workspace_id_);
  if (!found.ok()) return found.status();
  if (!found->has_value()) return absl::NotFoundError("the workspace's sandbox is gone");
  auto req = (*found)->sandbox.findProcessRequest();
  req.setKey(envelope_.exec_id);
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
    auto res = req.send().wait(io_.waitScope);
    if (res.getReleased()) {
      KJ_FAIL_REQUIRE("the workload ended and its output was released while disconnected");
    }
    process_ = res.getProcess();
  });
  KJ_IF_MAYBE(e, error) { return absl::UnavailableError(client::ErrorText(*e)); }
  return absl::OkStatus();
}

kj::Promise<void> ExecRun::WatchConnection() {
  return connections_.back()->onDisconnect().then([this]() {
    if (done_) return;
    if (stdin_in_flight_) {
      Fail("the connection to paseo-sandbox dropped while stdin bytes were in flight");
      return;
    }
    ++generation_;  // ignore the old sinks from now on
    disconnected_ = true;
    Wake();
  });
}

// Synchronous (it waits): from Run's loop only. Other tasks keep running meanwhile.
void ExecRun::Reconnect() {
  disconnected_ = false;
  auto& timer = io_.provider->getTimer();
  int64_t ms = envelope_.options.reconnect_ms.value_or(kDefaultReconnectMs);
  fprintf(stderr, "paseo-sandbox-runtime exec: lost the connection to paseo-sandbox; "
                  "reconnecting (up to %lld ms)\n", static_cast<long long>(ms));
  kj::TimePoint deadline = timer.now() + ms * kj::MILLISECONDS;
  for (;;) {
    timer.afterDelay(200 * kj::MILLISECONDS).wait(io_.waitScope);
    if (done_) return;
    absl::Status st;
    kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() {
      connections_.push_back(kj::heap<client::Connection>(io_, socket_));
    });
    KJ_IF_MAYBE(e, error) {
      st = absl::UnavailableError(client::ErrorText(*e));
    } else {
      KJ_ASSERT_NONNULL(session_).supervisor = connections_.back()->supervisor();
      st = FindProcess();
    }
    if (st.ok()) {
      fprintf(stderr, "paseo-sandbox-runtime exec: reconnected\n");
      Subscribe();
      tasks_.add(WatchConnection());
      if (close_input_) tasks_.add(CloseInput());
      return;
    }
    if (timer.now() >= deadline) {
      Fail(absl::StrCat("could not reconnect to paseo-sandbox: ", st.message()));
      return;
    }
  }
}

ExecOutcome ExecRun::Run() {
  signal(SIGPIPE, SIG_IGN);
  absl::Status prepared;
  kj::Maybe<kj::Exception> error = kj::runCatchingExceptions([&]() { prepared = Prepare(); });
  KJ_IF_MAYBE(e, error) { prepared = absl::UnavailableError(client::ErrorText(*e)); }
  if (!prepared.ok()) {
    Fail(std::string(prepared.message()));
    return outcome_;
  }
  bool pty = envelope_.pty.has_value();
  stream_count_ = pty ? 1 : 2;
  streams_[0].which = pty ? api::Stream::PTY : api::Stream::STDOUT;
  streams_[0].out = io_.lowLevelProvider->wrapOutputFd(fds_.out);
  if (!pty) {
    streams_[1].which = api::Stream::STDERR;
    streams_[1].out = io_.lowLevelProvider->wrapOutputFd(fds_.err);
  }
  order_.emplace(pty, stream_count_);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) tasks_.add(ForwardSignals(sig));
  // A pty's frames may come before the process exists: resizes are applied (and acked)
  // right after started, signals sent then.
  if (pty) tasks_.add(ReadControl());
  absl::Status started = Start();
  if (!started.ok()) {
    Fail(std::string(started.message()));
    return outcome_;
  }
  if (done_) {  // an invalid control frame came while it started
    KillWorkload();
    return outcome_;
  }
  Emit(KJ_ASSERT_NONNULL(order_).Started());
  for (int sig : pending_signals_) SendSignal(sig);
  pending_signals_.clear();
  // Sent now, in order, before any later frame's resize: acknowledged in that order.
  for (const auto& r : pending_resizes_) tasks_.add(ApplyResize(r));
  pending_resizes_.clear();
  Subscribe();
  tasks_.add(PumpStdin());
  tasks_.add(WatchConnection());
  while (!done_) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    wake_ = kj::mv(paf.fulfiller);
    if (!done_ && !disconnected_) paf.promise.wait(io_.waitScope);
    if (disconnected_ && !done_) Reconnect();
  }
  if (kill_) KillWorkload();
  return outcome_;
}

}  // namespace

ExecOutcome RunExec(kj::AsyncIoContext& io, const std::string& workspace_id,
                    const std::string& default_socket, const ExecFds& fds) {
  ExecRun run(io, workspace_id, default_socket, fds);
  return run.Run();
}

}  // namespace paseo::runtime
