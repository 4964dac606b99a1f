// See broker.h.
#include "broker/broker.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>

#include <kj/debug.h>
#include <kj/io.h>

#include "absl/strings/str_cat.h"
#include "common/ids.h"
#include "broker/record_store.h"
#include "common/rpc_errors.h"
#include "common/tty_frames.h"

namespace paseo {
namespace {

constexpr size_t kMaxLabels = 32;
constexpr size_t kMaxLabelBytes = 256;
constexpr size_t kChunk = 64 * 1024;
constexpr char kVersion[] = "paseo-sandbox 0.1.0";

[[noreturn]] void Fail(const absl::Status& status) {
  kj::throwFatalException(StatusToException(status));
}

// A failure from the privhelper keeps its reason token; anything else becomes internal.
kj::Exception Forwarded(kj::Exception&& e) {
  std::string d = ClientFacingDescription(e);
  if (d.find(": ") == std::string::npos) d = "internal: " + d;
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::heapString(d.data(), d.size()));
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void FillProcessInfo(const ProcessRecord& p, api::ProcessInfo::Builder out) {
  out.setId(p.id);
  out.setTty(p.tty);
  out.setSandboxId(p.sandbox_id);
  auto argv = out.initArgv(static_cast<unsigned>(p.argv.size()));
  for (size_t i = 0; i < p.argv.size(); ++i) argv.set(static_cast<unsigned>(i), p.argv[i]);
  p.exit.To(out.initStatus());
  out.setStdoutBytes(p.stdout_log->end());
  out.setStderrBytes(p.stderr_log->end());
}

void FillSandboxInfo(const SandboxRecord& s, api::SandboxInfo::Builder out) {
  out.setId(s.id);
  out.setDeploymentId(s.deployment_id);
  out.setProfile(s.profile);
  out.setState(s.state);
  out.setCreatedAtUnixMs(s.created_ms);
  out.setOwnerUid(s.owner_uid);
  out.setProcessCount(static_cast<uint32_t>(s.processes.size()));
  auto labels = out.initLabels(static_cast<unsigned>(s.labels.size()));
  for (size_t i = 0; i < s.labels.size(); ++i) {
    labels[static_cast<unsigned>(i)].setKey(s.labels[i].first);
    labels[static_cast<unsigned>(i)].setValue(s.labels[i].second);
  }
}

// Moves a pipe's bytes into the process's log until EOF, with splice: a byte is in the pipe
// or in the log, never only in our memory. Moving never waits for any subscriber, so a slow
// client cannot stall the process.
// The fd and its observer travel together; the observer must go first (it unregisters the fd
// from epoll), so `fd` is declared first and destroyed last (regression: closing the fd first
// left a dangling epoll entry that a later hang-up fired into).
struct DrainSource {
  kj::AutoCloseFd fd;
  kj::Own<kj::UnixEventPort::FdObserver> observer;
};

kj::Promise<void> Drain(kj::Own<DrainSource> source, OutputLog& log) {
  bool eof = false, more = false;
  auto moved = log.SpliceFrom(source->fd.get(), &eof, &more);
  if (!moved.ok() || eof) {
    if (!moved.ok()) KJ_LOG(ERROR, "output log failed", moved.status().ToString());
    log.Close();
    return kj::READY_NOW;
  }
  // Edge-triggered: only wait for readability once the pipe is empty; after a bounded turn
  // with more to move, yield to the event loop and continue.
  auto next = more ? kj::evalLater([] {}) : source->observer->whenBecomesReadable();
  return next.then([source = kj::mv(source), &log]() mutable {
    return Drain(kj::mv(source), log);
  });
}

// Delivers one stream to one subscriber: gap if needed, kept bytes, live bytes, then end.
// Each step waits for the sink's flow control, so every subscriber has its own pace.
kj::Promise<void> Deliver(kj::Own<ProcessRecord> p, api::Stream stream, uint64_t next,
                          api::OutputSink::Client sink) {
  OutputLog& buf = p->buffer(stream);
  if (next < buf.start()) {
    auto req = sink.gapRequest();
    req.setLostBytes(buf.start() - next);
    uint64_t resume = buf.start();
    return req.send().then([p = kj::mv(p), stream, resume, sink](auto&&) mutable {
      return Deliver(kj::mv(p), stream, resume, kj::mv(sink));
    });
  }
  if (next < buf.end()) {
    std::string bytes = buf.Read(next, kChunk);
    auto req = sink.writeRequest();
    req.setOffset(next);
    req.setData(kj::arrayPtr(reinterpret_cast<const capnp::byte*>(bytes.data()), bytes.size()));
    uint64_t after = next + bytes.size();
    return req.send().then([p = kj::mv(p), stream, after, sink]() mutable {
      return Deliver(kj::mv(p), stream, after, kj::mv(sink));
    });
  }
  if (buf.closed() && p->ended()) {
    auto req = sink.endRequest();
    p->exit.To(req.initStatus());
    req.setEndOffset(buf.end());
    return req.send().ignoreResult();
  }
  auto changed = buf.closed() ? p->WhenEnded() : buf.WhenChanged();
  return changed.then([p = kj::mv(p), stream, next, sink]() mutable {
    return Deliver(kj::mv(p), stream, next, kj::mv(sink));
  });
}

class SubscriptionImpl final : public api::Subscription::Server {
 public:
  explicit SubscriptionImpl(kj::Promise<void> delivery)
      : delivery_(delivery.eagerlyEvaluate([](kj::Exception&&) {
          // The client went away or its sink failed: nothing more to deliver.
        })) {}

 private:
  kj::Promise<void> delivery_;
};

class ProcessImpl final : public api::Process::Server {
 public:
  ProcessImpl(Broker& broker, Peer peer, std::string sandbox_id, kj::Own<ProcessRecord> p)
      : broker_(broker), peer_(std::move(peer)), sandbox_id_(std::move(sandbox_id)),
        p_(kj::mv(p)) {}

 protected:
  kj::Promise<void> info(InfoContext context) override {
    Check();
    FillProcessInfo(*p_, context.getResults().initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> writeInput(WriteInputContext context) override {
    Check();
    auto data = context.getParams().getData();
    if (p_->input_closed) Fail(absl::FailedPreconditionError("input is closed"));
    if (data.size() == 0) return kj::READY_NOW;
    std::string_view bytes(reinterpret_cast<const char*>(data.begin()), data.size());
    std::vector<std::string> chunks;
    if (p_->tty) chunks = tty::EncodeData(bytes);  // the relay reads frames (tty_frames.h)
    else chunks.emplace_back(bytes);
    return Enqueue(kj::mv(chunks));
  }

  kj::Promise<void> closeInput(CloseInputContext context) override {
    Check();
    if (p_->tty) {
      // The terminal stays open (resize still works); the relay types the EOF character.
      if (p_->input_closed || p_->stdin_stream == nullptr) return kj::READY_NOW;
      p_->input_closed = true;
      return Enqueue({tty::EncodeEof()});
    }
    if (p_->stdin_stream == nullptr) return kj::READY_NOW;  // closed already, or ended
    auto p = kj::addRef(*p_);
    auto req = broker_.helper().closeInputRequest();
    req.setSandboxId(sandbox_id_);
    req.setProcessId(p_->id);
    // Both copies must close for the process to see end-of-file: ours, then the privhelper's.
    return p_->stdin_chain.then([p = kj::mv(p), req = kj::mv(req)]() mutable {
      p->stdin_stream = nullptr;
      return req.send().ignoreResult();
    });
  }

  kj::Promise<void> signal(SignalContext context) override {
    Check();
    int sig = context.getParams().getSignal();
    if (sig < 1 || sig > 64) Fail(absl::InvalidArgumentError("signal must be 1..64"));
    auto req = broker_.helper().signalProcessRequest();
    req.setSandboxId(sandbox_id_);
    req.setProcessId(p_->id);
    req.setSignal(sig);
    return req.send().ignoreResult().catch_([](kj::Exception&& e) {
      kj::throwFatalException(Forwarded(kj::mv(e)));
    });
  }

  kj::Promise<void> resize(ResizeContext context) override {
    Check();
    if (!p_->tty) Fail(absl::FailedPreconditionError("not a tty process"));
    auto params = context.getParams();
    if (params.getRows() == 0 || params.getCols() == 0)
      Fail(absl::InvalidArgumentError("a terminal needs at least one row and one column"));
    return Enqueue({tty::EncodeWinsize(params.getRows(), params.getCols())});
  }

  kj::Promise<void> wait(WaitContext context) override {
    Check();
    auto p = kj::addRef(*p_);
    return p_->WhenEnded().then([context, p = kj::mv(p)]() mutable {
      p->exit.To(context.getResults().initStatus());
    });
  }

  kj::Promise<void> subscribe(SubscribeContext context) override {
    Check();
    auto params = context.getParams();
    bool pty_stream = params.getStream() == api::Stream::PTY;
    if (pty_stream != p_->tty)
      Fail(absl::InvalidArgumentError(p_->tty ? "a tty process has only the pty stream"
                                              : "only a tty process has a pty stream"));
    auto delivery = Deliver(kj::addRef(*p_), params.getStream(), params.getFromOffset(),
                            params.getSink());
    context.getResults().setSubscription(kj::heap<SubscriptionImpl>(kj::mv(delivery)));
    return kj::READY_NOW;
  }

 private:
  // The process stays reachable only while its sandbox exists and the peer may use it.
  void Check() { broker_.VisibleSandbox(peer_, sandbox_id_); }

  // Queues writes to stdin behind earlier ones; each chunk is one write, so a tty frame (at
  // most PIPE_BUF) reaches the pipe whole or not at all. The call's bytes count against
  // kMaxQueuedInput until written.
  kj::Promise<void> Enqueue(std::vector<std::string> chunks) {
    kj::Own<ProcessRecord::StdinPipe> pipe;
    KJ_IF_MAYBE(s, p_->stdin_stream) { pipe = kj::addRef(**s); }
    if (pipe.get() == nullptr)
      Fail(absl::FailedPreconditionError(p_->ended() ? "the process has ended" : "input is closed"));
    // Flow control keeps a well-behaved client within a few writes; one that ignores it
    // (pipelining writes, or resizes, to a process that never reads) is refused past this
    // bound. Every queued call costs something, whatever it carries.
    size_t accounted = ProcessRecord::kQueuedCallBytes;
    for (const auto& c : chunks) accounted += c.size();
    if (p_->stdin_queued + accounted > ProcessRecord::kMaxQueuedInput)
      Fail(absl::UnavailableError("too much input queued; wait for earlier writes"));
    p_->stdin_queued += accounted;
    auto done = p_->stdin_chain
                    .then([pipe = kj::mv(pipe), chunks = kj::mv(chunks)]() mutable {
                      kj::AsyncOutputStream& stream = *pipe->stream;
                      return WriteChunks(stream, kj::heap(kj::mv(chunks)), 0).attach(kj::mv(pipe));
                    })
                    .attach(kj::defer([record = kj::addRef(*p_), accounted]() mutable {
                      record->stdin_queued -= accounted;
                    }));
    auto forked = done.fork();
    p_->stdin_chain = forked.addBranch().catch_([](kj::Exception&&) {});
    return forked.addBranch().catch_([](kj::Exception&&) {
      Fail(absl::FailedPreconditionError("the process no longer reads its input"));
    });
  }

  static kj::Promise<void> WriteChunks(kj::AsyncOutputStream& stream,
                                       kj::Own<std::vector<std::string>> chunks, size_t next) {
    if (next == chunks->size()) return kj::READY_NOW;
    const std::string& chunk = (*chunks)[next];
    auto write = stream.write(chunk.data(), chunk.size());
    return write.then([&stream, chunks = kj::mv(chunks), next]() mutable {
      return WriteChunks(stream, kj::mv(chunks), next + 1);
    });
  }

  Broker& broker_;
  Peer peer_;
  std::string sandbox_id_;
  kj::Own<ProcessRecord> p_;
};

// The fd of a capability the privhelper passed, duplicated so that we own it.
kj::Promise<kj::AutoCloseFd> OwnFd(helper::Fd::Client cap) {
  // The received fd belongs to the capability: keep it alive until the fd is duplicated.
  auto fd_promise = cap.getFd();
  return fd_promise.then([cap = kj::mv(cap)](kj::Maybe<int> fd) {
    KJ_IF_MAYBE(f, fd) {
      int dup = fcntl(*f, F_DUPFD_CLOEXEC, 3);
      if (dup < 0) Fail(absl::InternalError("cannot duplicate a stdio fd"));
      return kj::AutoCloseFd(dup);
    }
    Fail(absl::InternalError("the privhelper sent no fd"));
  });
}

class SandboxImpl final : public api::Sandbox::Server {
 public:
  SandboxImpl(Broker& broker, Peer peer, std::string id)
      : broker_(broker), peer_(std::move(peer)), id_(std::move(id)) {}

 protected:
  kj::Promise<void> startProcess(StartProcessContext context) override {
    SandboxRecord& sb = broker_.VisibleSandbox(peer_, id_);
    auto spec = context.getParams().getSpec();
    if (spec.getArgv().size() == 0) Fail(absl::InvalidArgumentError("argv must not be empty"));
    auto p = kj::refcounted<ProcessRecord>();
    p->id = NewId("p-");
    broker_.OpenLogs(id_, *p, sb.buffer_bytes);
    p->sandbox_id = id_;
    for (auto a : spec.getArgv()) p->argv.emplace_back(a.cStr());
    p->tty = spec.getTty();

    auto req = broker_.helper().startProcessRequest();
    auto r = req.initRequest();
    r.setSandboxId(id_);
    r.setProcessId(p->id);
    r.setArgv(spec.getArgv());
    r.setEnv(spec.getEnv());
    r.setCwd(spec.getCwd());
    r.setTty(spec.getTty());
    r.setRows(spec.getRows());
    r.setCols(spec.getCols());
    return req.send()
        .catch_([](kj::Exception&& e) -> capnp::Response<helper::Helper::StartProcessResults> {
          kj::throwFatalException(Forwarded(kj::mv(e)));
        })
        .then([this, p = kj::mv(p)](capnp::Response<helper::Helper::StartProcessResults> res) mutable {
          // All three or none: a failure drops the others, closing them.
          kj::Vector<kj::Promise<kj::AutoCloseFd>> fds;
          fds.add(OwnFd(res.getStdin()));
          fds.add(OwnFd(res.getStdout()));
          fds.add(OwnFd(res.getStderr()));
          return kj::joinPromises(fds.releaseAsArray())
              .then([this, p = kj::mv(p)](kj::Array<kj::AutoCloseFd> owned) mutable {
                return Register(kj::mv(p), kj::mv(owned[0]), kj::mv(owned[1]), kj::mv(owned[2]));
              });
        })
        .then([this, context](kj::Own<ProcessRecord> p) mutable {
          auto results = context.getResults();
          FillProcessInfo(*p, results.initInfo());
          results.setProcess(kj::heap<ProcessImpl>(broker_, peer_, id_, kj::mv(p)));
        });
  }

  kj::Promise<void> getProcess(GetProcessContext context) override {
    SandboxRecord& sb = broker_.VisibleSandbox(peer_, id_);
    auto it = sb.processes.find(context.getParams().getId().cStr());
    if (it == sb.processes.end()) Fail(absl::NotFoundError("no such process"));
    context.getResults().setProcess(
        kj::heap<ProcessImpl>(broker_, peer_, id_, kj::addRef(*it->second)));
    return kj::READY_NOW;
  }

  kj::Promise<void> listProcesses(ListProcessesContext context) override {
    SandboxRecord& sb = broker_.VisibleSandbox(peer_, id_);
    auto list = context.getResults().initProcesses(static_cast<unsigned>(sb.process_order.size()));
    for (size_t i = 0; i < sb.process_order.size(); ++i)
      FillProcessInfo(*sb.processes.at(sb.process_order[i]), list[static_cast<unsigned>(i)]);
    return kj::READY_NOW;
  }

  kj::Promise<void> inspect(InspectContext context) override {
    FillSandboxInfo(broker_.VisibleSandbox(peer_, id_), context.getResults().initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> delete_(DeleteContext context) override {
    SandboxRecord& sb = broker_.VisibleSandbox(peer_, id_);
    if (sb.state == "deleting") Fail(absl::FailedPreconditionError("already being deleted"));
    if (!context.getParams().getForce()) {
      for (const auto& [pid, p] : sb.processes) {
        if (!p->ended())
          Fail(absl::FailedPreconditionError(
              absl::StrCat("process ", pid, " still runs; use force to delete anyway")));
      }
    }
    std::string before = sb.state;
    sb.state = "deleting";
    auto req = broker_.helper().deleteSandboxRequest();
    req.setSandboxId(id_);
    std::string id = id_;
    Broker& broker = broker_;
    return req.send().then(
        [&broker, id](auto&&) {
          auto it = broker.sandboxes().find(id);
          if (it == broker.sandboxes().end()) return;
          for (auto& [pid, p] : it->second->processes) {
            if (!p->ended()) p->SetExit(ExitInfo{ExitInfo::kUnknown, 0});
          }
          broker.sandboxes().erase(it);
          broker.RemoveLogs(id);
        },
        [&broker, id, before](kj::Exception&& e) {
          auto it = broker.sandboxes().find(id);
          if (it != broker.sandboxes().end()) it->second->state = before;
          kj::throwFatalException(Forwarded(kj::mv(e)));
        });
  }

 private:
  kj::Own<ProcessRecord> Register(kj::Own<ProcessRecord> p, kj::AutoCloseFd in,
                                  kj::AutoCloseFd out, kj::AutoCloseFd err) {
    auto& sandboxes = broker_.sandboxes();
    auto it = sandboxes.find(id_);
    if (it == sandboxes.end()) Fail(absl::NotFoundError("sandbox was deleted"));
    SandboxRecord& sb = *it->second;
    p->stdin_stream = kj::refcounted<ProcessRecord::StdinPipe>(
        broker_.low().wrapOutputFd(in.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP));
    broker_.StartPumps(id_, *p, kj::mv(out), kj::mv(err));
    sb.process_order.push_back(p->id);
    sb.processes.emplace(p->id, kj::addRef(*p));
    broker_.Persist(sb);
    return p;
  }

  Broker& broker_;
  Peer peer_;
  std::string id_;
};

class SupervisorImpl final : public api::Supervisor::Server {
 public:
  SupervisorImpl(Broker& broker, Peer peer) : broker_(broker), peer_(std::move(peer)) {}

 protected:
  kj::Promise<void> createSandbox(CreateSandboxContext context) override {
    RequireSomeDeployment();
    auto spec = context.getParams().getSpec();
    std::string deployment = spec.getDeploymentId().cStr();
    if (!broker_.MayUseDeployment(peer_, deployment))
      Fail(absl::PermissionDeniedError(absl::StrCat(
          "uid ", peer_.uid, " may not use deployment \"", deployment, "\"")));
    auto policy = broker_.Deployment(deployment);
    if (spec.getLabels().size() > kMaxLabels) Fail(absl::InvalidArgumentError("too many labels"));
    auto record = std::make_unique<SandboxRecord>();
    record->id = NewId("sb-");
    record->deployment_id = deployment;
    record->profile = spec.getProfile().size() > 0 ? spec.getProfile().cStr()
                                                   : (*policy->getProfiles().begin()).cStr();
    record->owner_uid = peer_.uid;
    record->created_ms = NowMs();
    record->buffer_bytes = policy->getOutputBufferBytes();
    auto profiles = policy->getProfiles();
    auto sizes = policy->getProfileBufferBytes();
    bool allowed = false;
    for (unsigned i = 0; i < profiles.size(); ++i) {
      if (record->profile == profiles[i].cStr()) {
        allowed = true;
        if (i < sizes.size()) record->buffer_bytes = sizes[i];
      }
    }
    if (!allowed)
      Fail(absl::PermissionDeniedError(absl::StrCat("deployment ", deployment,
                                                    " may not use profile \"", record->profile,
                                                    "\"")));
    for (auto l : spec.getLabels()) {
      if (l.getKey().size() > kMaxLabelBytes || l.getValue().size() > kMaxLabelBytes)
        Fail(absl::InvalidArgumentError("label too long"));
      record->labels.emplace_back(l.getKey().cStr(), l.getValue().cStr());
    }
    auto req = broker_.helper().createSandboxRequest();
    auto r = req.initRequest();
    r.setSandboxId(record->id);
    r.setDeploymentId(deployment);
    r.setProfile(record->profile);
    r.setWorkspaces(spec.getWorkspaces());
    r.setCredentials(spec.getCredentials());
    std::string id = record->id;
    record->state = "creating";
    broker_.sandboxes().emplace(id, std::move(record));
    Broker& broker = broker_;
    return req.send().then(
        [this, context, id](auto&&) mutable {
          SandboxRecord& sb = broker_.VisibleSandbox(peer_, id);
          sb.state = "running";
          broker_.Persist(sb);
          auto results = context.getResults();
          FillSandboxInfo(sb, results.initInfo());
          results.setSandbox(kj::heap<SandboxImpl>(broker_, peer_, id));
        },
        [&broker, id](kj::Exception&& e) {
          broker.sandboxes().erase(id);
          kj::throwFatalException(Forwarded(kj::mv(e)));
        });
  }

  kj::Promise<void> getSandbox(GetSandboxContext context) override {
    RequireSomeDeployment();
    std::string id = context.getParams().getId().cStr();
    broker_.VisibleSandbox(peer_, id);
    context.getResults().setSandbox(kj::heap<SandboxImpl>(broker_, peer_, id));
    return kj::READY_NOW;
  }

  kj::Promise<void> listSandboxes(ListSandboxesContext context) override {
    RequireSomeDeployment();
    std::vector<const SandboxRecord*> visible;
    for (const auto& [id, sb] : broker_.sandboxes()) {
      if (broker_.MayUseDeployment(peer_, sb->deployment_id) && sb->state != "creating")
        visible.push_back(sb.get());
    }
    auto list = context.getResults().initSandboxes(static_cast<unsigned>(visible.size()));
    for (size_t i = 0; i < visible.size(); ++i)
      FillSandboxInfo(*visible[i], list[static_cast<unsigned>(i)]);
    return kj::READY_NOW;
  }

  kj::Promise<void> info(InfoContext context) override {
    auto results = context.getResults();
    results.setVersion(kVersion);
    results.setPeerUid(peer_.uid);
    auto names = broker_.DeploymentsFor(peer_);
    auto list = results.initDeployments(static_cast<unsigned>(names.size()));
    for (size_t i = 0; i < names.size(); ++i) list.set(static_cast<unsigned>(i), names[i]);
    return kj::READY_NOW;
  }

 private:
  void RequireSomeDeployment() {
    if (broker_.DeploymentsFor(peer_).empty())
      Fail(absl::PermissionDeniedError(
          absl::StrCat("uid ", peer_.uid, " is not allowed to use any deployment")));
  }

  Broker& broker_;
  Peer peer_;
};

}  // namespace

void ExitInfo::To(api::ExitStatus::Builder out) const {
  switch (kind) {
    case kRunning:
      out.setRunning();
      break;
    case kExitCode:
      out.setExitCode(value);
      break;
    case kSignal:
      out.setSignal(value);
      break;
    case kUnknown:
      out.setUnknown();
      break;
    case kOomKilled:
      out.setOomKilled();
      break;
  }
}

void ProcessRecord::SetExit(ExitInfo info) {
  if (ended()) return;
  exit = info;
  // Nobody can write to an ended process: release its stdin fd now.
  stdin_chain = nullptr;
  stdin_stream = nullptr;
  auto waiters = kj::mv(exit_waiters);
  exit_waiters = {};
  for (auto& w : waiters) w->fulfill();
}

kj::Promise<void> ProcessRecord::WhenEnded() {
  if (ended()) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  exit_waiters.add(kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void Broker::ErrorHandler::taskFailed(kj::Exception&& exception) {
  KJ_LOG(WARNING, "broker task failed", exception);
}

Broker::Broker(kj::AsyncIoProvider& io, kj::LowLevelAsyncIoProvider& low,
               kj::UnixEventPort& events, helper::Helper::Client helper,
               capnp::MallocMessageBuilder& policy_message, std::string log_dir)
    : io_(io),
      low_(low),
      events_(events),
      log_dir_(std::move(log_dir)),
      helper_(kj::mv(helper)),
      policy_(policy_message.getRoot<helper::BrokerPolicy>().asReader()),
      tasks_(error_handler_) {}

void Broker::OpenLogs(const std::string& sandbox_id, ProcessRecord& p, uint64_t capacity) {
  // Ids are validated where they become path components (they were generated by us, and the
  // privhelper re-validates them, but this is where they become paths).
  if (!IsValidId(sandbox_id) || !IsValidId(p.id)) Fail(absl::InternalError("bad id for a log"));
  std::string dir = log_dir_ + "/" + sandbox_id;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
    Fail(absl::InternalError("cannot create the output log directory " + dir));
  auto out = OutputLog::Open(dir + "/" + p.id + ".stdout", capacity);
  auto err = OutputLog::Open(dir + "/" + p.id + ".stderr", capacity);
  if (!out.ok() || !err.ok())
    Fail(absl::InternalError("cannot open output logs in " + dir));
  p.stdout_log = kj::mv(*out);
  p.stderr_log = kj::mv(*err);
}

void Broker::StartPumps(const std::string& sandbox_id, ProcessRecord& p,
                        kj::AutoCloseFd stdout_fd, kj::AutoCloseFd stderr_fd) {
  auto drain = [this](kj::AutoCloseFd fd, OutputLog& log) {
    int flags = fcntl(fd.get(), F_GETFL);
    fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK);
    auto source = kj::heap<DrainSource>();
    source->observer = kj::heap<kj::UnixEventPort::FdObserver>(
        events_, fd.get(), kj::UnixEventPort::FdObserver::OBSERVE_READ);
    source->fd = kj::mv(fd);
    return Drain(kj::mv(source), log);
  };
  auto drain_out = drain(kj::mv(stdout_fd), *p.stdout_log);
  auto drain_err = drain(kj::mv(stderr_fd), *p.stderr_log);
  auto wait_req = helper_.waitProcessRequest();
  wait_req.setSandboxId(sandbox_id);
  wait_req.setProcessId(p.id);
  ProcessRecord* raw = &p;
  auto waited = wait_req.send().then(
      [this, raw, sandbox_id](capnp::Response<helper::Helper::WaitProcessResults> res) {
        auto s = res.getStatus();
        ExitInfo info;
        switch (s.which()) {
          case api::ExitStatus::EXIT_CODE:
            info = {ExitInfo::kExitCode, s.getExitCode()};
            break;
          case api::ExitStatus::SIGNAL:
            info = {ExitInfo::kSignal, s.getSignal()};
            break;
          case api::ExitStatus::OOM_KILLED: {
            info = {ExitInfo::kOomKilled, 0};
            // The host's OOM killer took the whole sandbox: say so until it is deleted.
            auto it = sandboxes_.find(sandbox_id);
            if (it != sandboxes_.end() && it->second->state != "deleting")
              it->second->state = "oom-killed";
            break;
          }
          default:
            info = {ExitInfo::kUnknown, 0};
        }
        raw->SetExit(info);
      },
      [raw](kj::Exception&&) { raw->SetExit(ExitInfo{ExitInfo::kUnknown, 0}); });
  // The record owns its pumps; they only touch the record itself.
  kj::Vector<kj::Promise<void>> all;
  all.add(kj::mv(drain_out));
  all.add(kj::mv(drain_err));
  all.add(kj::mv(waited));
  p.pumps = kj::joinPromises(all.releaseAsArray()).eagerlyEvaluate([raw](kj::Exception&& e) {
    raw->stdout_log->Close();
    raw->stderr_log->Close();
  });
}

void Broker::Persist(const SandboxRecord& sb) {
  if (!IsValidId(sb.id)) return;
  std::string dir = log_dir_ + "/" + sb.id;
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return;
  capnp::MallocMessageBuilder message;
  auto r = message.initRoot<records::BrokerSandbox>();
  r.setId(sb.id);
  r.setDeploymentId(sb.deployment_id);
  r.setProfile(sb.profile);
  r.setOwnerUid(sb.owner_uid);
  r.setCreatedAtUnixMs(sb.created_ms);
  auto labels = r.initLabels(static_cast<unsigned>(sb.labels.size()));
  for (size_t i = 0; i < sb.labels.size(); ++i) {
    labels[static_cast<unsigned>(i)].setKey(sb.labels[i].first);
    labels[static_cast<unsigned>(i)].setValue(sb.labels[i].second);
  }
  auto procs = r.initProcesses(static_cast<unsigned>(sb.process_order.size()));
  for (size_t i = 0; i < sb.process_order.size(); ++i) {
    const ProcessRecord& p = *sb.processes.at(sb.process_order[i]);
    auto out = procs[static_cast<unsigned>(i)];
    out.setId(p.id);
    // At most 4 KiB of argv per process in the record: it is rewritten on every start.
    std::vector<std::string> kept_argv;
    size_t bytes = 0;
    for (const auto& a : p.argv) {
      if (bytes + a.size() > 4096) break;
      bytes += a.size();
      kept_argv.push_back(a);
    }
    auto argv = out.initArgv(static_cast<unsigned>(kept_argv.size()));
    for (size_t a = 0; a < kept_argv.size(); ++a) argv.set(static_cast<unsigned>(a), kept_argv[a]);
  }
  absl::Status st = WriteRecordAtomically(dir, "record", r.asReader());
  if (!st.ok()) KJ_LOG(ERROR, "cannot persist a sandbox record", st.ToString());
}

void Broker::RemoveLogs(const std::string& sandbox_id) {
  if (!IsValidId(sandbox_id)) return;
  std::string dir = log_dir_ + "/" + sandbox_id;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") unlinkat(dirfd(d), n.c_str(), 0);  // a crash's .record.tmp too
    }
    closedir(d);
  }
  rmdir(dir.c_str());
}

void Broker::Restore(helper::Helper::InventoryResults::Reader inventory, kj::WaitScope& wait) {
  std::map<std::string, std::vector<std::string>> saved_argv;  // "<sandbox>/<process>"
  for (auto known : inventory.getSandboxes()) {
    auto record = std::make_unique<SandboxRecord>();
    record->id = known.getSandboxId().cStr();
    record->deployment_id = known.getDeploymentId().cStr();
    record->profile = known.getProfile().cStr();
    record->created_ms = known.getCreatedAtUnixMs();
    record->state = known.getOomKilled()    ? "oom-killed"
                    : known.getUnattached() ? "running-unattached"
                                            : "running";
    capnp::MallocMessageBuilder saved;
    if (ReadRecord(log_dir_ + "/" + record->id, "record", saved).ok()) {
      // What only the broker knew survives its crash.
      auto r = saved.getRoot<records::BrokerSandbox>();
      record->owner_uid = r.getOwnerUid();
      for (auto l : r.getLabels()) record->labels.emplace_back(l.getKey().cStr(), l.getValue().cStr());
      for (auto p : r.getProcesses()) {
        auto& argv = saved_argv[record->id + "/" + p.getId().cStr()];
        for (auto a : p.getArgv()) argv.emplace_back(a.cStr());
      }
    }
    if (auto policy = Deployment(record->deployment_id)) {
      record->buffer_bytes = policy->getOutputBufferBytes();
      auto profiles = policy->getProfiles();
      auto sizes = policy->getProfileBufferBytes();
      for (unsigned i = 0; i < profiles.size() && i < sizes.size(); ++i) {
        if (record->profile == profiles[i].cStr()) record->buffer_bytes = sizes[i];
      }
    }
    sandboxes_.emplace(record->id, std::move(record));
  }
  for (auto kept : inventory.getProcesses()) {
    auto it = sandboxes_.find(kept.getSandboxId().cStr());
    if (it == sandboxes_.end() || !IsValidId(kept.getProcessId().cStr())) continue;
    SandboxRecord& sb = *it->second;
    auto p = kj::refcounted<ProcessRecord>();
    p->id = kept.getProcessId().cStr();
    p->sandbox_id = sb.id;
    p->argv = saved_argv[sb.id + "/" + p->id];
    p->tty = kept.getTty();
    auto error = kj::runCatchingExceptions([&] {
      OpenLogs(sb.id, *p, sb.buffer_bytes);
      auto req = helper_.reattachRequest();
      req.setSandboxId(sb.id);
      req.setProcessId(p->id);
      auto res = req.send().wait(wait);
      auto own = [&](helper::Fd::Client cap) {
        auto fd = cap.getFd().wait(wait);
        KJ_IF_MAYBE(f, fd) { return kj::AutoCloseFd(fcntl(*f, F_DUPFD_CLOEXEC, 3)); }
        return kj::AutoCloseFd();
      };
      kj::AutoCloseFd in = res.hasStdin() ? own(res.getStdin()) : kj::AutoCloseFd();
      kj::AutoCloseFd out = own(res.getStdout());
      kj::AutoCloseFd err = own(res.getStderr());
      if (out.get() < 0 || err.get() < 0) Fail(absl::InternalError("no stdio to reattach"));
      if (in.get() >= 0) {
        p->stdin_stream = kj::refcounted<ProcessRecord::StdinPipe>(
            low_.wrapOutputFd(in.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP));
      }
      StartPumps(sb.id, *p, kj::mv(out), kj::mv(err));
      sb.process_order.push_back(p->id);
      sb.processes.emplace(p->id, kj::mv(p));
    });
    KJ_IF_MAYBE(e, error) { KJ_LOG(ERROR, "cannot reattach a process", kept.getProcessId(), *e); }
  }
  // Logs of sandboxes deleted while no broker ran.
  if (DIR* d = opendir(log_dir_.c_str())) {
    std::vector<std::string> stale;
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n[0] != '.' && sandboxes_.count(n) == 0) stale.push_back(n);
    }
    closedir(d);
    for (const auto& n : stale) RemoveLogs(n);
  }
}

api::Supervisor::Client Broker::NewSupervisor(Peer peer) {
  return kj::heap<SupervisorImpl>(*this, std::move(peer));
}

std::optional<helper::DeploymentPolicy::Reader> Broker::Deployment(const std::string& id) const {
  for (auto d : policy_.getDeployments()) {
    if (id == d.getId().cStr()) return d;
  }
  return std::nullopt;
}

bool Broker::MayUseDeployment(const Peer& peer, const std::string& id) const {
  auto d = Deployment(id);
  return d.has_value() && MayUse(peer, *d);
}

std::vector<std::string> Broker::DeploymentsFor(const Peer& peer) const {
  std::vector<std::string> names;
  for (auto d : policy_.getDeployments()) {
    if (MayUse(peer, d)) names.emplace_back(d.getId().cStr());
  }
  return names;
}

SandboxRecord& Broker::VisibleSandbox(const Peer& peer, const std::string& id) {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end() || !MayUseDeployment(peer, it->second->deployment_id))
    Fail(absl::NotFoundError(absl::StrCat("no sandbox \"", id, "\"")));
  return *it->second;
}

}  // namespace paseo
