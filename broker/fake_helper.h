// An in-process stand-in for the privhelper's Helper server, so the broker's operations can be
// tested without root or runsc: it records every call, can hold or fail creates and deletes,
// and hands the test the far ends of each started process's stdio pipes.
//
//   auto fake = kj::heap<FakeHelper>();
//   FakeHelper& helper = *fake;
//   Broker broker(low, events, kj::mv(fake), helper.policy(), dir);
//   ... start a process ...; write(helper.process(id).stdout_w, "hi", 2); helper.Exit(id, 3);
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include <capnp/message.h>
#include <kj/async.h>
#include <kj/io.h>

#include "common/process_exit.h"
#include "schema/helper.capnp.h"

namespace paseo {

class FakeHelper final : public helper::Helper::Server {
 public:
  // Deployment "work" (uid 1000; profiles "default" with 1 MiB kept output and "big" with
  // 4 MiB) and deployment "other" (uid 2000, profile "default").
  FakeHelper();

  helper::BrokerPolicy::Reader policy() { return policy_.getRoot<helper::BrokerPolicy>(); }

  // Every call, as "method sandbox-id [process-id] [signal]" (releaseProcess: "release <id>").
  std::vector<std::string> calls;
  // The client each create was made for, as "uid:gid,gid...".
  std::vector<std::string> create_peers;
  // What creates answer as the sandbox's network: mode "sandbox" with this address, or "none"
  // while empty.
  std::string create_network_address;

  // Set to make the next creates / deletes / pauses and resumes fail with this description
  // ("<reason>: text").
  std::string create_error, delete_error, pause_error;
  // connectPort: fails with this description when set ("<reason>: text"); else answers one end
  // of a new socketpair and keeps the other here, in order.
  std::string connect_error;
  std::vector<kj::AutoCloseFd> connected;

  // While true, creates / deletes / pauses and resumes wait until Release() is called.
  bool hold = false;
  void Release();
  // awaitGone (a delete's background teardown): answers at once unless `hold_gone`, then when
  // ReleaseGone() is called; fails with `gone_error` ("<reason>: text") when set.
  bool hold_gone = false;
  std::string gone_error;
  void ReleaseGone();

  struct FakeProcess {
    std::string sandbox_id;
    kj::AutoCloseFd stdin_r, stdout_w, stderr_w;  // the process's side of its stdio
    bool input_closed = false;
  };
  FakeProcess& process(const std::string& id) { return processes_.at(id); }
  bool has_process(const std::string& id) const { return processes_.count(id) > 0; }
  // Processes started or kept and not released yet (what the privhelper would still hold).
  size_t held_processes() const { return known_.size(); }
  // Ends the process: every waitProcess for it resolves with this status.
  void Exit(const std::string& id, int exit_code);
  void Kill(const std::string& id, int signal);
  void OomKill(const std::string& id);
  // runsc could not wait for it (its sandbox died).
  void EndUnknown(const std::string& id);

  // The sandbox stops by itself: every waitSandbox for it resolves with this (and later ones
  // at once); a delete makes them fail with not-found instead.
  void StopSandbox(const std::string& sandbox_id, const std::string& reason,
                   bool oom_killed = false);
  // The sandbox of every waitSandbox call, in order (kept apart from `calls`).
  std::vector<std::string> sandbox_waits;

  // What inventory() reports, and the stdio reattach() hands out (taken from `processes`).
  struct Known {
    std::string sandbox_id, deployment_id, profile;
    bool unattached = false, oom_killed = false, stopped = false, paused = false;
    std::string stop_reason = {};
    std::string lost_reason = {};
  };
  std::vector<Known> inventory_sandboxes;
  std::vector<std::pair<std::string, std::string>> inventory_processes;  // sandbox, process
  // Pipes for a process to be reattached: the broker's ends are handed out by reattach().
  FakeProcess& AddKeptProcess(const std::string& sandbox_id, const std::string& process_id);
  // What reattach() answers as a process's stdoutStart and stderrStart (default: the offsets it
  // was asked for, as for kept copies), and the offsets it was asked for.
  std::map<std::string, std::pair<uint64_t, uint64_t>> reattach_starts;
  std::map<std::string, std::pair<uint64_t, uint64_t>> reattach_asked;

 protected:
  kj::Promise<void> policy(PolicyContext context) override;
  kj::Promise<void> createSandbox(CreateSandboxContext context) override;
  kj::Promise<void> startProcess(StartProcessContext context) override;
  kj::Promise<void> waitProcess(WaitProcessContext context) override;
  kj::Promise<void> signalProcess(SignalProcessContext context) override;
  kj::Promise<void> deleteSandbox(DeleteSandboxContext context) override;
  kj::Promise<void> awaitGone(AwaitGoneContext context) override;
  kj::Promise<void> inventory(InventoryContext context) override;
  kj::Promise<void> reattach(ReattachContext context) override;
  kj::Promise<void> closeInput(CloseInputContext context) override;
  kj::Promise<void> waitSandbox(WaitSandboxContext context) override;
  kj::Promise<void> pauseSandbox(PauseSandboxContext context) override;
  kj::Promise<void> resumeSandbox(ResumeSandboxContext context) override;
  kj::Promise<void> releaseProcess(ReleaseProcessContext context) override;
  kj::Promise<void> connectPort(ConnectPortContext context) override;
  // Answers each id with cpuNs = its position in the call plus 1, refusing more than 1024 ids
  // as the privhelper does (ValidateSandboxUsage); counts its calls in usage_calls.
  kj::Promise<void> sandboxUsage(SandboxUsageContext context) override;

 public:
  int usage_calls = 0;

 private:
  kj::Promise<void> Held(const std::string& error);
  void End(const std::string& id, ProcessExit how);

  capnp::MallocMessageBuilder policy_;
  std::map<std::string, FakeProcess> processes_;
  // The broker's ends of kept processes, until reattach() takes them.
  std::map<std::string, std::vector<kj::AutoCloseFd>> kept_;
  std::map<std::string, ProcessExit> exits_;
  std::set<std::string> known_;  // started or kept, not released
  std::multimap<std::string, kj::Own<kj::PromiseFulfiller<void>>> waiters_;
  std::map<std::string, std::pair<std::string, bool>> stops_;  // sandbox -> reason, oom
  std::multimap<std::string, kj::Own<kj::PromiseFulfiller<void>>> stop_waiters_;
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> held_;
  std::vector<kj::Own<kj::PromiseFulfiller<void>>> held_gone_;
};

}  // namespace paseo
