// See sandbox_host.h. This file: delete, the background teardown and a service shutdown.
#include "privhelper/sandbox_host.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include <capnp/compat/json.h>
#include <capnp/message.h>
#include <kj/debug.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/dir_entries.h"
#include "common/ids.h"
#include "common/rpc_errors.h"
#include "common/search_path.h"
#include "common/status.h"
#include "privhelper/bundle.h"
#include "privhelper/exit_status.h"
#include "privhelper/rootfs_overlay.h"
#include "privhelper/sandbox_identity.h"
#include "privhelper/workspace_resolver.h"
#include "schema/records.capnp.h"

#include "privhelper/sandbox_host_internal.h"

namespace paseo {

using namespace host_internal;  // NOLINT: this file is one of SandboxHost's

absl::Status SandboxHost::CheckCapacity(const config::Deployment::Reader& deployment) const {
  std::string id = deployment.getId().cStr();
  size_t max = deployment.getMaxSandboxes();
  size_t live = 0, deleting = 0;
  for (const auto& [sid, sb] : sandboxes_) {
    if (sb->deployment != id) continue;
    ++(sb->deleting ? deleting : live);
  }
  // Up to maxSandboxes being deleted are free: they run nothing and are gone within a
  // teardown's time, so `run` in a loop at the limit is not refused for that time. Beyond
  // that each counts, since each still holds a /30 of the pool, a namespace, mounts and a
  // cgroup: a deployment holds at most twice its maxSandboxes (decision 39).
  size_t counted = live + (deleting > max ? deleting - max : 0);
  if (counted < max) return absl::OkStatus();
  if (deleting <= max)
    return absl::ResourceExhaustedError(
        absl::StrCat("deployment ", id, " has ", live, " sandboxes (its maxSandboxes)"));
  return absl::ResourceExhaustedError(absl::StrCat(
      "deployment ", id, " has ", live, " sandboxes and ", deleting,
      " still being deleted, more than its maxSandboxes (", max,
      ") of which count against it until their teardown ends; retry later"));
}

absl::StatusOr<kj::Promise<void>> SandboxHost::Delete(const ValidatedDelete& request) {
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(request.sandbox_id, Need::kAny));
  if (!sb->teardown_failed) {
    KJ_IF_MAYBE(answered, sb->answered) { return answered->addBranch(); }  // idempotent
    if (sb->deleting) return absl::FailedPreconditionError("sandbox is already being deleted");
    if (!sb->running) return absl::FailedPreconditionError("sandbox is still being created");
  }
  return StartTeardown(*sb);
}

kj::Promise<void> SandboxHost::StartTeardown(Sandbox& sb) {
  std::string id = sb.id;
  uint64_t generation = sb.generation;
  auto gone = Destroy(id, generation)
                  .catch_([id](kj::Exception&& e) -> kj::Promise<void> {
                    KJ_LOG(ERROR, "deleting a sandbox failed; the next delete or gc tries again",
                           id, e);
                    return kj::mv(e);
                  })
                  .fork();
  // The teardown runs to its end whoever waits for it.
  reaper_.add(gone.addBranch());
  // Answered when nothing runs any more, or when the teardown has ended (or failed) first.
  kj::Promise<void> answer = gone.addBranch();
  if (sb.halt_watched) answer = sb.halted.addBranch().exclusiveJoin(kj::mv(answer));
  sb.gone = kj::mv(gone);
  auto answered = answer.fork();
  kj::Promise<void> mine = answered.addBranch();
  sb.answered = kj::mv(answered);
  return mine;
}

void SandboxHost::RetryFailedTeardowns() {
  std::vector<Sandbox*> failed;
  for (auto& [id, sb] : sandboxes_)
    if (sb->teardown_failed) failed.push_back(sb.get());
  for (Sandbox* sb : failed) {
    KJ_LOG(WARNING, "trying a failed teardown again", sb->id);
    StartTeardown(*sb);  // nobody waits for its answer: the reaper runs it to its end
  }
}

absl::StatusOr<kj::Promise<void>> SandboxHost::AwaitGone(const ValidatedSandboxRef& request) {
  Sandbox* sb = Find(request.sandbox_id);
  if (sb == nullptr) return kj::Promise<void>(kj::READY_NOW);
  KJ_IF_MAYBE(gone, sb->gone) { return gone->addBranch(); }
  return absl::FailedPreconditionError(
      absl::StrCat("sandbox ", request.sandbox_id, " is not being deleted"));
}

absl::Status SandboxHost::MarkDeleting(const Sandbox& sb) {
  std::string path = sb.bundle_dir + "/sandbox.json";
  capnp::MallocMessageBuilder message;
  auto read = ReadRecord(path, message);
  // Without a record there is nothing to mark: a restart destroys what it cannot vouch for.
  if (absl::IsNotFound(read.status())) return absl::OkStatus();
  ASSIGN_OR_RETURN(auto record, std::move(read));
  if (record.getDeleting()) return absl::OkStatus();
  std::string text = RenderRecord(sb.id, sb.deployment, sb.profile, sb.uid, sb.gid,
                                  sb.default_cwd, sb.home, sb.created_ms,
                                  record.getNetworkBlock().cStr(), sb.kept, /*deleting=*/true);
  // Replaced whole (rename), so a crash leaves the old record or the new one, never half.
  std::string tmp = path + ".tmp";
  unlink(tmp.c_str());
  RETURN_IF_ERROR(WriteNewFile(tmp, text));
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    unlink(tmp.c_str());
    return ErrnoStatus("rename", tmp);
  }
  return absl::OkStatus();
}

void SandboxHost::MarkHalted(Sandbox& sb) {
  if (sb.halt_fulfiller.get() != nullptr && sb.halt_fulfiller->isWaiting())
    sb.halt_fulfiller->fulfill();
}

kj::Promise<void> SandboxHost::Destroy(const std::string& id, uint64_t generation) {
  Sandbox* sb = Find(id, generation);
  if (sb == nullptr) return kj::READY_NOW;
  // Before anything is stopped: a privhelper killed from here on finds the marker at its next
  // start and finishes the teardown, whatever its restart policy. It is never taken back (a
  // failed teardown stays deleting), so the record on disk and the one here always agree.
  absl::Status marked = MarkDeleting(*sb);
  if (!marked.ok()) KJ_LOG(ERROR, "cannot mark a sandbox deleting", id, marked.ToString());
  sb->deleting = true;
  sb->running = false;
  sb->teardown_failed = false;
  kj::Promise<void> destroy = kj::READY_NOW;
  if (sb->container_created) {
    // After any pause or resume still under way, so a frozen container is seen as frozen.
    destroy = Sequenced(*sb, [this, id, generation] { return StopContainer(id, generation, 0); });
  }
  return destroy.then(
      [this, id, generation]() -> kj::Promise<void> {
        if (Sandbox* sb = Find(id, generation)) {
          MarkHalted(*sb);
          Forget(*sb);
        }
        return kj::READY_NOW;
      },
      [this, id, generation](kj::Exception&& e) -> kj::Promise<void> {
        // runsc could not delete it even after its retries. It stays deleting and not running,
        // as its record on disk says: nothing starts in it, it still counts against
        // maxSandboxes (CheckCapacity), and its mounts stay for the next Delete, gc
        // (RetryFailedTeardowns) or start (the marker) to finish it.
        if (Sandbox* sb = Find(id, generation)) sb->teardown_failed = true;
        return kj::mv(e);
      });
}

kj::Promise<void> SandboxHost::StopContainer(const std::string& id, uint64_t generation,
                                             int attempt) {
  Sandbox* sb = Find(id, generation);
  if (sb == nullptr) return kj::READY_NOW;
  kj::Promise<void> thawed = kj::READY_NOW;
  // runsc refuses to kill a frozen container, and its `delete --force` panics on one
  // (measured on 20221219): resume it first.
  if (sb->frozen) {
    thawed = runsc_.Run({"resume", id}).then([this, id, generation](RunscResult resumed) {
      if (!resumed.ok()) KJ_LOG(ERROR, "cannot resume a paused sandbox to delete it", id,
                                resumed.Describe());
      else if (Sandbox* sb = Find(id, generation)) sb->frozen = false;
    });
  }
  // The init ends (StopInit), and with it its pid namespace: every process in it is killed and
  // the sentry exits as for a container that ended by itself (decision 39); `delete --force`
  // then finds nothing left to kill, and kills whatever is if the init's end did not end it.
  return thawed.then([this, id, generation] { return StopInit(id, generation); })
      .then([this, id, generation] { return AwaitHalt(id, generation); })
      .then([this, id] { return runsc_.Run({"delete", "--force", id}); })
      .then([](RunscResult deleted) {
        // Already gone (a racing delete, or it died): that is what we wanted.
        if (deleted.stderr_text.find("does not exist") != std::string::npos)
          return Settle(absl::OkStatus());
        return Settle(RunscStatus(deleted, absl::StatusCode::kInternal, ""));
      })
      .catch_([this, id, generation, attempt](kj::Exception&& e) -> kj::Promise<void> {
        // A refusal may pass (a cgroup still busy, runsc's own lock): a few more tries, each
        // after twice the last wait, before the teardown is reported failed.
        if (attempt + 1 >= kTeardownTries || Find(id, generation) == nullptr) return kj::mv(e);
        KJ_LOG(WARNING, "tearing down a sandbox failed; trying again", id, attempt, e);
        return timer_.afterDelay(kTeardownRetryDelay * (1 << attempt))
            .then([this, id, generation, attempt] {
              return StopContainer(id, generation, attempt + 1);
            });
      });
}

kj::Promise<void> SandboxHost::StopInit(const std::string& id, uint64_t generation) {
  Sandbox* sb = Find(id, generation);
  if (sb != nullptr && sb->spawner_is_init && sb->spawner.get() != nullptr &&
      sb->spawner->state() == SpawnerChannel::State::kUp && sb->halt_watched && !sb->frozen) {
    // An init that is the spawner is asked to exit: no runsc is started, and the sentry sees
    // its init return (decision 41). One that does not within kInitExitPatience (it is the
    // sandbox's own code) is killed as any other init.
    sb->spawner->ExitSpawner();
    return sb->halted.addBranch()
        .then([] { return true; })
        .exclusiveJoin(timer_.afterDelay(kInitExitPatience).then([] { return false; }))
        .then([this, id](bool halted) -> kj::Promise<void> {
          if (halted) return kj::READY_NOW;
          return runsc_.Run({"kill", id, "KILL"}).ignoreResult();
        });
  }
  // SIGKILL to the sandbox's init only: the cheapest stop through runsc (decision 39).
  return runsc_.Run({"kill", id, "KILL"}).ignoreResult();
}

kj::Promise<void> SandboxHost::AwaitHalt(const std::string& id, uint64_t generation) {
  Sandbox* sb = Find(id, generation);
  if (sb == nullptr || !sb->halt_watched) return kj::READY_NOW;
  return sb->halted.addBranch().exclusiveJoin(timer_.afterDelay(kHaltPatience));
}

void SandboxHost::Forget(Sandbox& sandbox) {
  if (!sandbox.stop_known && sandbox.stop_fulfiller.get() != nullptr) {
    sandbox.stop_fulfiller->reject(StatusToException(
        absl::NotFoundError(absl::StrCat("sandbox ", sandbox.id, " was deleted"))));
  }
  // A `runsc exec` that has not been reaped yet keeps its record until it is, so no zombie
  // is left behind and no exit is lost.
  for (auto& [pid, p] : sandbox.processes) {
    if (!p->exited) reaper_.add(p->exit.addBranch().ignoreResult().attach(kj::addRef(*p)));
  }
  RemoveBundle(sandbox);
  RemoveCgroups(sandbox.id);
  // After runsc is done with it (Destroy deleted the container first).
  if (sandbox.link) {
    if (dns_ != nullptr) dns_->RemoveSandbox(sandbox.id);
    if (egress_ != nullptr) egress_->Remove(sandbox.id);
    if (networks_ != nullptr) networks_->Remove(*sandbox.link);
    else KJ_LOG(ERROR, "cannot remove a sandbox's network: networking is not set up", sandbox.id);
  }
  sandboxes_.erase(sandbox.id);
}

void SandboxHost::RemoveBundle(Sandbox& sandbox) {
  bool all_unmounted = true;
  for (const auto& s : sandbox.staging) {
    absl::Status st = UnstageBind(s);
    if (!st.ok()) {
      all_unmounted = false;
      KJ_LOG(ERROR, "leaving staging dir in place", st.ToString());
    }
  }
  sandbox.staging.clear();
  // After runsc deleted the container: nothing writes to them any more.
  for (const auto& d : sandbox.empty_dirs) {
    absl::Status st = RemoveEmptyWorkspace(d);
    if (!st.ok()) {
      all_unmounted = false;
      KJ_LOG(ERROR, "leaving an empty workspace's directory in place", st.ToString());
    }
  }
  sandbox.empty_dirs.clear();
  for (const auto& f : sandbox.files) unlink(f.c_str());
  sandbox.files.clear();
  absl::Status overlay = RemoveRootfsOverlay(sandbox.bundle_dir);
  if (!overlay.ok()) {
    all_unmounted = false;
    KJ_LOG(ERROR, "leaving rootfs overlay in place", overlay.ToString());
  }
  if (all_unmounted) {
    rmdir((sandbox.bundle_dir + "/mounts").c_str());
    rmdir(sandbox.bundle_dir.c_str());
  }
}

void SandboxHost::RemoveCgroups(const std::string& sandbox_id) {
  // runsc deletes what it created on a clean delete, but not after a create that failed
  // half-way; rmdir only removes empty ones.
  std::string rel = SandboxCgroup(config_.helper().getCgroupParent().cStr(), sandbox_id);
  for (const auto& hierarchy : DirEntries(cgroup_root_)) {
    if (hierarchy[0] == '.') continue;
    rmdir(absl::StrCat(cgroup_root_, "/", hierarchy, rel).c_str());
  }
  rmdir((cgroup_root_ + rel).c_str());  // a pure cgroup2 host
}

kj::Promise<void> SandboxHost::DeleteAll() {
  kj::Vector<kj::Promise<void>> all;
  std::vector<std::pair<std::string, uint64_t>> ids;
  for (const auto& [id, sb] : sandboxes_) ids.emplace_back(id, sb->generation);
  for (const auto& [id, gen] : ids) {
    Sandbox* sb = Find(id, gen);
    kj::Promise<void> destroyed = nullptr;
    KJ_IF_MAYBE(gone, sb->gone) {
      // A delete's teardown under way is waited for rather than started twice; one that
      // failed is tried again.
      destroyed = sb->teardown_failed ? Destroy(id, gen) : gone->addBranch();
    } else {
      destroyed = Destroy(id, gen);
    }
    all.add(kj::mv(destroyed).catch_([id = id](kj::Exception&& e) {
      KJ_LOG(ERROR, "cannot delete sandbox at shutdown", id, e);
    }));
  }
  return kj::joinPromises(all.releaseAsArray());
}

kj::Promise<void> SandboxHost::RunToCompletion(kj::Promise<void> work) {
  // A broker that dies mid-request cancels its RPC calls; the work itself must still finish
  // (or clean up), so a create or delete is never left half-done.
  auto forked = work.fork();
  reaper_.add(forked.addBranch());
  return forked.addBranch();
}

}  // namespace paseo
