// See fake_helper.h.
#include "broker/fake_helper.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <kj/debug.h>

#include "privhelper/fd_cap.h"

namespace paseo {
namespace {

std::pair<kj::AutoCloseFd, kj::AutoCloseFd> Pipe() {
  int fds[2];
  KJ_SYSCALL(pipe2(fds, O_CLOEXEC));
  return {kj::AutoCloseFd(fds[0]), kj::AutoCloseFd(fds[1])};
}

using Waiters = std::multimap<std::string, kj::Own<kj::PromiseFulfiller<void>>>;

// Resolves at once if `known`, else when Wake(waiters, id) is called.
kj::Promise<void> WhenKnown(bool known, Waiters& waiters, const std::string& id) {
  if (known) return kj::READY_NOW;
  auto paf = kj::newPromiseAndFulfiller<void>();
  waiters.emplace(id, kj::mv(paf.fulfiller));
  return kj::mv(paf.promise);
}

void Wake(Waiters& waiters, const std::string& id) {
  auto range = waiters.equal_range(id);
  for (auto it = range.first; it != range.second; ++it) it->second->fulfill();
  waiters.erase(range.first, range.second);
}

kj::Exception Error(const std::string& text) {
  return kj::Exception(kj::Exception::Type::FAILED, __FILE__, __LINE__,
                       kj::heapString(text.data(), text.size()));
}

}  // namespace

FakeHelper::FakeHelper() {
  auto deployments = policy_.initRoot<helper::BrokerPolicy>().initDeployments(2);
  auto work = deployments[0];
  work.setId("work");
  work.initAllowedUids(1).set(0, 1000);
  auto profiles = work.initProfiles(2);
  profiles.set(0, "default");
  profiles.set(1, "big");
  work.setOutputBufferBytes(1 << 20);
  auto sizes = work.initProfileBufferBytes(2);
  sizes.set(0, 1 << 20);
  sizes.set(1, 4 << 20);
  auto other = deployments[1];
  other.setId("other");
  other.initAllowedUids(1).set(0, 2000);
  other.initProfiles(1).set(0, "default");
  other.setOutputBufferBytes(1 << 20);
  other.initProfileBufferBytes(1).set(0, 1 << 20);
}

void FakeHelper::Release() {
  hold = false;
  auto held = kj::mv(held_);
  held_.clear();
  for (auto& f : held) f->fulfill();
}

kj::Promise<void> FakeHelper::Held(const std::string& error) {
  kj::Promise<void> wait = kj::READY_NOW;
  if (hold) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    held_.push_back(kj::mv(paf.fulfiller));
    wait = kj::mv(paf.promise);
  }
  return wait.then([error]() -> kj::Promise<void> {
    if (!error.empty()) return Error(error);
    return kj::READY_NOW;
  });
}

void FakeHelper::End(const std::string& id, ProcessExit how) {
  exits_[id] = how;
  Wake(waiters_, id);
  processes_.erase(id);  // the process's side of its pipes closes: the broker sees EOF
}

void FakeHelper::Exit(const std::string& id, int exit_code) { End(id, ProcessExit::Exited(exit_code)); }
void FakeHelper::Kill(const std::string& id, int signal) { End(id, ProcessExit::Signaled(signal)); }
void FakeHelper::OomKill(const std::string& id) { End(id, ProcessExit::OomKilled()); }
void FakeHelper::EndUnknown(const std::string& id) { End(id, ProcessExit::Unknown()); }

FakeHelper::FakeProcess& FakeHelper::AddKeptProcess(const std::string& sandbox_id,
                                                    const std::string& process_id) {
  auto [in_r, in_w] = Pipe();
  auto [out_r, out_w] = Pipe();
  auto [err_r, err_w] = Pipe();
  auto& kept = kept_[process_id];
  kept.push_back(kj::mv(in_w));
  kept.push_back(kj::mv(out_r));
  kept.push_back(kj::mv(err_r));
  inventory_processes.emplace_back(sandbox_id, process_id);
  known_.insert(process_id);
  FakeProcess& p = processes_[process_id];
  p.sandbox_id = sandbox_id;
  p.stdin_r = kj::mv(in_r);
  p.stdout_w = kj::mv(out_w);
  p.stderr_w = kj::mv(err_w);
  return p;
}

kj::Promise<void> FakeHelper::policy(PolicyContext context) {
  context.getResults().setPolicy(policy());
  return kj::READY_NOW;
}

kj::Promise<void> FakeHelper::createSandbox(CreateSandboxContext context) {
  auto r = context.getParams().getRequest();
  calls.push_back(std::string("create ") + r.getSandboxId().cStr() + " " +
                  r.getDeploymentId().cStr() + " " + r.getProfile().cStr());
  std::string peer = std::to_string(r.getPeerUid()) + ":";
  for (uint32_t g : r.getPeerGids()) peer += (peer.back() == ':' ? "" : ",") + std::to_string(g);
  create_peers.push_back(peer);
  auto network = context.getResults().initNetwork();
  network.setMode(create_network_address.empty() ? "none" : "sandbox");
  network.setAddress(create_network_address);
  if (!create_network_address.empty()) network.initInboundPorts(1).set(0, 4096);
  return Held(create_error);
}

kj::Promise<void> FakeHelper::deleteSandbox(DeleteSandboxContext context) {
  std::string id = context.getParams().getSandboxId().cStr();
  calls.push_back("delete " + id);
  return Held(delete_error).then([this, id] {
    auto range = stop_waiters_.equal_range(id);
    for (auto it = range.first; it != range.second; ++it)
      it->second->reject(Error("not-found: sandbox " + id + " was deleted"));
    stop_waiters_.erase(range.first, range.second);
  });
}

kj::Promise<void> FakeHelper::awaitGone(AwaitGoneContext context) {
  calls.push_back(std::string("awaitGone ") + context.getParams().getSandboxId().cStr());
  kj::Promise<void> wait = kj::READY_NOW;
  if (hold_gone) {
    auto paf = kj::newPromiseAndFulfiller<void>();
    held_gone_.push_back(kj::mv(paf.fulfiller));
    wait = kj::mv(paf.promise);
  }
  return wait.then([this]() -> kj::Promise<void> {
    if (!gone_error.empty()) return Error(gone_error);
    return kj::READY_NOW;
  });
}

void FakeHelper::ReleaseGone() {
  hold_gone = false;
  auto held = kj::mv(held_gone_);
  held_gone_.clear();
  for (auto& f : held) f->fulfill();
}

void FakeHelper::StopSandbox(const std::string& sandbox_id, const std::string& reason,
                             bool oom_killed) {
  stops_[sandbox_id] = {reason, oom_killed};
  Wake(stop_waiters_, sandbox_id);
}

kj::Promise<void> FakeHelper::waitSandbox(WaitSandboxContext context) {
  std::string id = context.getParams().getSandboxId().cStr();
  sandbox_waits.push_back(id);
  return WhenKnown(stops_.count(id) > 0, stop_waiters_, id).then([this, id, context]() mutable {
    auto results = context.getResults();
    results.setReason(stops_.at(id).first);
    results.setOomKilled(stops_.at(id).second);
  });
}

kj::Promise<void> FakeHelper::startProcess(StartProcessContext context) {
  auto r = context.getParams().getRequest();
  std::string id = r.getProcessId().cStr();
  calls.push_back(std::string("start ") + r.getSandboxId().cStr() + " " + id);
  auto& kept = kept_[id];
  FakeProcess& p = AddKeptProcess(r.getSandboxId().cStr(), id);
  inventory_processes.pop_back();  // a started process is not in the inventory unless asked
  auto results = context.getResults();
  results.setStdin(kj::heap<FdCap>(kj::mv(kept[0])));
  results.setStdout(kj::heap<FdCap>(kj::mv(kept[1])));
  results.setStderr(kj::heap<FdCap>(kj::mv(kept[2])));
  kept_.erase(id);
  (void)p;
  return kj::READY_NOW;
}

kj::Promise<void> FakeHelper::waitProcess(WaitProcessContext context) {
  std::string id = context.getParams().getProcessId().cStr();
  calls.push_back("wait " + id);
  return WhenKnown(exits_.count(id) > 0, waiters_, id).then([this, id, context]() mutable {
    ToCapnp(exits_.at(id), context.getResults().initStatus());
  });
}

kj::Promise<void> FakeHelper::signalProcess(SignalProcessContext context) {
  auto params = context.getParams();
  calls.push_back(std::string("signal ") + params.getProcessId().cStr() + " " +
                  std::to_string(params.getSignal()));
  return kj::READY_NOW;
}

kj::Promise<void> FakeHelper::inventory(InventoryContext context) {
  auto results = context.getResults();
  auto sandboxes = results.initSandboxes(static_cast<unsigned>(inventory_sandboxes.size()));
  for (unsigned i = 0; i < sandboxes.size(); ++i) {
    const Known& k = inventory_sandboxes[i];
    sandboxes[i].setSandboxId(k.sandbox_id);
    sandboxes[i].setDeploymentId(k.deployment_id);
    sandboxes[i].setProfile(k.profile);
    sandboxes[i].setUnattached(k.unattached);
    sandboxes[i].setLostReason(k.lost_reason);
    sandboxes[i].setOomKilled(k.oom_killed);
    sandboxes[i].setStopped(k.stopped);
    sandboxes[i].setPaused(k.paused);
    sandboxes[i].setStopReason(k.stop_reason);
  }
  auto processes = results.initProcesses(static_cast<unsigned>(inventory_processes.size()));
  for (unsigned i = 0; i < processes.size(); ++i) {
    processes[i].setSandboxId(inventory_processes[i].first);
    processes[i].setProcessId(inventory_processes[i].second);
  }
  return kj::READY_NOW;
}

kj::Promise<void> FakeHelper::reattach(ReattachContext context) {
  std::string id = context.getParams().getProcessId().cStr();
  calls.push_back("reattach " + id);
  auto it = kept_.find(id);
  if (it == kept_.end()) return Error("not-found: no process " + id);
  auto results = context.getResults();
  results.setStdin(kj::heap<FdCap>(kj::mv(it->second[0])));
  results.setStdout(kj::heap<FdCap>(kj::mv(it->second[1])));
  results.setStderr(kj::heap<FdCap>(kj::mv(it->second[2])));
  kept_.erase(it);
  auto params = context.getParams();
  reattach_asked[id] = {params.getStdoutOffset(), params.getStderrOffset()};
  auto starts = reattach_starts.find(id);
  results.setStdoutStart(starts != reattach_starts.end() ? starts->second.first : params.getStdoutOffset());
  results.setStderrStart(starts != reattach_starts.end() ? starts->second.second : params.getStderrOffset());
  return kj::READY_NOW;
}

kj::Promise<void> FakeHelper::pauseSandbox(PauseSandboxContext context) {
  calls.push_back(std::string("pause ") + context.getParams().getSandboxId().cStr());
  return Held(pause_error);
}

kj::Promise<void> FakeHelper::resumeSandbox(ResumeSandboxContext context) {
  calls.push_back(std::string("resume ") + context.getParams().getSandboxId().cStr());
  return Held(pause_error);
}

kj::Promise<void> FakeHelper::connectPort(ConnectPortContext context) {
  auto params = context.getParams();
  calls.push_back(std::string("connect ") + params.getSandboxId().cStr() + " " +
                  std::to_string(params.getPort()));
  if (!connect_error.empty()) return Error(connect_error);
  int sv[2];
  KJ_SYSCALL(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
  connected.emplace_back(sv[1]);
  context.getResults().setSocket(kj::heap<FdCap>(kj::AutoCloseFd(sv[0])));
  return kj::READY_NOW;
}

kj::Promise<void> FakeHelper::closeInput(CloseInputContext context) {
  std::string id = context.getParams().getProcessId().cStr();
  calls.push_back("closeInput " + id);
  if (has_process(id)) processes_.at(id).input_closed = true;
  return kj::READY_NOW;
}

kj::Promise<void> FakeHelper::releaseProcess(ReleaseProcessContext context) {
  std::string id = context.getParams().getProcessId().cStr();
  calls.push_back("release " + id);
  if (known_.count(id) == 0) return Error("not-found: no process " + id);
  // The privhelper refuses a process it has not seen end.
  if (exits_.count(id) == 0) return Error("failed-precondition: process " + id + " still runs");
  known_.erase(id);
  return kj::READY_NOW;
}

kj::Promise<void> FakeHelper::sandboxUsage(SandboxUsageContext context) {
  ++usage_calls;
  auto ids = context.getParams().getSandboxIds();
  KJ_REQUIRE(ids.size() <= 1024, "sandboxIds: at most 1024 ids");
  auto list = context.getResults().initSandboxes(ids.size());
  for (unsigned i = 0; i < ids.size(); ++i) {
    list[i].setSandboxId(ids[i]);
    list[i].setMeasured(true);
    list[i].setCpuNs(i + 1);
  }
  context.getResults().initService().setHostTasks(7);
  return kj::READY_NOW;
}

}  // namespace paseo
