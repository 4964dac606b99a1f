// See fake_service.h. Errors are thrown the way the broker throws them (ThrowStatus), so a
// client sees the same "<reason>: <message>" texts.
#include "client/fake_service.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include <kj/debug.h>

#include "common/rpc_errors.h"

namespace paseo::client {
namespace {

// Small, so that ordering across several write() calls is exercised.
constexpr size_t kChunk = 4;

capnp::Data::Reader AsData(const std::string& s) {
  return capnp::Data::Reader(reinterpret_cast<const capnp::byte*>(s.data()), s.size());
}

kj::Promise<void> Write(api::OutputSink::Client sink, uint64_t offset, std::string bytes) {
  auto req = sink.writeRequest();
  req.setOffset(offset);
  req.setData(AsData(bytes));
  return req.send();
}

kj::Promise<void> End(api::OutputSink::Client sink, const ProcessExit& exit, uint64_t end_offset) {
  auto req = sink.endRequest();
  ToCapnp(exit, req.initStatus());
  req.setEndOffset(end_offset);
  return req.send().ignoreResult();
}

// A stream's bytes [lost, lost + data.size()) from `from` on: gap() for what is no longer
// kept, the rest in kChunk pieces in order, then end(). With `crash_at`, `crash` runs once the
// bytes before it have been sent, instead of the rest.
kj::Promise<void> Deliver(api::OutputSink::Client sink, const std::string& data, uint64_t lost,
                          uint64_t from, ProcessExit exit, std::optional<uint64_t> crash_at = {},
                          std::function<void()> crash = nullptr) {
  kj::Promise<void> chain = kj::READY_NOW;
  if (from < lost) {
    auto req = sink.gapRequest();
    req.setLostBytes(lost - from);
    chain = req.send().ignoreResult();
  }
  uint64_t end = lost + data.size();
  for (uint64_t off = std::max(from, lost); off < end; off += kChunk) {
    if (crash_at && off >= *crash_at) {
      // Later, from the event loop: the connection must not end under its own call.
      return chain.then([crash]() { return kj::evalLater([crash]() { crash(); }); });
    }
    std::string piece = data.substr(off - lost, std::min<uint64_t>(kChunk, end - off));
    if (crash_at && off + piece.size() > *crash_at) piece.resize(*crash_at - off);
    chain = chain.then([sink, off, piece]() mutable { return Write(sink, off, piece); });
  }
  if (crash_at) return chain.then([crash]() { return kj::evalLater([crash]() { crash(); }); });
  return chain.then([sink, exit, end]() mutable { return End(sink, exit, end); });
}

class Subscription final : public api::Subscription::Server {};

}  // namespace

struct FakeService::Deliveries final : public kj::TaskSet::ErrorHandler {
  explicit Deliveries(FakeService& service) : service(service), tasks(*this) {}
  void taskFailed(kj::Exception&& e) override {
    service.errors.push_back(ClientFacingDescription(e));
  }
  FakeService& service;
  kj::TaskSet tasks;
};

class FakeService::Process final : public api::Process::Server {
 public:
  Process(FakeService& service, std::string sandbox_id, std::string id)
      : service_(service), sandbox_id_(kj::mv(sandbox_id)), id_(kj::mv(id)) {}

  static void FillInfo(const FakeProcess& p, const std::string& sandbox_id,
                       api::ProcessInfo::Builder info) {
    info.setId(p.id);
    info.setSandboxId(sandbox_id);
    info.setKey(p.key);
    info.setOutput(p.output);
    auto argv = info.initArgv(static_cast<unsigned>(p.argv.size()));
    for (size_t i = 0; i < p.argv.size(); ++i) argv.set(static_cast<unsigned>(i), p.argv[i]);
    bool running = p.script.echo_input && !p.input_closed;
    ToCapnp(running ? ProcessExit{} : p.script.exit, info.initStatus());
    uint64_t out = p.script.echo_input ? p.input.size() : p.script.stdout_data.size();
    if (p.script.stdout_bytes_at_info) out = *p.script.stdout_bytes_at_info;
    info.setStdoutBytes(p.script.lost_bytes + out);
    info.setStderrBytes(p.script.lost_bytes + p.script.stderr_data.size());
    info.setTty(p.script.tty);
  }

 protected:
  kj::Promise<void> info(InfoContext context) override {
    FillInfo(Get(), sandbox_id_, context.getResults().initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> writeInput(WriteInputContext context) override {
    FakeProcess& p = Get();
    auto data = context.getParams().getData();
    std::string bytes(reinterpret_cast<const char*>(data.begin()), data.size());
    uint64_t offset = p.script.lost_bytes + p.input.size();
    p.input += bytes;
    if (p.script.echo_input) {
      for (auto& sink : p.sinks) service_.deliveries_->tasks.add(Write(sink, offset, bytes));
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> closeInput(CloseInputContext context) override {
    FakeProcess& p = Get();
    p.input_closed = true;
    if (p.script.echo_input) {
      for (auto& sink : p.sinks) {
        service_.deliveries_->tasks.add(
            End(sink, p.script.exit, p.script.lost_bytes + p.input.size()));
      }
      p.sinks.clear();
      for (auto& waiter : p.waiters) waiter->fulfill();
      p.waiters.clear();
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> release(ReleaseContext context) override {
    Get().released = true;
    return kj::READY_NOW;
  }

  kj::Promise<void> signal(SignalContext context) override {
    FakeProcess& p = Get();
    if (p.refused_signals < p.script.signals_while_starting) {
      ++p.refused_signals;
      return StatusToException(absl::UnavailableError("process is still starting; retry"));
    }
    p.signals.push_back(context.getParams().getSignal());
    return kj::READY_NOW;
  }

  kj::Promise<void> wait(WaitContext context) override {
    FakeProcess& p = Get();
    kj::Promise<void> ended = kj::READY_NOW;
    if (p.script.echo_input && !p.input_closed) {
      auto paf = kj::newPromiseAndFulfiller<void>();
      p.waiters.push_back(kj::mv(paf.fulfiller));
      ended = kj::mv(paf.promise);
    }
    return ended.then([this, context]() mutable {
      ToCapnp(Get().script.exit, context.getResults().initStatus());
    });
  }

  kj::Promise<void> subscribe(SubscribeContext context) override {
    FakeProcess& p = Get();
    auto params = context.getParams();
    p.subscriptions.emplace_back(params.getStream(), params.getFromOffset());
    if (p.script.echo_input) {
      p.sinks.push_back(params.getSink());
    } else {
      const std::string& data =
          params.getStream() == api::Stream::STDERR ? p.script.stderr_data : p.script.stdout_data;
      std::optional<uint64_t> crash_at;
      if (params.getStream() == p.script.disconnect_stream) {
        crash_at = p.script.disconnect_at;
        p.script.disconnect_at.reset();  // one crash
      }
      FakeService& service = service_;
      service_.deliveries_->tasks.add(Deliver(params.getSink(), data, p.script.lost_bytes,
                                              params.getFromOffset(), p.script.exit, crash_at,
                                              [&service] {
                                                if (service.crash) service.crash();
                                              }));
    }
    context.getResults().setSubscription(kj::heap<Subscription>());
    return kj::READY_NOW;
  }

  kj::Promise<void> resize(ResizeContext context) override {
    auto params = context.getParams();
    Get().resizes.emplace_back(params.getRows(), params.getCols());
    return kj::READY_NOW;
  }

 private:
  FakeProcess& Get() { return service_.sandboxes.at(sandbox_id_).processes.at(id_); }

  FakeService& service_;
  std::string sandbox_id_, id_;
};

// Sandbox.connect's answer: its fd goes with the message that carries it.
class Socket final : public api::Socket::Server {
 public:
  explicit Socket(kj::AutoCloseFd fd) : fd_(kj::mv(fd)) {}
  kj::Maybe<int> getFd() override { return fd_.get(); }

 private:
  kj::AutoCloseFd fd_;
};

class FakeService::Sandbox final : public api::Sandbox::Server {
 public:
  Sandbox(FakeService& service, std::string id) : service_(service), id_(kj::mv(id)) {}

  static void FillInfo(const FakeSandbox& sb, api::SandboxInfo::Builder info) {
    info.setId(sb.id);
    info.setDeploymentId(sb.deployment);
    info.setProfile(sb.profile);
    info.setState(sb.paused ? "paused" : sb.state);
    info.setStateReason(sb.state_reason);
    info.setKey(sb.key);
    info.initNetwork().setMode(sb.network_address.empty() ? "none" : "sandbox");
    info.getNetwork().setAddress(sb.network_address);
    auto labels = info.initLabels(static_cast<unsigned>(sb.labels.size()));
    for (unsigned i = 0; i < sb.labels.size(); ++i) {
      labels[i].setKey(sb.labels[i].first);
      labels[i].setValue(sb.labels[i].second);
    }
    info.setProcessCount(static_cast<uint32_t>(sb.processes.size()));
    info.setOwnerUid(1000);
  }

 protected:
  kj::Promise<void> startProcess(StartProcessContext context) override {
    auto spec = context.getParams().getSpec();
    FakeProcess p;
    p.id = "p-" + std::to_string(service_.next_id_++);
    for (auto a : spec.getArgv()) p.argv.emplace_back(a.cStr());
    for (auto e : spec.getEnv()) p.env.emplace_back(e.cStr());
    p.cwd = spec.getCwd();
    p.tty = spec.getTty();
    p.rows = spec.getRows();
    p.cols = spec.getCols();
    p.key = spec.getKey();
    p.output = spec.getOutput();
    p.workspace_cwd = spec.getWorkspaceCwd();
    if (Get().paused || (Get().state != "running" && Get().state != "running-unattached"))
      ThrowStatus(absl::FailedPreconditionError("sandbox " + id_ + " is not running"));
    if (service_.refuse_start) ThrowStatus(*service_.refuse_start);
    for (const auto& [unused, other] : Get().processes) {
      if (!p.key.empty() && other.key == p.key)
        ThrowStatus(absl::AlreadyExistsError("process key " + p.key));
    }
    p.script = service_.script;
    std::string id = p.id;
    FakeProcess& stored = Get().processes[id] = kj::mv(p);
    auto results = context.getResults();
    results.setProcess(kj::heap<Process>(service_, id_, id));
    Process::FillInfo(stored, id_, results.initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> getProcess(GetProcessContext context) override {
    std::string id = context.getParams().getId();
    if (Get().processes.count(id) == 0) ThrowStatus(absl::NotFoundError("no process " + id));
    context.getResults().setProcess(kj::heap<Process>(service_, id_, id));
    return kj::READY_NOW;
  }

  kj::Promise<void> listProcesses(ListProcessesContext context) override {
    FakeSandbox& sb = Get();
    auto list = context.getResults().initProcesses(static_cast<unsigned>(sb.processes.size()));
    unsigned i = 0;
    for (const auto& [id, p] : sb.processes) Process::FillInfo(p, id_, list[i++]);
    return kj::READY_NOW;
  }

  kj::Promise<void> inspect(InspectContext context) override {
    FillInfo(Get(), context.getResults().initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> delete_(DeleteContext context) override {
    auto& undeletable = service_.undeletable;
    if (std::find(undeletable.begin(), undeletable.end(), id_) != undeletable.end())
      ThrowStatus(absl::FailedPreconditionError("sandbox " + id_ + " has running processes"));
    FakeSandbox& sb = Get();
    if (sb.deleted) ThrowStatus(absl::NotFoundError("no sandbox " + id_));
    sb.deleted = true;
    sb.delete_force = context.getParams().getForce();
    return kj::READY_NOW;
  }

  kj::Promise<void> connect(ConnectContext context) override {
    FakeSandbox& sb = Get();
    uint16_t port = context.getParams().getPort();
    sb.connects.push_back(port);
    if (sb.paused) ThrowStatus(absl::FailedPreconditionError("sandbox " + sb.id + " is paused"));
    if (std::find(sb.inbound_ports.begin(), sb.inbound_ports.end(), port) ==
        sb.inbound_ports.end())
      ThrowStatus(absl::PermissionDeniedError(
          "port " + std::to_string(port) + " is not in the profile's network.inboundPorts"));
    if (!service_.serve_port)
      ThrowStatus(absl::UnavailableError("nothing listening on port " + std::to_string(port)));
    int sv[2];
    KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
    service_.serve_port(kj::AutoCloseFd(sv[1]));
    context.getResults().setSocket(kj::heap<Socket>(kj::AutoCloseFd(sv[0])));
    return kj::READY_NOW;
  }

  kj::Promise<void> pause(PauseContext) override {
    Get().paused = true;
    return kj::READY_NOW;
  }

  kj::Promise<void> resume(ResumeContext) override {
    Get().paused = false;
    return kj::READY_NOW;
  }

  kj::Promise<void> findProcess(FindProcessContext context) override {
    std::string key = context.getParams().getKey();
    for (const auto& [id, p] : Get().processes) {
      if (key.empty() || p.key != key) continue;
      auto results = context.getResults();
      if (p.released) {
        results.setReleased(true);
        auto info = results.initInfo();
        info.setId(p.id);
        info.setKey(p.key);
        ToCapnp(p.script.exit, info.initStatus());
      } else {
        results.setProcess(kj::heap<Process>(service_, id_, id));
        Process::FillInfo(p, id_, results.initInfo());
      }
      return kj::READY_NOW;
    }
    ThrowStatus(absl::NotFoundError("no process with key " + key));
  }

 private:
  FakeSandbox& Get() { return service_.sandboxes.at(id_); }

  FakeService& service_;
  std::string id_;
};

class FakeService::Supervisor final : public api::Supervisor::Server {
 public:
  explicit Supervisor(FakeService& service) : service_(service) {}

 protected:
  kj::Promise<void> createSandbox(CreateSandboxContext context) override {
    if (service_.refuse_create) ThrowStatus(*service_.refuse_create);
    auto spec = context.getParams().getSpec();
    auto results = context.getResults();
    if (const FakeSandbox* keyed = Keyed(spec.getDeploymentId(), spec.getKey())) {
      results.setSandbox(kj::heap<Sandbox>(service_, keyed->id));
      Sandbox::FillInfo(*keyed, results.initInfo());
      results.setCreated(false);
      return kj::READY_NOW;
    }
    FakeSandbox& sb = service_.AddSandbox("sb-" + std::to_string(service_.next_id_++));
    sb.key = spec.getKey();
    sb.deployment = spec.getDeploymentId();
    sb.profile = spec.getProfile();
    for (auto w : spec.getWorkspaces())
      sb.workspaces.emplace_back(w.getPath(), w.getDestination(), w.getMode());
    for (auto c : spec.getCredentials()) sb.credentials.emplace_back(c.cStr());
    for (auto l : spec.getLabels()) sb.labels.emplace_back(l.getKey(), l.getValue());
    results.setSandbox(kj::heap<Sandbox>(service_, sb.id));
    Sandbox::FillInfo(sb, results.initInfo());
    results.setCreated(true);
    return kj::READY_NOW;
  }

  kj::Promise<void> findSandbox(FindSandboxContext context) override {
    auto params = context.getParams();
    const FakeSandbox* keyed = Keyed(params.getDeploymentId(), params.getKey());
    if (keyed == nullptr)
      ThrowStatus(absl::NotFoundError(std::string("no sandbox with key ") +
                                      params.getKey().cStr()));
    auto results = context.getResults();
    results.setSandbox(kj::heap<Sandbox>(service_, keyed->id));
    Sandbox::FillInfo(*keyed, results.initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> getSandbox(GetSandboxContext context) override {
    std::string id = context.getParams().getId();
    auto it = service_.sandboxes.find(id);
    if (it == service_.sandboxes.end() || it->second.deleted)
      ThrowStatus(absl::NotFoundError("no sandbox " + id));
    context.getResults().setSandbox(kj::heap<Sandbox>(service_, id));
    return kj::READY_NOW;
  }

  kj::Promise<void> listSandboxes(ListSandboxesContext context) override {
    std::vector<const FakeSandbox*> live;
    for (const auto& [id, sb] : service_.sandboxes) {
      if (!sb.deleted) live.push_back(&sb);
    }
    auto list = context.getResults().initSandboxes(static_cast<unsigned>(live.size()));
    for (unsigned i = 0; i < live.size(); ++i) Sandbox::FillInfo(*live[i], list[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> stats(StatsContext context) override {
    std::vector<std::string> ids;
    for (auto id : context.getParams().getIds()) {
      auto it = service_.sandboxes.find(id.cStr());
      if (it == service_.sandboxes.end() || it->second.deleted)
        ThrowStatus(absl::NotFoundError(std::string("no sandbox ") + id.cStr()));
      ids.emplace_back(id.cStr());
    }
    if (ids.empty())
      for (const auto& [id, sb] : service_.sandboxes)
        if (!sb.deleted) ids.push_back(id);
    uint64_t n = ++service_.stats_calls;
    auto list = context.getResults().initStats(static_cast<unsigned>(ids.size()));
    for (unsigned i = 0; i < list.size(); ++i) {
      const FakeSandbox& sb = service_.sandboxes.at(ids[i]);
      list[i].setSandboxId(sb.id);
      list[i].setDeploymentId(sb.deployment);
      list[i].setState("running");
      list[i].setSampledAtNs(n * 1'000'000'000);
      list[i].setMeasured(true);
      list[i].setCpuNs(n * 500'000'000);
      list[i].setMemoryBytes(uint64_t{100} << 20);
      list[i].setMemoryLimitBytes(uint64_t{1} << 30);
      list[i].setProcesses(static_cast<uint32_t>(sb.processes.size()));
    }
    return kj::READY_NOW;
  }

  kj::Promise<void> info(InfoContext context) override {
    auto results = context.getResults();
    results.setVersion(service_.version);
    results.setPeerUid(service_.peer_uid);
    auto list = results.initDeployments(static_cast<unsigned>(service_.deployments.size()));
    for (size_t i = 0; i < service_.deployments.size(); ++i)
      list.set(static_cast<unsigned>(i), service_.deployments[i]);
    return kj::READY_NOW;
  }

 private:
  // The live sandbox of `deployment` created with `key` (never for an empty key).
  const FakeSandbox* Keyed(capnp::Text::Reader deployment, capnp::Text::Reader key) const {
    return service_.FindByKey(deployment.cStr(), key.cStr());
  }

  FakeService& service_;
};

FakeService::FakeService() : deliveries_(kj::heap<Deliveries>(*this)) {}
FakeService::~FakeService() = default;

api::Supervisor::Client FakeService::NewSupervisor() { return kj::heap<Supervisor>(*this); }

FakeSandbox& FakeService::AddSandbox(const std::string& id) {
  FakeSandbox& sb = sandboxes[id];
  sb.id = id;
  return sb;
}

FakeSandbox* FakeService::FindByKey(const std::string& deployment, const std::string& key) {
  if (key.empty()) return nullptr;
  for (auto& [id, sb] : sandboxes) {
    if (!sb.deleted && sb.key == key && sb.deployment == deployment) return &sb;
  }
  return nullptr;
}

FakeProcess& FakeService::AddProcess(const std::string& sandbox_id, const std::string& process_id,
                                     const FakeProcessScript& script) {
  FakeProcess& p = sandboxes.at(sandbox_id).processes[process_id];
  p.id = process_id;
  p.script = script;
  return p;
}

// One served connection, as capnp's TwoPartyServer keeps it.
// Like the broker's, it sends fds (one per message) so that connect's Socket arrives.
struct UnixSocketServer::Accepted {
  Accepted(kj::Own<kj::AsyncCapabilityStream> connection, capnp::Capability::Client bootstrap)
      : stream(kj::mv(connection)),
        network(*stream, /*maxFdsPerMessage=*/1, capnp::rpc::twoparty::Side::SERVER),
        rpc(capnp::makeRpcServer(network, kj::mv(bootstrap))) {}
  kj::Own<kj::AsyncCapabilityStream> stream;
  capnp::TwoPartyVatNetwork network;
  capnp::RpcSystem<capnp::rpc::twoparty::VatId> rpc;
};

UnixSocketServer::UnixSocketServer(kj::AsyncIoContext& io, const std::string& path,
                                   capnp::Capability::Client bootstrap)
    : path_(path),
      low_(*io.lowLevelProvider),
      bootstrap_(kj::mv(bootstrap)),
      listener_(io.provider->getNetwork()
                    .parseAddress(kj::str("unix:", path.c_str()))
                    .wait(io.waitScope)
                    ->listen()),
      connections_(kj::heap<kj::TaskSet>(errors_)),
      serving_(AcceptLoop().eagerlyEvaluate([](kj::Exception&& e) {
        KJ_LOG(ERROR, "fake service stopped listening", e);
      })) {}

UnixSocketServer::~UnixSocketServer() noexcept(false) = default;

kj::Promise<void> UnixSocketServer::AcceptLoop() {
  return listener_->accept().then([this](kj::Own<kj::AsyncIoStream>&& connection) {
    // The receiver's stream cannot pass fds: wrap (a duplicate of) its socket again.
    int fd = -1;
    KJ_IF_MAYBE(f, connection->getFd()) { fd = fcntl(*f, F_DUPFD_CLOEXEC, 3); }
    KJ_REQUIRE(fd >= 0, "cannot duplicate an accepted socket");
    connection = nullptr;
    auto accepted = kj::heap<Accepted>(
        low_.wrapUnixSocketFd(fd, kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP), bootstrap_);
    auto disconnected = accepted->network.onDisconnect();
    connections_->add(kj::mv(disconnected).attach(kj::mv(accepted)));
    return AcceptLoop();
  });
}

void UnixSocketServer::DropConnections() { connections_ = kj::heap<kj::TaskSet>(errors_); }

void UnixSocketServer::StopListening() {
  serving_ = kj::NEVER_DONE;
  listener_ = nullptr;
  unlink(path_.c_str());
}

SocketDir::SocketDir() {
  const char* tmp = getenv("TEST_TMPDIR");
  std::string base = tmp != nullptr && *tmp != '\0' && std::strlen(tmp) < 64 ? tmp : "/tmp";
  std::string templ = base + "/paseo-client.XXXXXX";
  KJ_REQUIRE(mkdtemp(templ.data()) != nullptr, "mkdtemp", templ, strerror(errno));
  path_ = templ;
}

SocketDir::~SocketDir() {
  if (DIR* dir = opendir(path_.c_str())) {
    while (dirent* e = readdir(dir)) {
      if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
        unlink((path_ + "/" + e->d_name).c_str());
    }
    closedir(dir);
  }
  rmdir(path_.c_str());
}

}  // namespace paseo::client
