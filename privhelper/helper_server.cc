// See helper_server.h.
#include "privhelper/helper_server.h"

#include <utility>

#include "common/process_exit.h"
#include "common/rpc_errors.h"
#include "privhelper/request_validation.h"
#include "privhelper/fd_cap.h"

namespace paseo {
namespace {

// startProcess and reattach results: each fd as its own capability (stdin may be absent).
template <typename Results>
void SendStdio(SandboxHost::Stdio stdio, Results results) {
  if (stdio.stdin_w.get() >= 0) results.setStdin(kj::heap<FdCap>(kj::mv(stdio.stdin_w)));
  results.setStdout(kj::heap<FdCap>(kj::mv(stdio.stdout_r)));
  results.setStderr(kj::heap<FdCap>(kj::mv(stdio.stderr_r)));
}

// What the broker needs to authorize clients: each deployment, who may use it, its profiles.
void DescribePolicy(const Config& config, helper::BrokerPolicy::Builder out) {
  auto deployments = out.initDeployments(static_cast<unsigned>(config.deployments().size()));
  for (size_t i = 0; i < config.deployments().size(); ++i) {
    const auto& d = config.deployments()[i];
    auto o = deployments[static_cast<unsigned>(i)];
    o.setId(d.getId());
    o.setAllowedUids(d.getAllowedUids());
    o.setAllowedGids(d.getAllowedGids());
    auto names = config.ProfilesOf(d);
    auto profiles = o.initProfiles(static_cast<unsigned>(names.size()));
    auto sizes = o.initProfileBufferBytes(static_cast<unsigned>(names.size()));
    for (size_t j = 0; j < names.size(); ++j) {
      profiles.set(static_cast<unsigned>(j), names[j]);
      sizes.set(static_cast<unsigned>(j), config.FindProfile(names[j])->getOutputBufferBytes());
    }
    o.setOutputBufferBytes(config.FindProfile(names[0])->getOutputBufferBytes());
  }
  auto audit = config.helper().getAudit();
  auto a = out.initAudit();
  a.setToFile(audit.getDestination() == config::AuditDestination::FILE);
  if (a.getToFile()) a.setPath(config.AuditPath());
  a.setMaxBytes(audit.getMaxBytes());
  a.setMaxFiles(audit.getMaxFiles());
  a.setRefusalsPerSecond(audit.getRefusalsPerSecond());
}

}  // namespace

kj::Promise<void> HelperServer::policy(PolicyContext context) {
  ValueOrThrow(ValidatePolicy(context.getParams()));
  DescribePolicy(config_, context.getResults().initPolicy());
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::createSandbox(CreateSandboxContext context) {
  auto request = ValueOrThrow(ValidateCreate(config_, context.getParams()));
  std::string id = request.sandbox_id;
  return host_.RunToCompletion(ValueOrThrow(host_.Create(std::move(request))))
      .then([this, id, context]() mutable {
        host_.DescribeNetwork(id, context.getResults().initNetwork());
        host_.DescribePaths(id, context.getResults().initPaths());
      });
}

kj::Promise<void> HelperServer::startProcess(StartProcessContext context) {
  auto request = ValueOrThrow(ValidateStart(context.getParams()));
  SendStdio(ValueOrThrow(host_.StartProcess(request)), context.getResults());
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::waitProcess(WaitProcessContext context) {
  auto request = ValueOrThrow(ValidateWait(context.getParams()));
  return ValueOrThrow(host_.Wait(request)).then([context](ProcessExit exit) mutable {
    ToCapnp(exit, context.getResults().initStatus());
  });
}

kj::Promise<void> HelperServer::signalProcess(SignalProcessContext context) {
  auto request = ValueOrThrow(ValidateSignal(context.getParams()));
  return ValueOrThrow(host_.Signal(request));
}

kj::Promise<void> HelperServer::deleteSandbox(DeleteSandboxContext context) {
  auto request = ValueOrThrow(ValidateDelete(context.getParams()));
  return host_.RunToCompletion(ValueOrThrow(host_.Delete(request)));
}

kj::Promise<void> HelperServer::inventory(InventoryContext context) {
  auto request = ValueOrThrow(ValidateInventory(context.getParams()));
  host_.Inventory(request, context.getResults());
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::reattach(ReattachContext context) {
  auto request = ValueOrThrow(ValidateReattach(context.getParams()));
  return ValueOrThrow(host_.Reattach(request)).then([context](SandboxHost::Reattached r) mutable {
    auto results = context.getResults();
    SendStdio(kj::mv(r.stdio), results);
    results.setStdoutStart(r.stdout_start);
    results.setStderrStart(r.stderr_start);
  });
}

kj::Promise<void> HelperServer::closeInput(CloseInputContext context) {
  auto request = ValueOrThrow(ValidateCloseInput(context.getParams()));
  ThrowIfError(host_.CloseInput(request));
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::releaseProcess(ReleaseProcessContext context) {
  auto request = ValueOrThrow(ValidateReleaseProcess(context.getParams()));
  ThrowIfError(host_.ReleaseProcess(request));
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::waitSandbox(WaitSandboxContext context) {
  auto request = ValueOrThrow(ValidateWaitSandbox(context.getParams()));
  return ValueOrThrow(host_.WaitStopped(request)).then([context](SandboxHost::Stop stop) mutable {
    auto results = context.getResults();
    results.setReason(stop.reason);
    results.setOomKilled(stop.oom_killed);
  });
}

kj::Promise<void> HelperServer::pauseSandbox(PauseSandboxContext context) {
  auto request = ValueOrThrow(ValidatePauseSandbox(context.getParams()));
  return host_.RunToCompletion(ValueOrThrow(host_.Pause(request)));
}

kj::Promise<void> HelperServer::awaitGone(AwaitGoneContext context) {
  auto request = ValueOrThrow(ValidateAwaitGone(context.getParams()));
  return ValueOrThrow(host_.AwaitGone(request));
}

kj::Promise<void> HelperServer::connectPort(ConnectPortContext context) {
  auto request = ValueOrThrow(ValidateConnectPort(context.getParams()));
  return ValueOrThrow(host_.ConnectPort(request)).then([context](kj::AutoCloseFd fd) mutable {
    context.getResults().setSocket(kj::heap<FdCap>(kj::mv(fd)));
  });
}

kj::Promise<void> HelperServer::spawnerState(SpawnerStateContext context) {
  auto request = ValueOrThrow(ValidateSpawnerState(context.getParams()));
  context.getResults().setState(ValueOrThrow(host_.SpawnerState(request)));
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::sandboxUsage(SandboxUsageContext context) {
  auto request = ValueOrThrow(ValidateSandboxUsage(context.getParams()));
  auto results = context.getResults();
  std::vector<SandboxHost::Usage> usage = host_.SandboxUsage(request.sandbox_ids);
  auto list = results.initSandboxes(static_cast<unsigned>(usage.size()));
  for (unsigned i = 0; i < list.size(); ++i) {
    const SandboxHost::Usage& u = usage[i];
    auto out = list[i];
    out.setSandboxId(u.sandbox_id);
    out.setMeasured(u.measured);
    out.setCpuNs(u.cgroup.cpu_ns);
    out.setMemoryBytes(u.cgroup.memory_bytes);
    out.setMemoryLimitBytes(u.cgroup.memory_limit_bytes);
    out.setHostTasks(static_cast<uint32_t>(u.cgroup.host_tasks));
    out.setHostTasksLimit(static_cast<uint32_t>(u.cgroup.host_tasks_limit));
    out.setNetworked(u.networked);
    out.setNetworkInBytes(u.network_in_bytes);
    out.setNetworkOutBytes(u.network_out_bytes);
  }
  CgroupUsage all = host_.ServiceUsage();
  auto service = results.initService();
  service.setCpuNs(all.cpu_ns);
  service.setMemoryBytes(all.memory_bytes);
  service.setMemoryLimitBytes(all.memory_limit_bytes);
  service.setHostTasks(static_cast<uint32_t>(all.host_tasks));
  service.setHostTasksLimit(static_cast<uint32_t>(all.host_tasks_limit));
  service.setCpuMillisLimit(config_.service().cpu_millis);
  if (facts_ != nullptr) {
    service.setBrokerRestarts(facts_->broker_restarts);
    service.setBrokerReloads(facts_->broker_reloads);
    service.setPrivhelperStartedAtUnixMs(facts_->started_at_unix_ms);
  }
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::resumeSandbox(ResumeSandboxContext context) {
  auto request = ValueOrThrow(ValidateResumeSandbox(context.getParams()));
  return host_.RunToCompletion(ValueOrThrow(host_.Resume(request)));
}

}  // namespace paseo
