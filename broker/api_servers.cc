// See api_servers.h.
#include "broker/api_servers.h"

#include <time.h>

#include <capnp/schema.h>
#include <capnp/stream.capnp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/message_check.h"
#include "common/request_checks.h"
#include "common/rpc_errors.h"

namespace paseo {
namespace {

using AnyContext = capnp::CallContext<capnp::AnyPointer, capnp::AnyPointer>;
using DispatchResult = capnp::Capability::Server::DispatchCallResult;

void FillProcessInfo(const ProcessRecord& p, api::ProcessInfo::Builder out) {
  out.setId(p.id);
  out.setTty(p.tty);
  out.setSandboxId(p.sandbox_id);
  auto argv = out.initArgv(static_cast<unsigned>(p.argv.size()));
  for (unsigned i = 0; i < argv.size(); ++i) argv.set(i, p.argv[i]);
  ToCapnp(p.exit, out.initStatus());
  out.setStdoutBytes(p.stdout_log->end());
  out.setStderrBytes(p.stderr_log->end());
  out.setKey(p.key);
  out.setOutput(p.output);
}

// What a sandbox remembers of a released process: its id, key and how it ended.
void FillReleasedInfo(const std::string& sandbox_id, const ReleasedProcess& r,
                      api::ProcessInfo::Builder out) {
  out.setId(r.id);
  out.setSandboxId(sandbox_id);
  out.setKey(r.key);
  ToCapnp(r.exit, out.initStatus());
}

void SetTexts(capnp::List<capnp::Text>::Builder out, const std::vector<std::string>& in) {
  for (unsigned i = 0; i < in.size(); ++i) out.set(i, in[i]);
}

void FillSandboxInfo(const SandboxRecord& s, api::SandboxInfo::Builder out) {
  out.setId(s.id);
  out.setDeploymentId(s.deployment_id);
  out.setProfile(s.profile);
  out.setState(StateName(s.state));
  if (s.state == SandboxState::kStopped || s.state == SandboxState::kOomKilled)
    out.setStateReason(s.stop_reason);
  out.setCreatedAtUnixMs(s.created_ms);
  out.setOwnerUid(s.owner_uid);
  out.setKey(s.key);
  out.setProcessCount(static_cast<uint32_t>(s.processes.size()));
  auto network = out.initNetwork();
  network.setMode(s.network.mode);
  network.setAddress(s.network.address);
  auto ports = network.initInboundPorts(static_cast<unsigned>(s.network.inbound_ports.size()));
  for (unsigned i = 0; i < ports.size(); ++i) ports.set(i, s.network.inbound_ports[i]);
  auto names = network.initAllowNames(static_cast<unsigned>(s.network.allow_names.size()));
  for (unsigned i = 0; i < names.size(); ++i) {
    const auto& [name, name_ports] = s.network.allow_names[i];
    names[i].setName(name);
    auto p = names[i].initPorts(static_cast<unsigned>(name_ports.size()));
    for (unsigned j = 0; j < p.size(); ++j) p.set(j, name_ports[j]);
  }
  auto paths = out.initPaths();
  SetTexts(paths.initToolDirectories(static_cast<unsigned>(s.paths.tool_directories.size())),
           s.paths.tool_directories);
  SetTexts(paths.initKept(static_cast<unsigned>(s.paths.kept.size())), s.paths.kept);
  paths.setHome(s.paths.home);
  auto labels = out.initLabels(static_cast<unsigned>(s.labels.size()));
  for (unsigned i = 0; i < labels.size(); ++i) {
    labels[i].setKey(s.labels[i].first);
    labels[i].setValue(s.labels[i].second);
  }
}

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

// A sandbox's stats: the privhelper's figures (`usage`, null if it had none) and the broker's
// own counters of its processes and their output.
void FillSandboxStats(const SandboxRecord& sb, const helper::SandboxUsage::Reader* usage,
                      uint64_t sampled_ns, api::SandboxStats::Builder out) {
  out.setSandboxId(sb.id);
  out.setDeploymentId(sb.deployment_id);
  out.setState(StateName(sb.state));
  out.setSampledAtNs(sampled_ns);
  uint32_t running = 0;
  uint64_t written = sb.released_output_bytes, kept = 0;
  for (const auto& [id, p] : sb.processes) {
    running += p->ended() ? 0 : 1;
    for (const OutputLog* log : {p->stdout_log.get(), p->stderr_log.get()}) {
      written += log->end();
      kept += log->end() - log->start();
    }
  }
  out.setProcesses(running);
  out.setOutputBytes(written);
  out.setOutputBufferedBytes(kept);
  out.setNetworked(sb.network.mode == "sandbox");
  if (usage == nullptr) return;
  if (usage->getMeasured() && sb.state != SandboxState::kStopped &&
      sb.state != SandboxState::kOomKilled && sb.state != SandboxState::kDeleting) {
    out.setMeasured(true);
    out.setCpuNs(usage->getCpuNs());
    out.setMemoryBytes(usage->getMemoryBytes());
    out.setMemoryLimitBytes(usage->getMemoryLimitBytes());
    out.setHostTasks(usage->getHostTasks());
    out.setHostTasksLimit(usage->getHostTasksLimit());
  }
  if (usage->getNetworked()) {
    out.setNetworked(true);
    out.setNetworkInBytes(usage->getNetworkInBytes());
    out.setNetworkOutBytes(usage->getNetworkOutBytes());
  }
}

// Fills `out` with the stats of the sandboxes of `ids` that are still there (`still(id)`: the
// record, or null) once the privhelper answered with `usage`.
template <typename Still>
void FillStatsList(const std::vector<std::string>& ids, Broker::UsageAnswer& usage, Still&& still,
                   kj::Function<capnp::List<api::SandboxStats>::Builder(unsigned)> init) {
  std::map<std::string, helper::SandboxUsage::Reader> by_id;
  usage.ForEachSandbox([&](helper::SandboxUsage::Reader u) { by_id.emplace(u.getSandboxId().cStr(), u); });
  uint64_t now = MonotonicNs();
  std::vector<const SandboxRecord*> records;
  for (const std::string& id : ids)
    if (const SandboxRecord* sb = still(id)) records.push_back(sb);
  auto list = init(static_cast<unsigned>(records.size()));
  for (unsigned i = 0; i < list.size(); ++i) {
    auto found = by_id.find(records[i]->id);
    FillSandboxStats(*records[i], found == by_id.end() ? nullptr : &found->second, now, list[i]);
  }
}

// Who is calling: the connection's peer, its budget of waiting calls and the audit log.
struct Caller {
  Peer peer;
  kj::Own<CallLimiter::Connection> calls;
  AuditLog* audit;
  bool authorized;  // may use some deployment (decided at connect, as the connection limits are)

  Caller Copy() { return {peer, kj::addRef(*calls), audit, authorized}; }
  // A call that may wait holds a ticket until it ends (refused past the connection's bound).
  kj::Own<CallLimiter::Ticket> Ticket() { return ValueOrThrow(calls->Acquire()); }
  // Takes the ticket first, so a refused call starts nothing.
  template <typename Start>
  auto Charged(Start&& start) -> decltype(start()) {
    auto ticket = Ticket();
    return start().attach(kj::mv(ticket));
  }
};

// ---------------------------------------------------------------- audit

// One call's audit line, written exactly once: when the call succeeds or fails, or -- if its
// promise is dropped unanswered (the connection went away) -- as cancelled.
class AuditedCall {
 public:
  AuditedCall(AuditLog& log, AuditRecord record) : log_(log), record_(std::move(record)) {}
  ~AuditedCall() {
    if (written_) return;
    record_.result = AuditResult::kCancelled;
    record_.error = "cancelled";
    record_.reason = "the call ended without an answer";
    log_.Write(record_);
  }
  AuditRecord& record() { return record_; }
  void Succeeded(bool write = true) {
    written_ = true;
    record_.result = AuditResult::kOk;
    if (write) log_.Write(record_);
  }
  void Failed(const kj::Exception& e) {
    written_ = true;
    absl::Status status = StatusFromException(e);
    record_.result =
        status.code() == absl::StatusCode::kInternal ? AuditResult::kFailed : AuditResult::kRefused;
    record_.error = std::string(ReasonToken(status.code()));
    record_.reason = ClientFacingDescription(e);
    log_.Write(record_);
  }

 private:
  AuditLog& log_;
  AuditRecord record_;
  bool written_ = false;
};

// A method's failure as the client gets it: capnp's own failure to read the request (one the
// check before the method could not foresee) is the client's malformed request, not our bug.
kj::Exception OurWords(kj::Exception&& e) {
  absl::string_view d = e.getDescription().cStr();
  // Only what capnp raised here, reading this call: not a refusal that has its reason already,
  // nor a peer's failure passed on.
  bool raw = !absl::StartsWith(d, "remote exception: ") && !absl::StartsWith(d, "internal: ") &&
             StatusFromException(e).code() == absl::StatusCode::kInternal;
  if (raw) {
    if (auto malformed = MalformedRequest(e)) return StatusToException(*malformed);
  }
  return kj::mv(e);
}

// "Supervisor.createSandbox"; whether the method is declared `-> stream`; its parameters' type
// (none for a method the schema does not have: capnp answers it as unimplemented).
struct Method {
  std::string operation;
  bool streaming = false;
  kj::Maybe<capnp::StructSchema> params;
};
template <typename Interface>
Method MethodOf(uint64_t interface_id, uint16_t method_id) {
  capnp::InterfaceSchema schema = capnp::Schema::from<Interface>();
  auto methods = schema.getMethods();
  if (schema.getProto().getId() != interface_id || method_id >= methods.size())
    return {absl::StrCat(schema.getShortDisplayName().cStr(), ".unknown(", interface_id, "/",
                         method_id, ")"),
            false, nullptr};
  auto method = methods[method_id];
  bool streaming =
      method.getResultType().getProto().getId() == capnp::typeId<capnp::StreamResult>();
  return {absl::StrCat(schema.getShortDisplayName().cStr(), ".",
                       method.getProto().getName().cStr()),
          streaming, method.getParamType()};
}

// Every server's dispatchCall comes here, so every method -- including one added to the schema
// later -- leaves exactly one audit line when its call ends, from this one place: ok, or the
// refusal with the reason the client got. The exception is a streaming call (`-> stream`,
// Process.writeInput): its chunks are bytes of one stream, written only when refused.
// `before(record, params)` names the deployment, sandbox and process the call is about, and
// `after(record, results)` what a successful call made (a new sandbox's or process's id); both
// must not throw (what they read is best-effort). A message capnp cannot read as the method's
// parameters is refused here, before the method sees it, as invalid-argument "malformed request:
// ..." (common/message_check.h): a hostile client's bytes are not a bug of ours, and capnp's own
// words never reach it. `dispatch()` is the generated dispatchCall.
template <typename Interface, typename Before, typename After, typename Dispatch>
DispatchResult AuditedDispatch(const Caller& caller, uint64_t interface_id, uint16_t method_id,
                               AnyContext context, Before&& before, After&& after,
                               Dispatch&& dispatch) {
  Method method = MethodOf<Interface>(interface_id, method_id);
  bool streaming = method.streaming;
  AuditRecord record;
  record.operation = std::move(method.operation);
  record.uid = caller.peer.uid;
  record.gid = caller.peer.gids.empty() ? -1 : static_cast<int64_t>(caller.peer.gids[0]);
  record.pid = caller.peer.pid;
  record.unauthorized_peer = !caller.authorized;
  kj::runCatchingExceptions([&] { before(record, context.getParams()); });
  auto call = kj::heap<AuditedCall>(*caller.audit, std::move(record));
  KJ_IF_MAYBE(params, method.params) {
    absl::Status readable = CheckReadable(context.getParams(), *params);
    if (!readable.ok()) {
      kj::Exception e = StatusToException(readable);
      call->Failed(e);
      return {kj::Promise<void>(kj::mv(e)), streaming};
    }
  }
  kj::Maybe<DispatchResult> result;
  KJ_IF_MAYBE(e, kj::runCatchingExceptions([&] { result = dispatch(); })) {
    // Refused before the method returned a promise (a ValueOrThrow in its body).
    kj::Exception refusal = OurWords(kj::mv(*e));
    call->Failed(refusal);
    return {kj::Promise<void>(kj::mv(refusal)), streaming};
  }
  KJ_IF_MAYBE(r, result) {
    bool is_streaming = r->isStreaming;
    AuditedCall& audited = *call;
    auto promise = r->promise.then(
        [&audited, context, is_streaming, after = kj::fwd<After>(after)]() mutable {
          if (!is_streaming) {
            kj::runCatchingExceptions([&] { after(audited.record(), context.getResults()); });
          }
          audited.Succeeded(/*write=*/!is_streaming);
        },
        [&audited](kj::Exception&& e) {
          kj::Exception refusal = OurWords(kj::mv(e));
          audited.Failed(refusal);
          kj::throwFatalException(kj::mv(refusal));
        });
    return {promise.attach(kj::mv(call)), is_streaming};
  }
  KJ_UNREACHABLE;
}

void NoResults(AuditRecord&, capnp::AnyPointer::Builder) {}

class SubscriptionImpl final : public api::Subscription::Server {
 public:
  SubscriptionImpl(kj::Promise<void> delivery, kj::Own<CallLimiter::Ticket> ticket)
      : ticket_(kj::mv(ticket)), delivery_(delivery.eagerlyEvaluate([](kj::Exception&&) {
          // The client went away or its sink failed: nothing more to deliver.
        })) {}

 private:
  kj::Own<CallLimiter::Ticket> ticket_;  // a live subscription counts as a waiting call
  kj::Promise<void> delivery_;
};

class ProcessImpl final : public api::Process::Server {
 public:
  ProcessImpl(Broker& broker, Caller caller, kj::Own<ProcessRecord> p)
      : broker_(broker), caller_(kj::mv(caller)), p_(kj::mv(p)) {}

  DispatchResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                              AnyContext context) override {
    return AuditedDispatch<api::Process>(
        caller_, interface_id, method_id, context,
        [this](AuditRecord& r, capnp::AnyPointer::Reader) {
          r.sandbox_id = p_->sandbox_id;
          r.process_id = p_->id;
          if (SandboxRecord* sb = broker_.registry().Find(p_->sandbox_id))
            r.deployment = sb->deployment_id;
        },
        NoResults,
        [&] { return api::Process::Server::dispatchCall(interface_id, method_id, context); });
  }

 protected:
  kj::Promise<void> info(InfoContext context) override {
    FillProcessInfo(Visible(), context.getResults().initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> writeInput(WriteInputContext context) override {
    return caller_.Charged(
        [&] { return ValueOrThrow(broker_.WriteInput(Visible(), context.getParams().getData())); });
  }

  kj::Promise<void> closeInput(CloseInputContext context) override {
    return caller_.Charged([&] { return ValueOrThrow(broker_.CloseInput(Visible())); });
  }

  kj::Promise<void> signal(SignalContext context) override {
    return caller_.Charged(
        [&] { return ValueOrThrow(broker_.Signal(Visible(), context.getParams().getSignal())); });
  }

  kj::Promise<void> resize(ResizeContext context) override {
    auto params = context.getParams();
    return caller_.Charged([&] {
      return ValueOrThrow(broker_.Resize(Visible(), params.getRows(), params.getCols()));
    });
  }

  kj::Promise<void> wait(WaitContext context) override {
    auto p = kj::addRef(Visible());
    auto ended = caller_.Charged([&] { return p->WhenEnded(); });
    return ended.then([context, p = kj::mv(p)]() mutable {
      ToCapnp(p->exit, context.getResults().initStatus());
    });
  }

  kj::Promise<void> release(ReleaseContext context) override {
    return caller_.Charged([&] { return ValueOrThrow(broker_.Release(Visible())); });
  }

  kj::Promise<void> subscribe(SubscribeContext context) override {
    ProcessRecord& p = Visible();
    auto params = context.getParams();
    bool pty_stream = params.getStream() == api::Stream::PTY;
    if (pty_stream != p.tty)
      ThrowStatus(absl::InvalidArgumentError(p.tty ? "a tty process has only the pty stream"
                                                   : "only a tty process has a pty stream"));
    auto ticket = caller_.Ticket();
    auto delivery =
        Deliver(kj::addRef(p), params.getStream(), params.getFromOffset(), params.getSink());
    context.getResults().setSubscription(
        kj::heap<SubscriptionImpl>(kj::mv(delivery), kj::mv(ticket)));
    return kj::READY_NOW;
  }

 private:
  // The process stays reachable only while its sandbox exists, the peer may use it, and it
  // has not been released.
  ProcessRecord& Visible() {
    ThrowIfError(broker_.registry().Visible(caller_.peer, p_->sandbox_id).status());
    if (p_->released) ThrowStatus(absl::NotFoundError("the process was released"));
    return *p_;
  }

  Broker& broker_;
  Caller caller_;
  kj::Own<ProcessRecord> p_;
};

// Sandbox.connect's answer: one connected socket, sent with the message that carries this
// capability (SCM_RIGHTS). Until the client drops it the broker keeps its copy, so it holds a
// ticket: a client cannot make the broker hold more sockets than it may park calls.
class SocketImpl final : public api::Socket::Server {
 public:
  SocketImpl(kj::AutoCloseFd fd, kj::Own<CallLimiter::Ticket> ticket)
      : fd_(kj::mv(fd)), ticket_(kj::mv(ticket)) {}
  kj::Maybe<int> getFd() override { return fd_.get(); }

 private:
  kj::AutoCloseFd fd_;
  kj::Own<CallLimiter::Ticket> ticket_;
};

class SandboxImpl final : public api::Sandbox::Server {
 public:
  SandboxImpl(Broker& broker, Caller caller, std::string id)
      : broker_(broker), caller_(kj::mv(caller)), peer_(caller_.peer), id_(std::move(id)) {}

  DispatchResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                              AnyContext context) override {
    using Methods = api::Sandbox;
    return AuditedDispatch<api::Sandbox>(
        caller_, interface_id, method_id, context,
        [this](AuditRecord& r, capnp::AnyPointer::Reader params) {
          r.sandbox_id = id_;
          if (SandboxRecord* sb = broker_.registry().Find(id_)) r.deployment = sb->deployment_id;
          if (r.operation == "Sandbox.getProcess")  // the id asked for, found or not
            r.process_id = params.getAs<Methods::GetProcessParams>().getId().cStr();
        },
        [](AuditRecord& r, capnp::AnyPointer::Builder results) {
          // startProcess and findProcess: the process they answer with.
          if (r.operation == "Sandbox.startProcess")
            r.process_id = results.getAs<Methods::StartProcessResults>().getInfo().getId().cStr();
          if (r.operation == "Sandbox.findProcess")
            r.process_id = results.getAs<Methods::FindProcessResults>().getInfo().getId().cStr();
        },
        [&] { return api::Sandbox::Server::dispatchCall(interface_id, method_id, context); });
  }

 protected:
  kj::Promise<void> startProcess(StartProcessContext context) override {
    auto started = caller_.Charged([&] {
      return ValueOrThrow(broker_.StartProcess(peer_, id_, context.getParams().getSpec()));
    });
    return started.then([this, context](kj::Own<ProcessRecord> p) mutable {
      auto results = context.getResults();
      FillProcessInfo(*p, results.initInfo());
      results.setProcess(kj::heap<ProcessImpl>(broker_, caller_.Copy(), kj::mv(p)));
    });
  }

  kj::Promise<void> getProcess(GetProcessContext context) override {
    ProcessRecord* p = ValueOrThrow(
        broker_.registry().VisibleProcess(peer_, id_, context.getParams().getId().cStr()));
    context.getResults().setProcess(kj::heap<ProcessImpl>(broker_, caller_.Copy(), kj::addRef(*p)));
    return kj::READY_NOW;
  }

  kj::Promise<void> listProcesses(ListProcessesContext context) override {
    SandboxRecord* sb = ValueOrThrow(broker_.registry().Visible(peer_, id_));
    auto list = context.getResults().initProcesses(static_cast<unsigned>(sb->process_order.size()));
    for (unsigned i = 0; i < list.size(); ++i)
      FillProcessInfo(*sb->processes.at(sb->process_order[i]), list[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> findProcess(FindProcessContext context) override {
    auto found = ValueOrThrow(
        broker_.registry().FindProcessByKey(peer_, id_, context.getParams().getKey().cStr()));
    auto results = context.getResults();
    if (found.process != nullptr) {
      FillProcessInfo(*found.process, results.initInfo());
      results.setProcess(
          kj::heap<ProcessImpl>(broker_, caller_.Copy(), kj::addRef(*found.process)));
    } else {
      FillReleasedInfo(id_, *found.released, results.initInfo());
      results.setReleased(true);
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> inspect(InspectContext context) override {
    ValueOrThrow(broker_.registry().Visible(peer_, id_));
    return broker_.SpawnerState(id_).then([this, context](std::string spawner) mutable {
      // Filled after the privhelper answered: the sandbox may have gone meanwhile.
      auto info = context.getResults().initInfo();
      FillSandboxInfo(*ValueOrThrow(broker_.registry().Visible(peer_, id_)), info);
      info.setSpawner(spawner);
    });
  }

  kj::Promise<void> delete_(DeleteContext context) override {
    return caller_.Charged([&] {
      return ValueOrThrow(broker_.DeleteSandbox(peer_, id_, context.getParams().getForce()));
    });
  }

  kj::Promise<void> pause(PauseContext context) override {
    return caller_.Charged([&] { return ValueOrThrow(broker_.PauseSandbox(peer_, id_)); });
  }

  kj::Promise<void> resume(ResumeContext context) override {
    return caller_.Charged([&] { return ValueOrThrow(broker_.ResumeSandbox(peer_, id_)); });
  }

  kj::Promise<void> connect(ConnectContext context) override {
    auto connected = caller_.Charged(
        [&] { return ValueOrThrow(broker_.Connect(peer_, id_, context.getParams().getPort())); });
    return connected.then([this, context](kj::AutoCloseFd fd) mutable {
      context.getResults().setSocket(kj::heap<SocketImpl>(kj::mv(fd), caller_.Ticket()));
    });
  }

 private:
  Broker& broker_;
  Caller caller_;
  const Peer& peer_;
  std::string id_;
};

class SupervisorImpl final : public api::Supervisor::Server {
 public:
  SupervisorImpl(Broker& broker, Caller caller)
      : broker_(broker), caller_(kj::mv(caller)), peer_(caller_.peer) {}

  DispatchResult dispatchCall(uint64_t interface_id, uint16_t method_id,
                              AnyContext context) override {
    using Methods = api::Supervisor;
    return AuditedDispatch<api::Supervisor>(
        caller_, interface_id, method_id, context,
        [this](AuditRecord& r, capnp::AnyPointer::Reader params) {
          if (r.operation == "Supervisor.createSandbox")
            r.deployment =
                params.getAs<Methods::CreateSandboxParams>().getSpec().getDeploymentId().cStr();
          if (r.operation == "Supervisor.findSandbox")
            r.deployment = params.getAs<Methods::FindSandboxParams>().getDeploymentId().cStr();
          if (r.operation == "Supervisor.getSandbox") {  // the id asked for, found or not
            r.sandbox_id = params.getAs<Methods::GetSandboxParams>().getId().cStr();
            if (SandboxRecord* sb = broker_.registry().Find(r.sandbox_id))
              r.deployment = sb->deployment_id;
          }
        },
        [](AuditRecord& r, capnp::AnyPointer::Builder results) {
          // createSandbox and findSandbox: the sandbox they answer with.
          if (r.operation == "Supervisor.createSandbox")
            r.sandbox_id = results.getAs<Methods::CreateSandboxResults>().getInfo().getId().cStr();
          if (r.operation == "Supervisor.findSandbox")
            r.sandbox_id = results.getAs<Methods::FindSandboxResults>().getInfo().getId().cStr();
        },
        [&] { return api::Supervisor::Server::dispatchCall(interface_id, method_id, context); });
  }

 protected:
  kj::Promise<void> createSandbox(CreateSandboxContext context) override {
    auto created = caller_.Charged(
        [&] { return ValueOrThrow(broker_.CreateSandbox(peer_, context.getParams().getSpec())); });
    return created.then([this, context](Broker::CreatedSandbox sb) mutable {
      auto results = context.getResults();
      FillSandboxInfo(*ValueOrThrow(broker_.registry().Visible(peer_, sb.id)), results.initInfo());
      results.setSandbox(kj::heap<SandboxImpl>(broker_, caller_.Copy(), sb.id));
      results.setCreated(sb.created);
    });
  }

  kj::Promise<void> findSandbox(FindSandboxContext context) override {
    ThrowIfError(broker_.registry().RequireSomeDeployment(peer_));
    auto params = context.getParams();
    ThrowIfError(CheckName("deploymentId", params.getDeploymentId()));
    ThrowIfError(CheckKey("key", params.getKey()));
    if (params.getKey().size() == 0)
      ThrowStatus(absl::InvalidArgumentError("key: must not be empty"));
    SandboxRecord* sb = ValueOrThrow(broker_.registry().FindByKey(
        peer_, params.getDeploymentId().cStr(), params.getKey().cStr()));
    auto results = context.getResults();
    FillSandboxInfo(*sb, results.initInfo());
    results.setSandbox(kj::heap<SandboxImpl>(broker_, caller_.Copy(), sb->id));
    return kj::READY_NOW;
  }

  kj::Promise<void> getSandbox(GetSandboxContext context) override {
    ThrowIfError(broker_.registry().RequireSomeDeployment(peer_));
    std::string id = context.getParams().getId().cStr();
    ThrowIfError(broker_.registry().Visible(peer_, id).status());
    context.getResults().setSandbox(kj::heap<SandboxImpl>(broker_, caller_.Copy(), id));
    return kj::READY_NOW;
  }

  kj::Promise<void> listSandboxes(ListSandboxesContext context) override {
    ThrowIfError(broker_.registry().RequireSomeDeployment(peer_));
    auto visible = broker_.registry().List(peer_);
    auto list = context.getResults().initSandboxes(static_cast<unsigned>(visible.size()));
    for (unsigned i = 0; i < list.size(); ++i) FillSandboxInfo(*visible[i], list[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> stats(StatsContext context) override {
    ThrowIfError(broker_.registry().RequireSomeDeployment(peer_));
    auto asked = context.getParams().getIds();
    if (asked.size() > kMaxStatsIds)
      ThrowStatus(absl::InvalidArgumentError(absl::StrCat("ids: at most ", kMaxStatsIds)));
    std::vector<std::string> ids;
    if (asked.size() == 0) {
      for (const SandboxRecord* sb : broker_.registry().List(peer_)) ids.push_back(sb->id);
    } else {
      for (auto id : asked) {
        ids.emplace_back(id.cStr(), id.size());
        auto sb = broker_.registry().Visible(peer_, ids.back());
        ThrowIfError(sb.status());
        // One still being created is not there yet, as for listSandboxes and byKey.
        if ((*sb)->state == SandboxState::kCreating)
          ThrowStatus(absl::NotFoundError(absl::StrCat("no sandbox \"", ids.back(), "\"")));
      }
    }
    auto measured = caller_.Charged([&] { return broker_.Usage(ids); });
    return measured.then(
        [this, context, ids](Broker::UsageAnswer res) mutable {
          // Filled after the privhelper answered: a sandbox may have gone meanwhile.
          auto still = [this](const std::string& id) -> const SandboxRecord* {
            auto sb = broker_.registry().Visible(peer_, id);
            return sb.ok() && (*sb)->state != SandboxState::kCreating ? *sb : nullptr;
          };
          FillStatsList(ids, res, still,
                        [&](unsigned n) { return context.getResults().initStats(n); });
        });
  }

  kj::Promise<void> info(InfoContext context) override {
    auto results = context.getResults();
    results.setVersion(kBrokerVersion);
    results.setPeerUid(peer_.uid);
    auto names = broker_.registry().DeploymentsFor(peer_);
    auto list = results.initDeployments(static_cast<unsigned>(names.size()));
    for (unsigned i = 0; i < list.size(); ++i) list.set(i, names[i]);
    return kj::READY_NOW;
  }

 private:
  Broker& broker_;
  Caller caller_;
  const Peer& peer_;
};

// The operator's socket (schema/operator.capnp): every sandbox and the service's health.
class OperatorImpl final : public operator_api::Operator::Server {
 public:
  OperatorImpl(Broker& broker, const AuditLog& audit, OperatorCounters counters)
      : broker_(broker), audit_(audit), counters_(kj::mv(counters)) {}

 protected:
  kj::Promise<void> metrics(MetricsContext context) override {
    std::vector<std::string> ids;
    for (SandboxRecord* sb : broker_.registry().All())
      if (sb->state != SandboxState::kCreating) ids.push_back(sb->id);
    return broker_.Usage(ids).then(
        [this, context, ids](Broker::UsageAnswer res) mutable {
          auto results = context.getResults();
          auto still = [this](const std::string& id) -> const SandboxRecord* {
            SandboxRecord* sb = broker_.registry().Find(id);
            return sb != nullptr && sb->state != SandboxState::kCreating ? sb : nullptr;
          };
          FillStatsList(ids, res, still,
                        [&](unsigned n) { return results.initSandboxes(n); });
          auto service = results.initService();
          auto usage = res.service();
          service.setVersion(kBrokerVersion);
          service.setSampledAtNs(MonotonicNs());
          service.setCpuNs(usage.getCpuNs());
          service.setMemoryBytes(usage.getMemoryBytes());
          service.setMemoryLimitBytes(usage.getMemoryLimitBytes());
          service.setHostTasks(usage.getHostTasks());
          service.setHostTasksLimit(usage.getHostTasksLimit());
          service.setCpuMillisLimit(usage.getCpuMillisLimit());
          service.setPrivhelperStartedAtUnixMs(usage.getPrivhelperStartedAtUnixMs());
          service.setBrokerRestarts(usage.getBrokerRestarts());
          service.setBrokerReloads(usage.getBrokerReloads());
          service.setBrokerStartedAtUnixMs(counters_.started_at_unix_ms);
          const AuditLog::Counts& audited = audit_.counts();
          service.setAuditRecords(audited.records);
          service.setAuditLines(audited.lines);
          auto not_ok = service.initNotOk(static_cast<unsigned>(audited.not_ok_by_reason.size()));
          unsigned i = 0;
          for (const auto& [reason, count] : audited.not_ok_by_reason) {
            not_ok[i].setReason(reason);
            not_ok[i++].setCount(count);
          }
          if (counters_.connections) service.setConnections(static_cast<uint32_t>(counters_.connections()));
          if (counters_.parked_calls) service.setParkedCalls(static_cast<uint32_t>(counters_.parked_calls()));
        });
  }

 private:
  Broker& broker_;
  const AuditLog& audit_;
  OperatorCounters counters_;
};

}  // namespace

operator_api::Operator::Client NewOperator(Broker& broker, const AuditLog& audit,
                                           OperatorCounters counters) {
  return kj::heap<OperatorImpl>(broker, audit, kj::mv(counters));
}

api::Supervisor::Client NewSupervisor(Broker& broker, AuditLog& audit, Peer peer,
                                      kj::Own<CallLimiter::Connection> calls) {
  bool authorized = !broker.registry().DeploymentsFor(peer).empty();
  return kj::heap<SupervisorImpl>(broker,
                                  Caller{std::move(peer), kj::mv(calls), &audit, authorized});
}

}  // namespace paseo
