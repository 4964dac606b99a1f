// See registry.h.
#include "broker/registry.h"

#include <algorithm>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/ids.h"
#include "common/status.h"

namespace paseo {

const char* StateName(SandboxState state) {
  // In the order of the enum (registry.h).
  static constexpr const char* kNames[] = {"creating", "running",    "running-unattached",
                                           "paused",   "oom-killed", "stopped",
                                           "deleting"};
  auto i = static_cast<size_t>(state);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

std::optional<helper::DeploymentPolicy::Reader> Registry::Deployment(const std::string& id) const {
  for (auto d : policy_.getDeployments()) {
    if (id == d.getId().cStr()) return d;
  }
  return std::nullopt;
}

bool Registry::MayUseDeployment(const Peer& peer, const std::string& deployment_id) const {
  auto d = Deployment(deployment_id);
  return d.has_value() && MayUse(peer, *d);
}

std::vector<std::string> Registry::DeploymentsFor(const Peer& peer) const {
  std::vector<std::string> names;
  for (auto d : policy_.getDeployments()) {
    if (MayUse(peer, d)) names.emplace_back(d.getId().cStr());
  }
  return names;
}

absl::Status Registry::RequireSomeDeployment(const Peer& peer) const {
  if (DeploymentsFor(peer).empty())
    return absl::PermissionDeniedError(
        absl::StrCat("uid ", peer.uid, " is not allowed to use any deployment"));
  return absl::OkStatus();
}

uint64_t Registry::BufferBytes(const std::string& deployment_id, const std::string& profile) const {
  auto policy = Deployment(deployment_id);
  if (!policy) return SandboxRecord().buffer_bytes;
  auto profiles = policy->getProfiles();
  auto sizes = policy->getProfileBufferBytes();
  for (unsigned i = 0; i < profiles.size() && i < sizes.size(); ++i) {
    if (profile == profiles[i].cStr()) return sizes[i];
  }
  return policy->getOutputBufferBytes();
}

absl::StatusOr<BegunCreate> Registry::BeginCreate(const Peer& peer, const CreateRequest& request,
                                                  int64_t now_ms) {
  RETURN_IF_ERROR(RequireSomeDeployment(peer));
  auto policy = Deployment(request.deployment_id);
  if (!policy || !MayUse(peer, *policy))
    return absl::PermissionDeniedError(absl::StrCat(
        "uid ", peer.uid, " may not use deployment \"", request.deployment_id, "\""));
  RETURN_IF_ERROR(CheckLabels(request.labels));
  std::vector<std::string> allowed;
  for (auto p : policy->getProfiles()) allowed.emplace_back(p.cStr());
  ASSIGN_OR_RETURN(std::string profile,
                   ChooseProfile(allowed, request.profile, request.deployment_id));
  RETURN_IF_ERROR(CheckKey("key",
                           capnp::Text::Reader(request.key.data(), request.key.size())));
  if (!request.key.empty()) {
    auto keyed = keys_.find({request.deployment_id, request.key});
    if (keyed != keys_.end()) {
      SandboxRecord* existing = Find(keyed->second);
      if (existing->owner_uid != peer.uid)
        return absl::AlreadyExistsError(
            absl::StrCat("key \"", request.key, "\" names a sandbox of uid ",
                         existing->owner_uid, " in deployment ", request.deployment_id));
      if (existing->state == SandboxState::kDeleting)
        return absl::FailedPreconditionError(absl::StrCat(
            "sandbox ", existing->id, " with key \"", request.key,
            "\" is being deleted; the key is free once it is gone"));
      return BegunCreate{existing, /*created=*/false};
    }
  }
  auto sandbox = std::make_unique<SandboxRecord>();
  sandbox->id = NewId("sb-");
  sandbox->deployment_id = request.deployment_id;
  sandbox->profile = profile;
  sandbox->owner_uid = peer.uid;
  sandbox->created_ms = now_ms;
  sandbox->buffer_bytes = BufferBytes(request.deployment_id, profile);
  for (const auto& l : request.labels) sandbox->labels.emplace_back(l.key.cStr(), l.value.cStr());
  sandbox->state = SandboxState::kCreating;
  sandbox->key = request.key;
  SandboxRecord* raw = sandbox.get();
  sandboxes_.emplace(raw->id, std::move(sandbox));
  if (!raw->key.empty()) keys_[{raw->deployment_id, raw->key}] = raw->id;
  return BegunCreate{raw, /*created=*/true};
}

void Registry::Unindex(const SandboxRecord& sb) {
  auto keyed = keys_.find({sb.deployment_id, sb.key});
  if (keyed != keys_.end() && keyed->second == sb.id) keys_.erase(keyed);
}

SandboxRecord* Registry::FinishCreate(const std::string& id) {
  SandboxRecord* sb = Find(id);
  if (sb != nullptr && sb->state == SandboxState::kCreating) sb->state = SandboxState::kRunning;
  return sb;
}

void Registry::AbortCreate(const std::string& id) {
  SandboxRecord* sb = Find(id);
  if (sb == nullptr || sb->state != SandboxState::kCreating) return;
  Unindex(*sb);
  sandboxes_.erase(id);
}

absl::StatusOr<SandboxRecord*> Registry::Visible(const Peer& peer, const std::string& id) {
  SandboxRecord* sb = Find(id);
  if (sb == nullptr || !MayUseDeployment(peer, sb->deployment_id))
    return absl::NotFoundError(absl::StrCat("no sandbox \"", id, "\""));
  return sb;
}

absl::StatusOr<SandboxRecord*> Registry::FindByKey(const Peer& peer,
                                                   const std::string& deployment_id,
                                                   const std::string& key) {
  auto keyed = keys_.find({deployment_id, key});
  SandboxRecord* sb = keyed == keys_.end() ? nullptr : Find(keyed->second);
  if (sb == nullptr || sb->state == SandboxState::kCreating ||
      !MayUseDeployment(peer, deployment_id))
    return absl::NotFoundError(
        absl::StrCat("no sandbox with key \"", key, "\" in deployment ", deployment_id));
  return sb;
}

std::vector<const SandboxRecord*> Registry::List(const Peer& peer) const {
  std::vector<const SandboxRecord*> visible;
  for (const auto& [id, sb] : sandboxes_) {
    if (sb->state != SandboxState::kCreating && MayUseDeployment(peer, sb->deployment_id))
      visible.push_back(sb.get());
  }
  return visible;
}

absl::StatusOr<SandboxState> Registry::BeginDelete(const Peer& peer, const std::string& id,
                                                   bool force) {
  ASSIGN_OR_RETURN(SandboxRecord * sb, Visible(peer, id));
  if (sb->state == SandboxState::kDeleting)
    return absl::FailedPreconditionError("already being deleted");
  if (sb->state == SandboxState::kCreating)
    return absl::FailedPreconditionError("sandbox is still being created");
  // A stopped sandbox's processes have ended, whether or not their waits have answered yet.
  bool stopped = sb->state == SandboxState::kStopped || sb->state == SandboxState::kOomKilled;
  if (!force && !stopped) {
    for (const auto& [pid, p] : sb->processes) {
      if (!p->ended())
        return absl::FailedPreconditionError(
            absl::StrCat("process ", pid, " still runs; use force to delete anyway"));
    }
  }
  SandboxState before = sb->state;
  sb->state = SandboxState::kDeleting;
  return before;
}

void Registry::FinishDelete(const std::string& id) {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return;
  for (auto& [pid, p] : it->second->processes) p->SetExit(ProcessExit::Unknown());
  Unindex(*it->second);
  sandboxes_.erase(it);
}

void Registry::Halted(const std::string& id) {
  if (SandboxRecord* sb = Find(id)) Unindex(*sb);
}

void Registry::AbortDelete(const std::string& id, SandboxState before) {
  SandboxRecord* sb = Find(id);
  if (sb == nullptr || sb->state != SandboxState::kDeleting) return;
  sb->state = before;
  if (!sb->stop_reason.empty())  // it stopped meanwhile (or before)
    sb->state = sb->oom_killed ? SandboxState::kOomKilled : SandboxState::kStopped;
}

absl::StatusOr<bool> Registry::BeginPause(const Peer& peer, const std::string& id) {
  ASSIGN_OR_RETURN(SandboxRecord * sb, Visible(peer, id));
  if (sb->state == SandboxState::kPaused) return false;
  if (sb->state == SandboxState::kRunning || sb->state == SandboxState::kUnattached) return true;
  return absl::FailedPreconditionError(
      absl::StrCat("sandbox ", id, " is ", StateName(sb->state), "; only a running one pauses"));
}

absl::StatusOr<bool> Registry::BeginResume(const Peer& peer, const std::string& id) {
  ASSIGN_OR_RETURN(SandboxRecord * sb, Visible(peer, id));
  if (sb->state == SandboxState::kPaused) return true;
  if (sb->state == SandboxState::kRunning || sb->state == SandboxState::kUnattached) return false;
  return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " is ", StateName(sb->state),
                                                    sb->stop_reason.empty() ? "" : ": ",
                                                    sb->stop_reason));
}

void Registry::FinishPause(const std::string& id) {
  SandboxRecord* sb = Find(id);
  if (sb == nullptr ||
      (sb->state != SandboxState::kRunning && sb->state != SandboxState::kUnattached))
    return;
  sb->resumes_to = sb->state;
  sb->state = SandboxState::kPaused;
}

void Registry::FinishResume(const std::string& id) {
  SandboxRecord* sb = Find(id);
  if (sb != nullptr && sb->state == SandboxState::kPaused) sb->state = sb->resumes_to;
}

absl::StatusOr<SandboxRecord*> Registry::ForNewProcess(const Peer& peer, const std::string& id) {
  ASSIGN_OR_RETURN(SandboxRecord * sb, Visible(peer, id));
  if (sb->state == SandboxState::kRunning || sb->state == SandboxState::kUnattached) return sb;
  return absl::FailedPreconditionError(absl::StrCat("sandbox ", id, " is ", StateName(sb->state),
                                                    sb->stop_reason.empty() ? "" : ": ",
                                                    sb->stop_reason));
}

absl::Status Registry::AddProcess(kj::Own<ProcessRecord> process) {
  SandboxRecord* sb = Find(process->sandbox_id);
  if (sb == nullptr) return absl::NotFoundError("sandbox was deleted");
  std::string id = process->id;
  sb->process_order.push_back(id);
  sb->processes.emplace(id, kj::mv(process));
  return absl::OkStatus();
}

absl::StatusOr<ProcessRecord*> Registry::VisibleProcess(const Peer& peer,
                                                        const std::string& sandbox_id,
                                                        const std::string& process_id) {
  ASSIGN_OR_RETURN(SandboxRecord * sb, Visible(peer, sandbox_id));
  auto it = sb->processes.find(process_id);
  if (it == sb->processes.end()) return absl::NotFoundError("no such process");
  return it->second.get();
}

absl::Status Registry::ReserveProcessKey(SandboxRecord& sb, const std::string& key,
                                         const std::string& process_id) {
  if (key.empty()) return absl::OkStatus();
  bool remembered = false;
  for (const auto& r : sb.released) remembered = remembered || r.key == key;
  if (remembered || sb.process_keys.count(key))
    return absl::AlreadyExistsError(
        absl::StrCat("sandbox ", sb.id, " already has a process with key \"", key, "\"",
                     remembered ? " (released)" : ""));
  sb.process_keys.emplace(key, process_id);
  return absl::OkStatus();
}

void Registry::UnreserveProcessKey(const std::string& sandbox_id, const std::string& key) {
  SandboxRecord* sb = Find(sandbox_id);
  if (sb != nullptr && !key.empty()) sb->process_keys.erase(key);
}

absl::StatusOr<Registry::KeyedProcess> Registry::FindProcessByKey(const Peer& peer,
                                                                  const std::string& sandbox_id,
                                                                  const std::string& key) {
  ASSIGN_OR_RETURN(SandboxRecord * sb, Visible(peer, sandbox_id));
  KeyedProcess found;
  auto it = key.empty() ? sb->process_keys.end() : sb->process_keys.find(key);
  if (it != sb->process_keys.end()) {
    auto p = sb->processes.find(it->second);
    if (p != sb->processes.end()) found.process = p->second.get();  // else: still starting
  }
  for (const auto& r : sb->released) {
    if (!key.empty() && r.key == key) found.released = &r;
  }
  if (found.process == nullptr && found.released == nullptr)
    return absl::NotFoundError(absl::StrCat("no process with key \"", key, "\""));
  return found;
}

absl::StatusOr<kj::Own<ProcessRecord>> Registry::Release(const std::string& sandbox_id,
                                                         const std::string& process_id) {
  SandboxRecord* sb = Find(sandbox_id);
  if (sb == nullptr) return absl::NotFoundError("sandbox was deleted");
  auto it = sb->processes.find(process_id);
  if (it == sb->processes.end()) return absl::NotFoundError("no such process");
  if (!it->second->ended())
    return absl::FailedPreconditionError(absl::StrCat("process ", process_id, " still runs"));
  kj::Own<ProcessRecord> p = kj::mv(it->second);
  sb->processes.erase(it);
  std::erase(sb->process_order, process_id);
  p->released = true;
  sb->released_output_bytes += p->stdout_log->end() + p->stderr_log->end();
  if (!p->key.empty()) {
    sb->process_keys.erase(p->key);
    sb->released.push_back({p->id, p->key, p->exit});
    if (sb->released.size() > ReleaseRules::kReleasedKeysKept) sb->released.pop_front();
  }
  return p;
}

namespace {

// The ended (or drained) processes of a sandbox, oldest end (drain) first.
std::vector<const ProcessRecord*> EndedInOrder(const SandboxRecord& sb, bool drained_only) {
  std::vector<const ProcessRecord*> out;
  for (const auto& id : sb.process_order) {
    const ProcessRecord& p = *sb.processes.at(id);
    if (!p.ended() || !p.ended_at) continue;  // its end is not recorded yet
    if (drained_only && !(p.drained() && p.drained_at)) continue;
    out.push_back(&p);
  }
  auto when = [drained_only](const ProcessRecord* p) {
    return drained_only ? *p->drained_at : *p->ended_at;
  };
  std::stable_sort(out.begin(), out.end(),
                   [&](const ProcessRecord* a, const ProcessRecord* b) { return when(a) < when(b); });
  return out;
}

// When a process is due by time alone.
kj::TimePoint DueAt(const ProcessRecord& p) {
  if (p.drained() && p.drained_at) return *p.drained_at + ReleaseRules::kDrainedLinger;
  return *p.ended_at + ReleaseRules::kUndrainedLinger;
}

}  // namespace

std::vector<std::string> Registry::DueForRelease(const SandboxRecord& sb, kj::TimePoint now) {
  std::vector<std::string> due;
  std::set<const ProcessRecord*> taken;
  auto take = [&](const ProcessRecord* p) {
    if (taken.insert(p).second) due.push_back(p->id);
  };
  // Counted over what is left after the earlier rules, oldest first.
  auto trim = [&](const std::vector<const ProcessRecord*>& in_order, size_t keep) {
    size_t left = 0;
    for (const auto* p : in_order) left += taken.count(p) ? 0 : 1;
    for (const auto* p : in_order) {
      if (left <= keep) break;
      if (taken.count(p)) continue;
      take(p);
      --left;
    }
  };
  auto ended = EndedInOrder(sb, /*drained_only=*/false);
  for (const auto* p : ended) {
    if (DueAt(*p) <= now) take(p);
  }
  trim(EndedInOrder(sb, /*drained_only=*/true), ReleaseRules::kDrainedKept);
  trim(ended, ReleaseRules::kEndedKept);
  return due;
}

std::optional<kj::TimePoint> Registry::NextReleaseAt(const SandboxRecord& sb) {
  std::optional<kj::TimePoint> next;
  for (const auto& [id, p] : sb.processes) {
    if (!p->ended() || !p->ended_at) continue;
    kj::TimePoint at = DueAt(*p);
    if (!next || at < *next) next = at;
  }
  return next;
}

void Registry::MarkStopped(const std::string& id, const std::string& reason, bool oom_killed) {
  SandboxRecord* sb = Find(id);
  if (sb == nullptr || sb->state == SandboxState::kCreating) return;
  if (!sb->stop_reason.empty() && (sb->oom_killed || !oom_killed)) return;
  sb->stop_reason = reason;
  sb->oom_killed = oom_killed;
  if (sb->state != SandboxState::kDeleting)
    sb->state = oom_killed ? SandboxState::kOomKilled : SandboxState::kStopped;
}

SandboxRecord& Registry::Restore(std::unique_ptr<SandboxRecord> sandbox) {
  std::string id = sandbox->id;
  auto [it, inserted] = sandboxes_.insert_or_assign(id, std::move(sandbox));
  if (!it->second->key.empty()) keys_[{it->second->deployment_id, it->second->key}] = id;
  return *it->second;
}

SandboxRecord* Registry::Find(const std::string& id) {
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second.get();
}

std::vector<SandboxRecord*> Registry::All() {
  std::vector<SandboxRecord*> all;
  for (auto& [id, sb] : sandboxes_) all.push_back(sb.get());
  return all;
}

}  // namespace paseo
