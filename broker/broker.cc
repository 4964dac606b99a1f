// See broker.h.
#include "broker/broker.h"

#include <fcntl.h>

#include <chrono>
#include <set>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "common/ids.h"
#include "common/request_checks.h"
#include "common/rpc_errors.h"
#include "common/status.h"
#include "common/tty_frames.h"

namespace paseo {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A failure from the privhelper keeps its reason token if it has a known one; anything else
// (a disconnect, a capnp internal error) becomes internal.
kj::Exception Forward(kj::Exception&& e) { return StatusToException(StatusFromException(e)); }

// The fd of a capability the privhelper passed, duplicated so that we own it.
kj::Promise<kj::AutoCloseFd> OwnFd(helper::Fd::Client cap) {
  // The received fd belongs to the capability: keep it alive until the fd is duplicated.
  auto fd_promise = cap.getFd();
  return fd_promise.then([cap = kj::mv(cap)](kj::Maybe<int> fd) -> kj::Promise<kj::AutoCloseFd> {
    KJ_IF_MAYBE(f, fd) {
      int dup = fcntl(*f, F_DUPFD_CLOEXEC, 3);
      if (dup >= 0) return kj::AutoCloseFd(dup);
      return StatusToException(ErrnoStatus("dup", "an fd the privhelper passed"));
    }
    return StatusToException(absl::InternalError("the privhelper sent no fd"));
  });
}

// The three stdio fds of a startProcess or reattach answer; all three or none (a failure drops
// the others, closing them). A missing stdin (closed before a reattach) is an invalid fd.
template <typename Response>
kj::Promise<kj::Array<kj::AutoCloseFd>> OwnStdio(Response& res) {
  kj::Vector<kj::Promise<kj::AutoCloseFd>> fds;
  fds.add(res.hasStdin() ? OwnFd(res.getStdin()) : kj::Promise<kj::AutoCloseFd>(kj::AutoCloseFd()));
  fds.add(OwnFd(res.getStdout()));
  fds.add(OwnFd(res.getStderr()));
  return kj::joinPromises(fds.releaseAsArray());
}

class LoggingErrorHandler : public kj::TaskSet::ErrorHandler {
 public:
  void taskFailed(kj::Exception&& e) override { KJ_LOG(WARNING, "broker task failed", e); }
};
LoggingErrorHandler error_handler;

// The privhelper's account of a sandbox's network; "none" if it sent nothing (an older one).
SandboxNetwork NetworkOf(api::NetworkInfo::Reader info) {
  SandboxNetwork n;
  if (info.getMode().size() > 0) n.mode = info.getMode().cStr();
  n.address = info.getAddress().cStr();
  for (uint16_t p : info.getInboundPorts()) n.inbound_ports.push_back(p);
  for (auto rule : info.getAllowNames()) {
    std::vector<uint16_t> ports;
    for (uint16_t p : rule.getPorts()) ports.push_back(p);
    n.allow_names.emplace_back(rule.getName().cStr(), std::move(ports));
  }
  return n;
}

SandboxPaths PathsOf(api::SandboxPaths::Reader info) {
  SandboxPaths p;
  for (auto t : info.getToolDirectories()) p.tool_directories.emplace_back(t.cStr());
  for (auto k : info.getKept()) p.kept.emplace_back(k.cStr());
  p.home = info.getHome().cStr();
  return p;
}

}  // namespace

Broker::Broker(kj::LowLevelAsyncIoProvider& low, kj::UnixEventPort& events, kj::Timer& timer,
               helper::Helper::Client helper, helper::BrokerPolicy::Reader policy,
               std::string state_dir)
    : low_(low),
      events_(events),
      timer_(timer),
      helper_(kj::mv(helper)),
      registry_(policy),
      state_(std::move(state_dir)),
      tasks_(error_handler),
      relays_(low) {}

template <typename T>
kj::Promise<T> Broker::ToCompletion(kj::Promise<T> work) {
  // The client may go away mid-call, cancelling it; the registry must still learn how the
  // privhelper's work ended, or the sandbox would stay `creating` or `deleting` for good.
  auto forked = work.fork();
  tasks_.add(forked.addBranch().then([](auto&&...) {}, [](kj::Exception&&) {}));
  return forked.addBranch();
}

absl::StatusOr<kj::Promise<Broker::CreatedSandbox>> Broker::CreateSandbox(
    const Peer& peer, api::SandboxSpec::Reader spec) {
  RETURN_IF_ERROR(CheckName("deploymentId", spec.getDeploymentId()));
  RETURN_IF_ERROR(CheckName("profile", spec.getProfile()));
  RETURN_IF_ERROR(CheckKey("key", spec.getKey()));
  for (auto c : spec.getCredentials()) RETURN_IF_ERROR(CheckName("credentials", c));
  CreateRequest request{spec.getDeploymentId().cStr(), spec.getProfile().cStr(), {},
                        spec.getKey().cStr()};
  for (auto l : spec.getLabels()) request.labels.push_back({l.getKey(), l.getValue()});
  ASSIGN_OR_RETURN(BegunCreate begun, registry_.BeginCreate(peer, request, NowMs()));
  SandboxRecord* sb = begun.sandbox;
  if (!begun.created) {
    // The key's sandbox: at once, or once its create has ended (failing as it failed).
    std::string id = sb->id;
    auto pending = keyed_creates_.find(id);
    kj::Promise<void> ended = kj::READY_NOW;
    if (pending != keyed_creates_.end()) ended = pending->second.addBranch().ignoreResult();
    return ended.then([id] { return CreatedSandbox{id, /*created=*/false}; });
  }
  auto req = helper_.createSandboxRequest();
  auto r = req.initRequest();
  r.setSandboxId(sb->id);
  r.setDeploymentId(sb->deployment_id);
  r.setProfile(sb->profile);
  r.setWorkspaces(spec.getWorkspaces());
  r.setCredentials(spec.getCredentials());
  // Who asks: the privhelper gives a workspace only if this client could open it itself.
  r.setPeerUid(peer.uid);
  auto gids = r.initPeerGids(static_cast<unsigned>(peer.gids.size()));
  for (unsigned i = 0; i < gids.size(); ++i) gids.set(i, peer.gids[i]);
  std::string id = sb->id;
  auto outcome = ToCompletion(req.send().then(
      [this, id](auto&& response) -> kj::Promise<std::string> {
        SandboxRecord* created = registry_.FinishCreate(id);
        if (created == nullptr) return StatusToException(absl::NotFoundError("sandbox vanished"));
        created->network = NetworkOf(response.getNetwork());
        created->paths = PathsOf(response.getPaths());
        WatchForStop(id);
        absl::Status persisted = state_.Persist(*created);
        if (!persisted.ok()) KJ_LOG(ERROR, "cannot persist a sandbox record", persisted.ToString());
        return id;
      },
      [this, id](kj::Exception&& e) -> kj::Promise<std::string> {
        registry_.AbortCreate(id);
        return Forward(kj::mv(e));
      }));
  auto created = [](std::string id) { return CreatedSandbox{std::move(id), /*created=*/true}; };
  if (sb->key.empty()) return outcome.then(created);
  auto forked = outcome.fork();
  tasks_.add(forked.addBranch().then([this, id](auto&&) { keyed_creates_.erase(id); },
                                     [this, id](kj::Exception&&) { keyed_creates_.erase(id); }));
  auto mine = forked.addBranch().then(created);
  keyed_creates_.emplace(id, kj::mv(forked));
  return mine;
}

template <typename Request>
kj::Promise<void> Broker::SendThenRecord(Request request, const std::string& id,
                                         void (Registry::*record)(const std::string&)) {
  request.setSandboxId(id);
  return ToCompletion(request.send().then(
      [this, id, record](auto&&) -> kj::Promise<void> {
        (registry_.*record)(id);
        return kj::READY_NOW;
      },
      [](kj::Exception&& e) -> kj::Promise<void> { return Forward(kj::mv(e)); }));
}

absl::StatusOr<kj::Promise<void>> Broker::PauseSandbox(const Peer& peer, const std::string& id) {
  ASSIGN_OR_RETURN(bool needed, registry_.BeginPause(peer, id));
  if (!needed) return kj::Promise<void>(kj::READY_NOW);
  return SendThenRecord(helper_.pauseSandboxRequest(), id, &Registry::FinishPause);
}

absl::StatusOr<kj::Promise<void>> Broker::ResumeSandbox(const Peer& peer, const std::string& id) {
  ASSIGN_OR_RETURN(bool needed, registry_.BeginResume(peer, id));
  if (!needed) return kj::Promise<void>(kj::READY_NOW);
  return SendThenRecord(helper_.resumeSandboxRequest(), id, &Registry::FinishResume);
}

absl::StatusOr<kj::Promise<void>> Broker::DeleteSandbox(const Peer& peer, const std::string& id,
                                                        bool force) {
  ASSIGN_OR_RETURN(SandboxRecord * sb, registry_.Visible(peer, id));
  if (sb->state == SandboxState::kDeleting) {
    // A second delete answers as the first: once nothing runs in it, at once if that is past.
    auto pending = deletes_.find(id);
    if (pending != deletes_.end()) return pending->second.addBranch();
    return kj::Promise<void>(kj::READY_NOW);
  }
  ASSIGN_OR_RETURN(SandboxState before, registry_.BeginDelete(peer, id, force));
  auto req = helper_.deleteSandboxRequest();
  req.setSandboxId(id);
  // The privhelper answers once nothing runs in it; it stays `deleting` until the privhelper's
  // background teardown has released everything (AwaitGone).
  auto answered = ToCompletion(req.send().then(
                                   [this, id](auto&&) -> kj::Promise<void> {
                                     registry_.Halted(id);
                                     relays_.EndSandbox(id);  // nothing answers in it
                                     AwaitGone(id);
                                     return kj::READY_NOW;
                                   },
                                   [this, id, before](kj::Exception&& e) -> kj::Promise<void> {
                                     return DeleteFailed(id, before, kj::mv(e));
                                   }))
                      .fork();
  tasks_.add(answered.addBranch().then([this, id] { deletes_.erase(id); },
                                       [this, id](kj::Exception&&) { deletes_.erase(id); }));
  auto mine = answered.addBranch();
  deletes_.emplace(id, kj::mv(answered));
  return mine;
}

void Broker::AwaitGone(const std::string& id) {
  auto req = helper_.awaitGoneRequest();
  req.setSandboxId(id);
  tasks_.add(req.send().then(
      [this, id](auto&&) {
        registry_.FinishDelete(id);
        state_.Remove(id);
      },
      [this, id](kj::Exception&& e) { TeardownFailed(id, e); }));
}

kj::Promise<void> Broker::DeleteFailed(const std::string& id, SandboxState before,
                                       kj::Exception&& e) {
  absl::Status why = StatusFromException(e);
  switch (why.code()) {
    case absl::StatusCode::kNotFound:
      // The privhelper holds nothing of it any more (a gc or its restart finished a teardown
      // that had failed): what the delete wanted.
      registry_.FinishDelete(id);
      state_.Remove(id);
      relays_.EndSandbox(id);
      return kj::READY_NOW;
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kPermissionDenied:
      // Refused before anything was stopped.
      registry_.AbortDelete(id, before);
      break;
    default:
      // Its teardown began and failed (the privhelper tried it several times): the sandbox
      // stays deleting there, so it is no longer the state it was in before.
      TeardownFailed(id, e);
  }
  return Forward(kj::mv(e));
}

void Broker::TeardownFailed(const std::string& id, const kj::Exception& e) {
  // Nothing new starts in it, but the privhelper still holds some of it: its owner sees that
  // and deletes it again (the privhelper then starts its teardown again).
  // A privhelper that went away (its clean stop tears every sandbox down itself; a crash
  // leaves the next one to) is not a teardown failure worth a stack trace.
  if (e.getType() == kj::Exception::Type::DISCONNECTED) {
    KJ_LOG(INFO, "the privhelper went away while a deleted sandbox was torn down", id);
  } else {
    KJ_LOG(ERROR, "a deleted sandbox's teardown failed", id, e);
  }
  registry_.MarkStopped(id,
                        absl::StrCat("its delete did not finish (", e.getDescription().cStr(),
                                     "); delete it again"),
                        false);
  registry_.AbortDelete(id, SandboxState::kStopped);
}

kj::Promise<std::string> Broker::SpawnerState(const std::string& id) {
  auto req = helper_.spawnerStateRequest();
  req.setSandboxId(id);
  return req.send()
      .then([](capnp::Response<helper::Helper::SpawnerStateResults> res) {
        return std::string(res.getState().cStr());
      })
      .catch_([](kj::Exception&&) { return std::string(); });
}

kj::Promise<Broker::UsageAnswer> Broker::Usage(const std::vector<std::string>& ids) {
  kj::Vector<kj::Promise<capnp::Response<helper::Helper::SandboxUsageResults>>> sent;
  size_t at = 0;
  do {
    size_t n = std::min(kUsagePart, ids.size() - at);
    auto req = helper_.sandboxUsageRequest();
    auto list = req.initSandboxIds(static_cast<unsigned>(n));
    for (unsigned i = 0; i < n; ++i) list.set(i, ids[at + i]);
    sent.add(req.send());
    at += n;
  } while (at < ids.size());
  return kj::joinPromises(sent.releaseAsArray())
      .then([](kj::Array<capnp::Response<helper::Helper::SandboxUsageResults>> answers) {
        UsageAnswer answer;
        for (auto& a : answers) answer.parts.push_back(kj::mv(a));
        return answer;
      });
}

absl::StatusOr<kj::Promise<kj::AutoCloseFd>> Broker::Connect(const Peer& peer,
                                                             const std::string& id,
                                                             uint16_t port) {
  // Visible to the caller and running (not paused, stopped or being deleted), as for a start.
  RETURN_IF_ERROR(registry_.ForNewProcess(peer, id).status());
  if (port == 0) return absl::InvalidArgumentError("port: must be 1..65535");
  auto req = helper_.connectPortRequest();
  req.setSandboxId(id);
  req.setPort(port);
  return req.send().then(
      [this, id](capnp::Response<helper::Helper::ConnectPortResults> res) {
        return OwnFd(res.getSocket()).then([this, id](kj::AutoCloseFd connection) {
          return ValueOrThrow(relays_.Start(id, kj::mv(connection)));
        });
      },
      [](kj::Exception&& e) -> kj::Promise<kj::AutoCloseFd> { return Forward(kj::mv(e)); });
}

absl::StatusOr<kj::Promise<kj::Own<ProcessRecord>>> Broker::StartProcess(
    const Peer& peer, const std::string& sandbox_id, api::ProcessSpec::Reader spec) {
  ASSIGN_OR_RETURN(SandboxRecord * sb, registry_.ForNewProcess(peer, sandbox_id));
  ASSIGN_OR_RETURN(ProcessCommand command,
                   CheckProcessCommand(spec.getArgv(), spec.getEnv(), spec.getCwd(),
                                       spec.getTty(), spec.getRows(), spec.getCols()));
  RETURN_IF_ERROR(CheckWorkspaceCwd(spec.getWorkspaceCwd(), spec.getCwd()).status());
  RETURN_IF_ERROR(CheckKey("key", spec.getKey()));
  if (spec.getOutput() != api::OutputMode::DROP_OLDEST &&
      spec.getOutput() != api::OutputMode::LOSSLESS)
    return absl::InvalidArgumentError("output: unknown output mode");
  auto p = kj::refcounted<ProcessRecord>();
  p->id = NewId("p-");
  p->sandbox_id = sandbox_id;
  p->key = spec.getKey().cStr();
  p->output = spec.getOutput();
  p->argv = std::move(command.argv);
  p->tty = command.tty;
  // The key is taken from here on, so a concurrent start with it is refused; a start that
  // fails frees it (and its logs) again.
  RETURN_IF_ERROR(registry_.ReserveProcessKey(*sb, p->key, p->id));
  auto unreserve = [this, sandbox_id, key = p->key, id = p->id] {
    registry_.UnreserveProcessKey(sandbox_id, key);
    state_.RemoveLogs(sandbox_id, id);
  };
  absl::Status opened = state_.OpenLogs(*p, sb->buffer_bytes);
  if (!opened.ok()) {
    unreserve();
    return opened;
  }

  auto req = helper_.startProcessRequest();
  auto r = req.initRequest();
  r.setSandboxId(sandbox_id);
  r.setProcessId(p->id);
  r.setArgv(spec.getArgv());
  r.setEnv(spec.getEnv());
  r.setCwd(spec.getCwd());
  r.setExactEnv(spec.getExactEnv());
  r.setReportUnkept(spec.getReportUnkept());
  r.setDropOldest(p->output == api::OutputMode::DROP_OLDEST);
  r.setWorkspaceCwd(spec.getWorkspaceCwd());  // resolved by the privhelper, against the workspace
  r.setTty(spec.getTty());
  r.setRows(spec.getRows());
  r.setCols(spec.getCols());
  return req.send()
      .catch_([unreserve](kj::Exception&& e) -> capnp::Response<helper::Helper::StartProcessResults> {
        unreserve();
        kj::throwFatalException(Forward(kj::mv(e)));
      })
      .then([](capnp::Response<helper::Helper::StartProcessResults> res) { return OwnStdio(res); })
      .then([this, p = kj::mv(p)](
                kj::Array<kj::AutoCloseFd> fds) mutable -> kj::Promise<kj::Own<ProcessRecord>> {
        SandboxRecord* sb = registry_.Find(p->sandbox_id);
        if (sb == nullptr) return StatusToException(absl::NotFoundError("sandbox was deleted"));
        Attach(*p, kj::mv(fds[0]), kj::mv(fds[1]), kj::mv(fds[2]));
        absl::Status added = registry_.AddProcess(kj::addRef(*p));
        if (!added.ok()) return StatusToException(added);
        WatchForRelease(*p);
        absl::Status persisted = state_.Persist(*sb);
        if (!persisted.ok()) KJ_LOG(ERROR, "cannot persist a sandbox record", persisted.ToString());
        return kj::mv(p);
      });
}

absl::StatusOr<kj::Promise<void>> Broker::WriteInput(ProcessRecord& p,
                                                     kj::ArrayPtr<const capnp::byte> data) {
  if (p.input_closed) return absl::FailedPreconditionError("input is closed");
  if (data.size() == 0) return kj::Promise<void>(kj::READY_NOW);
  std::string_view bytes(reinterpret_cast<const char*>(data.begin()), data.size());
  std::vector<std::string> chunks;
  if (p.tty) chunks = tty::EncodeData(bytes);  // the relay reads frames (tty_frames.h)
  else chunks.emplace_back(bytes);
  return p.input->Write(std::move(chunks), p.ended() ? "the process has ended" : "input is closed");
}

absl::StatusOr<kj::Promise<void>> Broker::CloseInput(ProcessRecord& p) {
  if (p.tty) {
    // The terminal stays open (resize still works); the relay types the EOF character.
    if (p.input_closed || !p.input->open()) return kj::Promise<void>(kj::READY_NOW);
    p.input_closed = true;
    return p.input->Write({tty::EncodeEof()}, "input is closed");
  }
  if (!p.input->open()) return kj::Promise<void>(kj::READY_NOW);  // closed already, or ended
  auto req = helper_.closeInputRequest();
  req.setSandboxId(p.sandbox_id);
  req.setProcessId(p.id);
  // Both copies must close for the process to see end-of-file: ours, then the privhelper's.
  return p.input->Close().then([req = kj::mv(req)]() mutable { return req.send().ignoreResult(); });
}

absl::StatusOr<kj::Promise<void>> Broker::Resize(ProcessRecord& p, uint16_t rows, uint16_t cols) {
  if (!p.tty) return absl::FailedPreconditionError("not a tty process");
  RETURN_IF_ERROR(CheckTerminalSize(rows, cols));
  return p.input->Write({tty::EncodeWinsize(rows, cols)},
                        p.ended() ? "the process has ended" : "input is closed");
}

absl::StatusOr<kj::Promise<void>> Broker::Signal(ProcessRecord& p, int sig) {
  RETURN_IF_ERROR(CheckSignal(sig));
  auto req = helper_.signalProcessRequest();
  req.setSandboxId(p.sandbox_id);
  req.setProcessId(p.id);
  req.setSignal(sig);
  return req.send().ignoreResult().catch_(
      [](kj::Exception&& e) -> kj::Promise<void> { return Forward(kj::mv(e)); });
}

absl::StatusOr<kj::Promise<void>> Broker::Release(ProcessRecord& p) {
  ASSIGN_OR_RETURN(kj::Own<ProcessRecord> released, registry_.Release(p.sandbox_id, p.id));
  if (SandboxRecord* sb = registry_.Find(p.sandbox_id)) {
    absl::Status persisted = state_.Persist(*sb);
    if (!persisted.ok()) KJ_LOG(ERROR, "cannot persist a sandbox record", persisted.ToString());
  }
  return FreeReleased(kj::mv(released));
}

kj::Promise<void> Broker::FreeReleased(kj::Own<ProcessRecord> p) {
  // A lossless pump may still wait for a reader that will never come: its pipe goes now.
  p->pumps = kj::READY_NOW;
  p->on_drained = nullptr;
  state_.RemoveLogs(p->sandbox_id, p->id);
  auto req = helper_.releaseProcessRequest();
  req.setSandboxId(p->sandbox_id);
  req.setProcessId(p->id);
  // Released here whatever the privhelper answers: a privhelper that restarted no longer has
  // it (not-found), and one that failed to is asked again by the next broker's Restore.
  // The record lives until the privhelper answers, never going away synchronously: this may
  // run inside one of its own tasks (an end call that made it drained).
  std::string id = p->id;
  return ToCompletion(req.send()
                          .ignoreResult()
                          .catch_([id](kj::Exception&& e) {
                            if (StatusFromException(e).code() != absl::StatusCode::kNotFound)
                              KJ_LOG(WARNING, "the privhelper did not release a process", id, e);
                          })
                          .attach(kj::mv(p)));
}

void Broker::WatchForRelease(ProcessRecord& p) {
  ProcessRecord* raw = &p;  // on_drained is the record's own: it never outlives it
  p.on_drained = [this, raw] {
    raw->drained_at = timer_.now();
    ReleaseDue(raw->sandbox_id);
  };
  tasks_.add(p.WhenEnded().then([this, p = kj::addRef(p)]() mutable {
    if (p->released) return;
    p->ended_at = timer_.now();
    ReleaseDue(p->sandbox_id);
  }));
}

void Broker::ReleaseDue(const std::string& sandbox_id) {
  SandboxRecord* sb = registry_.Find(sandbox_id);
  if (sb == nullptr || sb->state == SandboxState::kDeleting) return;
  auto due = Registry::DueForRelease(*sb, timer_.now());
  for (const auto& id : due) {
    auto released = registry_.Release(sandbox_id, id);
    if (released.ok()) tasks_.add(FreeReleased(kj::mv(*released)));
  }
  if (!due.empty()) {
    absl::Status persisted = state_.Persist(*sb);
    if (!persisted.ok()) KJ_LOG(ERROR, "cannot persist a sandbox record", persisted.ToString());
  }
  ArmReleaseTimer();
}

void Broker::ArmReleaseTimer() {
  std::optional<kj::TimePoint> next;
  for (SandboxRecord* sb : registry_.All()) {
    auto at = Registry::NextReleaseAt(*sb);
    if (at && (!next || *at < *next)) next = at;
  }
  if (!next || (release_at_ && *release_at_ <= *next)) return;
  release_at_ = next;
  // Only the latest armed timer acts; one superseded by an earlier time just ends when it
  // fires (deadlines are at most an hour away, so those are few and short-lived).
  uint64_t generation = ++release_generation_;
  tasks_.add(timer_.atTime(*next).then([this, generation] {
    if (generation != release_generation_) return;
    release_at_ = std::nullopt;
    std::vector<std::string> ids;
    for (SandboxRecord* sb : registry_.All()) ids.push_back(sb->id);
    for (const auto& id : ids) ReleaseDue(id);
    ArmReleaseTimer();
  }));
}

void Broker::Attach(ProcessRecord& p, kj::AutoCloseFd in, kj::AutoCloseFd out,
                    kj::AutoCloseFd err) {
  if (in.get() >= 0)
    p.input->Attach(low_.wrapOutputFd(in.release(), kj::LowLevelAsyncIoProvider::TAKE_OWNERSHIP));
  auto wait_req = helper_.waitProcessRequest();
  wait_req.setSandboxId(p.sandbox_id);
  wait_req.setProcessId(p.id);
  auto exited = wait_req.send().then(
      [this, sandbox_id = p.sandbox_id](capnp::Response<helper::Helper::WaitProcessResults> res) {
        ProcessExit how = FromCapnp(res.getStatus());
        // The host's OOM killer took the whole sandbox: say so until it is deleted.
        if (how.kind == ProcessExit::kOomKilled)
          registry_.MarkStopped(sandbox_id, kOomKilledSandboxReason, /*oom_killed=*/true);
        return how.ended() ? how : ProcessExit::Unknown();
      });
  StartPumps(events_, p, kj::mv(out), kj::mv(err), kj::mv(exited));
}

void Broker::WatchForStop(const std::string& sandbox_id) {
  auto req = helper_.waitSandboxRequest();
  req.setSandboxId(sandbox_id);
  tasks_.add(req.send().then(
      [this, sandbox_id](capnp::Response<helper::Helper::WaitSandboxResults> res) {
        registry_.MarkStopped(sandbox_id, res.getReason().cStr(), res.getOomKilled());
      },
      // Deleted (not-found), or the privhelper went away with this broker: nothing to record.
      [](kj::Exception&&) {}));
}

void Broker::Restore(helper::Helper::InventoryResults::Reader inventory, kj::WaitScope& wait) {
  std::map<std::string, std::map<std::string, StateDir::SavedProcess>> saved;
  std::map<std::string, std::string> lost_reasons;  // sandbox id -> AdoptedSandbox.lostReason
  std::set<std::string> gapped;  // sandboxes whose record must be written again
  std::set<std::string> live;
  for (auto known : inventory.getSandboxes()) {
    auto sandbox = std::make_unique<SandboxRecord>();
    sandbox->id = known.getSandboxId().cStr();
    sandbox->deployment_id = known.getDeploymentId().cStr();
    sandbox->profile = known.getProfile().cStr();
    sandbox->created_ms = known.getCreatedAtUnixMs();
    sandbox->state = known.getOomKilled()    ? SandboxState::kOomKilled
                     : known.getStopped()    ? SandboxState::kStopped
                     : known.getUnattached() ? SandboxState::kUnattached
                                             : SandboxState::kRunning;
    if (known.getPaused() && !known.getStopped() && !known.getOomKilled()) {
      sandbox->resumes_to = sandbox->state;
      sandbox->state = SandboxState::kPaused;
    }
    if (known.getStopped() || known.getOomKilled()) {
      sandbox->oom_killed = known.getOomKilled();
      sandbox->stop_reason = known.getStopReason().size() > 0 ? known.getStopReason().cStr()
                             : known.getOomKilled()           ? kOomKilledSandboxReason
                                                              : "it stopped";
    }
    sandbox->buffer_bytes = registry_.BufferBytes(sandbox->deployment_id, sandbox->profile);
    sandbox->network = NetworkOf(known.getNetwork());
    sandbox->paths = PathsOf(known.getPaths());
    // What only the broker knew survives its crash.
    auto processes = state_.Load(*sandbox);
    if (processes.ok()) saved[sandbox->id] = std::move(*processes);
    live.insert(sandbox->id);
    if (known.getLostReason().size() > 0) lost_reasons[sandbox->id] = known.getLostReason().cStr();
    bool stopped = !sandbox->stop_reason.empty();
    registry_.Restore(std::move(sandbox));
    if (!stopped) WatchForStop(known.getSandboxId().cStr());
  }
  for (auto kept : inventory.getProcesses()) {
    SandboxRecord* sb = registry_.Find(kept.getSandboxId().cStr());
    if (sb == nullptr || !IsValidId(kept.getProcessId().cStr())) continue;
    std::string id = kept.getProcessId().cStr();
    bool was_released = false;
    for (const auto& r : sb->released) was_released = was_released || r.id == id;
    if (was_released) {
      // Its predecessor released it but died before the privhelper did: finish that.
      auto p = kj::refcounted<ProcessRecord>();
      p->id = id;
      p->sandbox_id = sb->id;
      tasks_.add(FreeReleased(kj::mv(p)));
      continue;
    }
    auto p = kj::refcounted<ProcessRecord>();
    p->id = id;
    p->sandbox_id = sb->id;
    const StateDir::SavedProcess& what = saved[sb->id][p->id];
    p->argv = what.argv;
    p->key = what.key;
    p->output = what.output;
    p->tty = kept.getTty();
    if (!p->key.empty()) sb->process_keys[p->key] = p->id;
    auto error = kj::runCatchingExceptions([&] {
      ThrowIfError(state_.OpenLogs(*p, sb->buffer_bytes));
      p->stdout_log->SetGaps(what.stdout_gaps);
      p->stderr_log->SetGaps(what.stderr_gaps);
      // The privhelper continues each stream where its log ends (a restarted privhelper, through
      // the sandbox's spawner, which keeps what the log may not have yet); it may start later,
      // when the spawner no longer had those bytes: a gap, recorded before anything arrives.
      auto req = helper_.reattachRequest();
      req.setSandboxId(sb->id);
      req.setProcessId(p->id);
      req.setStdoutOffset(p->stdout_log->end());
      req.setStderrOffset(p->stderr_log->end());
      auto res = req.send().wait(wait);
      for (auto [log, start] : {std::pair{p->stdout_log.get(), res.getStdoutStart()},
                                {p->stderr_log.get(), res.getStderrStart()}}) {
        if (start == log->end()) continue;
        if (start > log->end()) {
          KJ_LOG(WARNING, "a process's output lost bytes in a restart", p->id, log->end(), start);
          ThrowIfError(log->SkipTo(start));
          gapped.insert(sb->id);
        } else {
          KJ_LOG(ERROR, "a process's output continues before its log's end", p->id, start, log->end());
        }
      }
      auto fds = OwnStdio(res).wait(wait);
      Attach(*p, kj::mv(fds[0]), kj::mv(fds[1]), kj::mv(fds[2]));
      WatchForRelease(*p);
      ThrowIfError(registry_.AddProcess(kj::mv(p)));
    });
    KJ_IF_MAYBE(e, error) {
      KJ_LOG(ERROR, "cannot reattach a process", kept.getProcessId(), *e);
      if (sb->processes.count(id)) continue;
      // Ended, with why, as a process the privhelper could not keep is: never left out of the
      // inventory, where no wait on it ends (the loop below would end it anyway, with a reason
      // that is not this one). Its spawner went down (it did not answer the resume), the
      // privhelper no longer has it, or fds ran out: then it may run on, unseen.
      StateDir::SavedProcess lost = what;
      if (p.get() != nullptr && p->stdout_log.get() != nullptr)
        lost.stdout_gaps = p->stdout_log->gaps();  // with a gap SkipTo just recorded
      if (p.get() != nullptr && p->stderr_log.get() != nullptr)
        lost.stderr_gaps = p->stderr_log->gaps();
      p = nullptr;
      auto key = sb->process_keys.find(what.key);
      if (key != sb->process_keys.end() && key->second == id) sb->process_keys.erase(key);
      RestoreLost(*sb, id, lost,
                  absl::StrCat("it could not be reattached: ", ClientFacingDescription(*e)));
      gapped.insert(sb->id);
    }
  }
  // What a restarted privhelper could not keep: ended, with why, and their output as it was.
  for (const auto& [sandbox_id, reason] : lost_reasons) {
    SandboxRecord* sb = registry_.Find(sandbox_id);
    if (sb == nullptr) continue;
    for (const auto& [id, what] : saved[sandbox_id]) {
      if (sb->processes.count(id) || !IsValidId(id)) continue;
      RestoreLost(*sb, id, what, reason);
      gapped.insert(sandbox_id);
    }
  }
  for (const std::string& id : gapped) {
    if (SandboxRecord* sb = registry_.Find(id)) {
      absl::Status persisted = state_.Persist(*sb);
      if (!persisted.ok()) KJ_LOG(ERROR, "cannot persist a sandbox record", persisted.ToString());
    }
  }
  // Logs of sandboxes deleted while no broker ran.
  state_.RemoveAllBut(live);
}

void Broker::RestoreLost(SandboxRecord& sb, const std::string& id,
                         const StateDir::SavedProcess& what, const std::string& reason) {
  auto p = kj::refcounted<ProcessRecord>();
  p->id = id;
  p->sandbox_id = sb.id;
  p->argv = what.argv;
  p->key = what.key;
  p->output = what.output;
  auto error = kj::runCatchingExceptions([&] {
    ThrowIfError(state_.OpenLogs(*p, sb.buffer_bytes));
    p->stdout_log->SetGaps(what.stdout_gaps);
    p->stderr_log->SetGaps(what.stderr_gaps);
    // Said on its error stream, after what it wrote there.
    std::string notice = absl::StrCat(
        "paseo-sandbox: this process did not survive the supervisor's restart (", reason, ")\n");
    ThrowIfError(p->stderr_log->Append(notice.data(), notice.size()));
    p->stdout_log->Close();
    p->stderr_log->Close();
    p->input->Drop();
    p->input_closed = true;
    p->SetExit(ProcessExit::Unknown());
    if (!p->key.empty()) sb.process_keys[p->key] = p->id;
    WatchForRelease(*p);
    ThrowIfError(registry_.AddProcess(kj::mv(p)));
  });
  KJ_IF_MAYBE(e, error) {
    KJ_LOG(ERROR, "cannot restore a process lost in a restart", id, *e);
    // Not listed: its key must not point at it (a start with the key would wait for it).
    auto key = sb.process_keys.find(what.key);
    if (key != sb.process_keys.end() && key->second == id && !sb.processes.count(id))
      sb.process_keys.erase(key);
  }
}

}  // namespace paseo
