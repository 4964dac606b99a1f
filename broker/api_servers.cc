// See api_servers.h.
#include "broker/api_servers.h"

#include "common/rpc_errors.h"

namespace paseo {
namespace {

void FillProcessInfo(const ProcessRecord& p, api::ProcessInfo::Builder out) {
  out.setId(p.id);
  out.setTty(p.tty);
  out.setSandboxId(p.sandbox_id);
  auto argv = out.initArgv(static_cast<unsigned>(p.argv.size()));
  for (unsigned i = 0; i < argv.size(); ++i) argv.set(i, p.argv[i]);
  ToCapnp(p.exit, out.initStatus());
  out.setStdoutBytes(p.stdout_log->end());
  out.setStderrBytes(p.stderr_log->end());
}

void FillSandboxInfo(const SandboxRecord& s, api::SandboxInfo::Builder out) {
  out.setId(s.id);
  out.setDeploymentId(s.deployment_id);
  out.setProfile(s.profile);
  out.setState(StateName(s.state));
  out.setCreatedAtUnixMs(s.created_ms);
  out.setOwnerUid(s.owner_uid);
  out.setProcessCount(static_cast<uint32_t>(s.processes.size()));
  auto labels = out.initLabels(static_cast<unsigned>(s.labels.size()));
  for (unsigned i = 0; i < labels.size(); ++i) {
    labels[i].setKey(s.labels[i].first);
    labels[i].setValue(s.labels[i].second);
  }
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
  ProcessImpl(Broker& broker, Peer peer, kj::Own<ProcessRecord> p)
      : broker_(broker), peer_(std::move(peer)), p_(kj::mv(p)) {}

 protected:
  kj::Promise<void> info(InfoContext context) override {
    FillProcessInfo(Visible(), context.getResults().initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> writeInput(WriteInputContext context) override {
    return ValueOrThrow(broker_.WriteInput(Visible(), context.getParams().getData()));
  }

  kj::Promise<void> closeInput(CloseInputContext context) override {
    return ValueOrThrow(broker_.CloseInput(Visible()));
  }

  kj::Promise<void> signal(SignalContext context) override {
    return ValueOrThrow(broker_.Signal(Visible(), context.getParams().getSignal()));
  }

  kj::Promise<void> resize(ResizeContext context) override {
    auto params = context.getParams();
    return ValueOrThrow(broker_.Resize(Visible(), params.getRows(), params.getCols()));
  }

  kj::Promise<void> wait(WaitContext context) override {
    auto p = kj::addRef(Visible());
    auto ended = p->WhenEnded();
    return ended.then([context, p = kj::mv(p)]() mutable {
      ToCapnp(p->exit, context.getResults().initStatus());
    });
  }

  kj::Promise<void> subscribe(SubscribeContext context) override {
    ProcessRecord& p = Visible();
    auto params = context.getParams();
    bool pty_stream = params.getStream() == api::Stream::PTY;
    if (pty_stream != p.tty)
      ThrowStatus(absl::InvalidArgumentError(p.tty ? "a tty process has only the pty stream"
                                                   : "only a tty process has a pty stream"));
    auto delivery =
        Deliver(kj::addRef(p), params.getStream(), params.getFromOffset(), params.getSink());
    context.getResults().setSubscription(kj::heap<SubscriptionImpl>(kj::mv(delivery)));
    return kj::READY_NOW;
  }

 private:
  // The process stays reachable only while its sandbox exists and the peer may use it.
  ProcessRecord& Visible() {
    ThrowIfError(broker_.registry().Visible(peer_, p_->sandbox_id).status());
    return *p_;
  }

  Broker& broker_;
  Peer peer_;
  kj::Own<ProcessRecord> p_;
};

class SandboxImpl final : public api::Sandbox::Server {
 public:
  SandboxImpl(Broker& broker, Peer peer, std::string id)
      : broker_(broker), peer_(std::move(peer)), id_(std::move(id)) {}

 protected:
  kj::Promise<void> startProcess(StartProcessContext context) override {
    auto started = ValueOrThrow(broker_.StartProcess(peer_, id_, context.getParams().getSpec()));
    return started.then([this, context](kj::Own<ProcessRecord> p) mutable {
      auto results = context.getResults();
      FillProcessInfo(*p, results.initInfo());
      results.setProcess(kj::heap<ProcessImpl>(broker_, peer_, kj::mv(p)));
    });
  }

  kj::Promise<void> getProcess(GetProcessContext context) override {
    ProcessRecord* p = ValueOrThrow(
        broker_.registry().VisibleProcess(peer_, id_, context.getParams().getId().cStr()));
    context.getResults().setProcess(kj::heap<ProcessImpl>(broker_, peer_, kj::addRef(*p)));
    return kj::READY_NOW;
  }

  kj::Promise<void> listProcesses(ListProcessesContext context) override {
    SandboxRecord* sb = ValueOrThrow(broker_.registry().Visible(peer_, id_));
    auto list = context.getResults().initProcesses(static_cast<unsigned>(sb->process_order.size()));
    for (unsigned i = 0; i < list.size(); ++i)
      FillProcessInfo(*sb->processes.at(sb->process_order[i]), list[i]);
    return kj::READY_NOW;
  }

  kj::Promise<void> inspect(InspectContext context) override {
    FillSandboxInfo(*ValueOrThrow(broker_.registry().Visible(peer_, id_)),
                    context.getResults().initInfo());
    return kj::READY_NOW;
  }

  kj::Promise<void> delete_(DeleteContext context) override {
    return ValueOrThrow(broker_.DeleteSandbox(peer_, id_, context.getParams().getForce()));
  }

 private:
  Broker& broker_;
  Peer peer_;
  std::string id_;
};

class SupervisorImpl final : public api::Supervisor::Server {
 public:
  SupervisorImpl(Broker& broker, Peer peer) : broker_(broker), peer_(std::move(peer)) {}

 protected:
  kj::Promise<void> createSandbox(CreateSandboxContext context) override {
    auto created = ValueOrThrow(broker_.CreateSandbox(peer_, context.getParams().getSpec()));
    return created.then([this, context](std::string id) mutable {
      auto results = context.getResults();
      FillSandboxInfo(*ValueOrThrow(broker_.registry().Visible(peer_, id)), results.initInfo());
      results.setSandbox(kj::heap<SandboxImpl>(broker_, peer_, id));
    });
  }

  kj::Promise<void> getSandbox(GetSandboxContext context) override {
    ThrowIfError(broker_.registry().RequireSomeDeployment(peer_));
    std::string id = context.getParams().getId().cStr();
    ThrowIfError(broker_.registry().Visible(peer_, id).status());
    context.getResults().setSandbox(kj::heap<SandboxImpl>(broker_, peer_, id));
    return kj::READY_NOW;
  }

  kj::Promise<void> listSandboxes(ListSandboxesContext context) override {
    ThrowIfError(broker_.registry().RequireSomeDeployment(peer_));
    auto visible = broker_.registry().List(peer_);
    auto list = context.getResults().initSandboxes(static_cast<unsigned>(visible.size()));
    for (unsigned i = 0; i < list.size(); ++i) FillSandboxInfo(*visible[i], list[i]);
    return kj::READY_NOW;
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
  Peer peer_;
};

}  // namespace

api::Supervisor::Client NewSupervisor(Broker& broker, Peer peer) {
  return kj::heap<SupervisorImpl>(broker, std::move(peer));
}

}  // namespace paseo
