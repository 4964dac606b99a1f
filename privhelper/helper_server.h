// HelperServer: the privhelper's end of the private protocol (schema/helper.capnp), a closed
// table in the manner of openssh's monitor. Every method validates its params
// (request_validation.h), hands the checked value to SandboxHost (sandbox_host.h), and sends
// back what the host returned; it is the one place where a Status becomes the client-facing
// exception (common/rpc_errors.h).
//
//   method         validator            host action
//   policy         ValidatePolicy       (the config's deployments, served from here)
//   createSandbox  ValidateCreate       Create, run to completion
//   startProcess   ValidateStart        StartProcess
//   waitProcess    ValidateWait         Wait
//   signalProcess  ValidateSignal       Signal
//   deleteSandbox  ValidateDelete       Delete (answers once nothing runs; the rest is background)
//   inventory      ValidateInventory    Inventory
//   reattach       ValidateReattach     Reattach
//   closeInput     ValidateCloseInput   CloseInput
//   waitSandbox    ValidateWaitSandbox  WaitStopped
//   releaseProcess ValidateReleaseProcess ReleaseProcess
//   awaitGone      ValidateAwaitGone    AwaitGone
//   spawnerState   ValidateSpawnerState SpawnerState
//   sandboxUsage   ValidateSandboxUsage SandboxUsage, ServiceUsage (and ServiceFacts)
#pragma once

#include <kj/async.h>

#include "privhelper/config.h"
#include "privhelper/sandbox_host.h"
#include "schema/helper.capnp.h"

namespace paseo {

// What main.cc knows of the service itself (Helper.sandboxUsage's service figures).
struct ServiceFacts {
  uint32_t broker_restarts = 0;  // brokers restarted after ending by themselves
  uint32_t broker_reloads = 0;   // brokers restarted for a config reload
  int64_t started_at_unix_ms = 0;
};

class HelperServer final : public helper::Helper::Server {
 public:
  HelperServer(const Config& config, SandboxHost& host, const ServiceFacts* facts = nullptr)
      : config_(config), host_(host), facts_(facts) {}

 protected:
  kj::Promise<void> policy(PolicyContext context) override;
  kj::Promise<void> createSandbox(CreateSandboxContext context) override;
  kj::Promise<void> startProcess(StartProcessContext context) override;
  kj::Promise<void> waitProcess(WaitProcessContext context) override;
  kj::Promise<void> signalProcess(SignalProcessContext context) override;
  kj::Promise<void> deleteSandbox(DeleteSandboxContext context) override;
  kj::Promise<void> inventory(InventoryContext context) override;
  kj::Promise<void> reattach(ReattachContext context) override;
  kj::Promise<void> closeInput(CloseInputContext context) override;
  kj::Promise<void> waitSandbox(WaitSandboxContext context) override;
  kj::Promise<void> pauseSandbox(PauseSandboxContext context) override;
  kj::Promise<void> resumeSandbox(ResumeSandboxContext context) override;
  kj::Promise<void> awaitGone(AwaitGoneContext context) override;
  kj::Promise<void> connectPort(ConnectPortContext context) override;
  kj::Promise<void> releaseProcess(ReleaseProcessContext context) override;
  kj::Promise<void> spawnerState(SpawnerStateContext context) override;
  kj::Promise<void> sandboxUsage(SandboxUsageContext context) override;

 private:
  const Config& config_;
  SandboxHost& host_;
  const ServiceFacts* facts_;
};

}  // namespace paseo
