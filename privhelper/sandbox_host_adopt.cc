// See sandbox_host.h. This file: what a starting privhelper finds (Reconcile): containers it adopts
// or destroys, their networks and spawners (reattached: docs/decisions.md 54), and what nobody
// owns.
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

kj::Promise<void> SandboxHost::ReattachSpawner(Sandbox& sb) {
  std::string id = sb.id;
  uint64_t generation = sb.generation;
  auto lost = [this, id, generation](std::string why) {
    Sandbox* sb = Find(id, generation);
    if (sb == nullptr) return;
    KJ_LOG(WARNING, "cannot reattach an adopted sandbox's spawner; its processes are lost", id, why);
    sb->lost_reason = absl::StrCat("its spawner could not be reattached: ", why);
    sb->unattached = true;
    // Its first process starts a spawner of this privhelper's (StartSpawner).
    sb->spawner = nullptr;
    sb->spawner_down.clear();
  };
  std::optional<SpawnerKey> key = ReadSpawnerKey(sb.bundle_dir);
  if (spawner_io_ == nullptr || !key) {
    lost(spawner_io_ == nullptr ? "spawners are off" : "it has no spawner key (created before reattach)");
    return kj::READY_NOW;
  }
  sb.spawner_key = key->key;
  ExecSpec exec;
  exec.argv = {kShimPath, "attach"};
  exec.uid = sb.uid;
  exec.gid = sb.gid;
  exec.home = sb.home;
  exec.path_prefix = sb.tool_path;
  std::string json = sb.bundle_dir + "/attach.json";
  std::string pid_file = sb.bundle_dir + "/attach.pid";
  for (const std::string& file : {json, pid_file}) {
    unlink(file.c_str());
    std::erase(sb.files, file);
    sb.files.push_back(file);
  }
  absl::Status written = WriteNewFile(json, RenderProcessJson(exec));
  auto to = MakePipe();
  auto from = MakePipe();
  kj::AutoCloseFd errors(memfd_create("attach-stderr", MFD_CLOEXEC));
  kj::AutoCloseFd exec_log(memfd_create("runsc-exec-log", MFD_CLOEXEC));
  if (!written.ok() || !to.ok() || !from.ok() || errors.get() < 0 || exec_log.get() < 0) {
    lost(written.ok() ? "out of file descriptors" : std::string(written.message()));
    return kj::READY_NOW;
  }
  fcntl(from->read.get(), F_SETPIPE_SZ, 1 << 20);  // as StartSpawner's
  auto runsc_exit = runsc_.Start({"exec", "--process", json, "--internal-pid-file", pid_file, id},
                                 RunscStdio{to->read.get(), from->write.get(), errors.get(),
                                            exec_log.get()});
  if (!runsc_exit.ok()) {
    lost(std::string(runsc_exit.status().message()));
    return kj::READY_NOW;
  }
  // The attach's kAttach frame waits in the pipe for the spawner (SpawnerChannel sends it first).
  OpenSpawnerChannel(sb, kj::mv(to->write), kj::mv(from->read), key->is_init, /*reattach=*/true);
  // `shim attach` exits once the spawner took the channel (0) or did not (1: no such key; 2: no
  // spawner listens, e.g. one from before reattach): then the channel cannot come up.
  reaper_.add(runsc_exit->then([this, id, generation, errors = kj::mv(errors)](int status) {
    Sandbox* sb = Find(id, generation);
    if (sb == nullptr || sb->spawner.get() == nullptr || status == 0) return;
    std::string said = ReadMemfd(errors.get());
    while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
    if (said.size() > 300) said = said.substr(said.size() - 300);
    if (sb->spawner->state() == SpawnerChannel::State::kStarting)
      sb->spawner->Fail(said.empty() ? absl::StrCat("`shim attach` failed (status ", status, ")") : said);
  }));
  return sb.spawner->Hello()
      .exclusiveJoin(timer_.afterDelay(kReattachPatience))
      .then([this, id, generation, lost]() mutable {
        Sandbox* sb = Find(id, generation);
        if (sb == nullptr || sb->spawner.get() == nullptr) return;
        if (sb->spawner->state() == SpawnerChannel::State::kStarting)
          sb->spawner->Fail("it did not answer the reattach in time");
        if (sb->spawner->state() != SpawnerChannel::State::kUp) {
          lost(sb->spawner->down_reason());
          return;
        }
        size_t count = 0;
        for (SpawnerChannel::Held& h : sb->spawner->TakeHeld()) {
          if (sb->processes.count(h.name)) continue;
          Process& p = Track(*sb, h.name, kj::mv(h.exit));
          p.spawner_id = h.id;
          p.tty = h.merged;
          p.held = true;
          ++count;
        }
        sb->unattached = false;
        sb->lost_reason =
            "the previous privhelper ran it with `runsc exec` (not through the sandbox's spawner), "
            "which does not outlive it";
        KJ_LOG(WARNING, "reattached an adopted sandbox's spawner", id, count);
      });
}

namespace {

struct ListedContainer {
  std::string id;
  std::string status;  // "running", "stopped", "created", ...
};

// Parses `runsc list --format=json` (an array of OCI state objects, or "null" for none).
absl::StatusOr<std::vector<ListedContainer>> ParseRunscList(const std::string& text) {
  std::vector<ListedContainer> out;
  if (text.find_first_not_of(" \n") == std::string::npos) return out;
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<capnp::JsonValue>();
  capnp::JsonCodec codec;
  auto error = kj::runCatchingExceptions(
      [&] { codec.decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), root); });
  if (error == nullptr && root.isNull()) return out;
  if (error != nullptr || !root.isArray()) {
    KJ_LOG(ERROR, "cannot parse runsc list output", text);
    return absl::InternalError("unreadable runsc list output; no collection");
  }
  for (auto item : root.getArray()) {
    if (!item.isObject()) continue;
    ListedContainer c;
    for (auto field : item.getObject()) {
      if (field.getName() == "id" && field.getValue().isString())
        c.id = field.getValue().getString().cStr();
      if (field.getName() == "status" && field.getValue().isString())
        c.status = field.getValue().getString().cStr();
    }
    if (!c.id.empty()) out.push_back(c);
  }
  return out;
}

// What a bundle dir holds: the regular files in it and the staging dirs under mounts/.
void ScanBundle(const std::string& bundle_dir, std::vector<std::string>& files,
                std::vector<std::string>& staging, std::vector<std::string>& empty_dirs) {
  for (const auto& n : DirEntries(bundle_dir)) {
    std::string path = absl::StrCat(bundle_dir, "/", n);
    struct stat st;
    if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files.push_back(path);
  }
  for (const auto& n : DirEntries(bundle_dir + "/mounts")) {
    bool empty = absl::StartsWith(n, kEmptyWorkspacePrefix);
    (empty ? empty_dirs : staging).push_back(absl::StrCat(bundle_dir, "/mounts/", n));
  }
}

// Where the first workspace is seen on the host, for workspaceCwd checks: its staged bind, or
// its own empty directory.
std::string FirstWorkspaceDir(const std::string& bundle_dir) {
  std::string empty = absl::StrCat(bundle_dir, "/mounts/", kEmptyWorkspacePrefix, 0);
  struct stat st;
  return lstat(empty.c_str(), &st) == 0 ? empty : bundle_dir + "/mounts/0";
}

}  // namespace

kj::Promise<void> SandboxHost::Reconcile(config::RestartPolicy policy) {
  // A gc finishes what failed before, whatever `runsc list` says: their records say deleting.
  RetryFailedTeardowns();
  return runsc_.Run({"list", "--format=json"})
      .then([this, policy](RunscResult listed) -> kj::Promise<void> {
        absl::Status st = RunscStatus(listed, absl::StatusCode::kInternal, "runsc list: ");
        if (!st.ok()) return StatusToException(st);
        // Without a trustworthy list, collecting bundles could remove live sandboxes' records.
        auto containers = ParseRunscList(listed.stdout_text);
        if (!containers.ok()) return StatusToException(containers.status());
        kj::Vector<kj::Promise<void>> reattaches;
        for (const auto& c : *containers) AdoptOrDestroy(c.id, c.status, policy, reattaches);
        CollectUnowned();
        // Served only once every adopted spawner said what it holds (or failed to): the broker's
        // inventory then lists every process that lives on.
        return kj::joinPromises(reattaches.releaseAsArray());
      });
}

void SandboxHost::AdoptOrDestroy(const std::string& id, const std::string& status,
                                 config::RestartPolicy policy,
                                 kj::Vector<kj::Promise<void>>& reattaches) {
  if (!IsValidId(id) || Find(id) != nullptr) return;
  Sandbox& sb = Add(id);
  sb.container_created = true;
  ScanBundle(sb.bundle_dir, sb.files, sb.staging, sb.empty_dirs);
  sb.first_workspace_dir = FirstWorkspaceDir(sb.bundle_dir);
  capnp::MallocMessageBuilder message;
  auto record = ReadRecord(sb.bundle_dir + "/sandbox.json", message);
  if (record.ok()) {
    sb.deployment = record->getDeploymentId().cStr();
    sb.profile = record->getProfile().cStr();
    sb.uid = record->getUid();
    sb.gid = record->getGid();
    sb.default_cwd = record->getDefaultCwd().cStr();
    sb.home = record->getHome().cStr();
    for (auto k : record->getKept()) sb.kept.emplace_back(k.cStr());
    sb.created_ms = record->getCreatedAtUnixMs();
    // From the profile as configured now: if an operator changed its tools since, a directory
    // on PATH may be missing (harmless) or a mounted one absent from PATH.
    sb.tool_path = ToolPath(sb.profile);
    auto block = network::ParseCidr(record->getNetworkBlock().cStr());
    if (block && networks_ != nullptr) {
      sb.link = networks_->LinkOf(id, block->addr);
    } else if (record->getNetworkBlock().size() > 0) {
      KJ_LOG(ERROR, "a sandbox with a network, but networking is not set up", id);
    }
  }
  bool vouched = record.ok() && config_.FindDeployment(sb.deployment) != nullptr && sb.uid != 0 &&
                 sb.gid != 0;
  // A delete had begun (and may have been answered): it is finished, never adopted.
  bool deleting = record.ok() && record->getDeleting();
  // A stopped one is kept too, as stopped: its owner sees what happened and deletes it.
  // A paused one stays paused (its owner resumes it), and is resumed before it is destroyed.
  sb.frozen = status == "paused";
  bool adopt = policy == config::RestartPolicy::KEEP && vouched && !deleting &&
               (status == "running" || status == "stopped" || status == "paused");
  if (adopt) {
    sb.running = true;
    sb.unattached = true;
    sb.paused = sb.frozen;
    if (status == "stopped") {
      std::string cgroup = SandboxCgroup(config_.helper().getCgroupParent().cStr(), id);
      bool oom = ReadOomKillCount(cgroup, cgroup_root_).value_or(0) > 0;
      MarkStopped(
          sb, oom ? kOomKilledSandboxReason : "it had stopped when the privhelper restarted", oom);
      MarkHalted(sb);
      KJ_LOG(WARNING, "adopted a stopped sandbox from a previous privhelper", id);
    } else {
      WatchHostProcesses(sb);
      KJ_LOG(WARNING, "adopted a running sandbox from a previous privhelper", id);
    }
    if (sb.link) AdoptNetwork(sb);
    if (sb.stopped) {
      sb.lost_reason = "the sandbox had stopped";
    } else if (sb.frozen) {
      // runsc execs nothing into a frozen sandbox: its spawner keeps what it holds, unseen.
      sb.lost_reason = "the sandbox was paused when the privhelper restarted";
    } else {
      reattaches.add(ReattachSpawner(sb).catch_([id](kj::Exception&& e) {
        KJ_LOG(ERROR, "reattaching a sandbox's spawner failed", id, e);
      }));
    }
  } else {
    KJ_LOG(WARNING, "destroying a sandbox left by a previous privhelper", id, status);
    reaper_.add(Destroy(sb.id, sb.generation));
  }
}

void SandboxHost::AdoptNetwork(Sandbox& sb) {
  // Its link survived; its firewall chains went with the table at start, its pin with the
  // previous privhelper's mount namespace: both come back from the record and its sentry.
  std::string state_file = absl::StrCat(config_.helper().getRunDir().cStr(), "/runsc/", sb.id,
                                        "_sandbox:", sb.id, ".state");
  const config::LaunchProfile::Reader* profile = config_.FindProfile(sb.profile);
  config::NetworkPolicy::Reader policy =
      profile != nullptr ? profile->getNetwork() : config::NetworkPolicy::Reader();
  for (uint16_t port : policy.getInboundPorts()) sb.inbound_ports.push_back(port);
  absl::Status adopted = networks_->Adopt(*sb.link, ReadHostPids(state_file).sentry, policy);
  if (!adopted.ok())
    KJ_LOG(ERROR, "cannot restore an adopted sandbox's network", sb.id, adopted.ToString());
  if (adopted.ok() && dns_ != nullptr) {
    absl::Status served = dns_->AddSandbox(sb.id, sb.link->host_addr, sb.link->sandbox_addr,
                                           network::AllowedNamesFrom(policy));
    if (!served.ok())
      KJ_LOG(ERROR, "cannot serve an adopted sandbox's DNS", sb.id, served.ToString());
  }
  if (adopted.ok() && egress_ != nullptr && networks_->egress_port() != 0 &&
      policy.getAllowNames().size() > 0) {
    // Its secrets' placeholders died with the previous privhelper (decision 59): the proxy
    // passes its TLS through unterminated, so a placeholder reaches the host, never a value.
    auto served = egress_->Add(sb.id, sb.link->host_addr, sb.link->sandbox_addr,
                               network::AllowedNamesFrom(policy));
    if (!served.ok())
      KJ_LOG(ERROR, "cannot serve an adopted sandbox's egress", sb.id, served.status().ToString());
  }
}

void SandboxHost::CollectUnowned() {
  if (networks_ != nullptr) {
    // Namespace pins, links and firewall chains of no sandbox here (a crash mid-create or
    // mid-delete).
    std::set<std::string> owned;
    for (const auto& [id, sb] : sandboxes_) owned.insert(id);
    networks_->CollectUnowned(owned);
  }
  // Bundles and cgroups that no sandbox owns: leftovers of a crash mid-create or mid-delete.
  for (const auto& n : DirEntries(BundlesDir())) {
    if (Find(n) != nullptr) continue;
    Sandbox stale;
    stale.id = n;
    stale.bundle_dir = absl::StrCat(BundlesDir(), "/", n);
    ScanBundle(stale.bundle_dir, stale.files, stale.staging, stale.empty_dirs);
    KJ_LOG(WARNING, "removing a stale bundle", n);
    RemoveBundle(stale);
  }
  std::string parent = config_.helper().getCgroupParent().cStr();
  std::vector<std::string> parents = {cgroup_root_ + parent};  // a pure cgroup2 host
  for (const auto& hierarchy : DirEntries(cgroup_root_))
    parents.push_back(absl::StrCat(cgroup_root_, "/", hierarchy, parent));
  for (const auto& dir : parents) {
    for (const auto& n : DirEntries(dir)) {
      struct stat st;
      if (IsValidId(n) && Find(n) == nullptr &&
          stat(absl::StrCat(dir, "/", n).c_str(), &st) == 0 && S_ISDIR(st.st_mode))
        RemoveCgroups(n);
    }
  }
}

}  // namespace paseo
