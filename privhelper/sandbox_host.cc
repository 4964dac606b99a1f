// See sandbox_host.h. This file: records and lookups, create, pause and resume, connect, a sandbox
// that stops by itself, and what the broker is shown of a sandbox. The other roles are
// sandbox_host_processes.cc (starting and tracking processes, the spawner, reattach),
// sandbox_host_teardown.cc (delete) and sandbox_host_adopt.cc (what a starting privhelper finds).
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
#include "privhelper/egress_ca_check.h"
#include "privhelper/exit_status.h"
#include "privhelper/network/links.h"
#include "privhelper/rootfs_overlay.h"
#include "privhelper/sandbox_identity.h"
#include "privhelper/secret_file.h"
#include "privhelper/workspace_resolver.h"
#include "schema/records.capnp.h"

#include "privhelper/sandbox_host_internal.h"

namespace paseo {

using namespace host_internal;  // NOLINT: this file is one of SandboxHost's

SandboxHost::SandboxHost(const Config& config, RunscRunner& runsc, ProcessWatcher& watcher,
                         kj::Timer& timer, std::string shim, std::string cgroup_root,
                         PortConnector* ports)
    : config_(config),
      runsc_(runsc),
      watcher_(watcher),
      timer_(timer),
      shim_(std::move(shim)),
      cgroup_root_(std::move(cgroup_root)),
      ports_(ports),
      reaper_(reap_errors_) {}

void SandboxHost::SetServiceCgroup(const ServiceCgroup* service) {
  service_ = service;
  priority_ = nullptr;
  if (service == nullptr) return;
  priority_ = std::make_unique<CpuPriority>(timer_, [service](const std::string& id, uint64_t shares) {
    return service->SetSandboxCpuShares(id, shares);
  });
}

SandboxHost::~SandboxHost() {
  // Anything still here at destruction was not destroyed through DeleteAll: at least release
  // the mounts so nothing outlives the process.
  for (auto& [id, sandbox] : sandboxes_) {
    for (const auto& s : sandbox->staging) (void)UnstageBind(s);
  }
}

SandboxHost::Sandbox* SandboxHost::Find(const std::string& id, uint64_t generation) {
  auto it = sandboxes_.find(id);
  if (it == sandboxes_.end()) return nullptr;
  if (generation != 0 && it->second->generation != generation) return nullptr;
  return it->second.get();
}

absl::StatusOr<SandboxHost::Sandbox*> SandboxHost::FindSandbox(const std::string& id, Need need) {
  Sandbox* sb = Find(id);
  if (need == Need::kRunning && (sb == nullptr || !sb->running || sb->deleting))
    return absl::NotFoundError(absl::StrCat("no running sandbox ", id));
  if (sb == nullptr) return absl::NotFoundError(absl::StrCat("no sandbox ", id));
  return sb;
}

absl::StatusOr<SandboxHost::Process*> SandboxHost::FindProcess(const ValidatedProcessRef& ref,
                                                               Need need) {
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(ref.sandbox_id, need));
  auto it = sb->processes.find(ref.process_id);
  if (it == sb->processes.end())
    return absl::NotFoundError(absl::StrCat("no process ", ref.process_id));
  return it->second.get();
}

std::string SandboxHost::BundlesDir() const {
  return absl::StrCat(config_.helper().getStateDir().cStr(), "/bundles");
}

SandboxHost::Sandbox& SandboxHost::Add(const std::string& id) {
  auto sandbox = kj::heap<Sandbox>();
  sandbox->id = id;
  sandbox->generation = next_generation_++;
  sandbox->bundle_dir = absl::StrCat(BundlesDir(), "/", id);
  auto stop = kj::newPromiseAndFulfiller<Stop>();
  sandbox->stop = stop.promise.fork();
  sandbox->stop_fulfiller = kj::mv(stop.fulfiller);
  auto halt = kj::newPromiseAndFulfiller<void>();
  sandbox->halted = halt.promise.fork();
  sandbox->halt_fulfiller = kj::mv(halt.fulfiller);
  Sandbox& sb = *sandbox;
  sandboxes_.emplace(id, kj::mv(sandbox));
  return sb;
}

struct SandboxHost::CreatePlan {
  std::string rootfs;
  std::vector<ResolvedWorkspace> workspaces;   // in request.mounts order
  std::vector<ResolvedWorkspace> credentials;  // in request.credentials order
  std::vector<ResolvedWorkspace> tools;        // in request.tools order
  uid_t uid = 0;
  gid_t gid = 0;
};

absl::StatusOr<SandboxHost::CreatePlan> SandboxHost::PlanCreate(
    const ValidatedCreate& request) const {
  CreatePlan plan;
  const auto& deployment = *request.deployment;
  plan.rootfs = config_.RootfsPath(*request.profile);
  struct stat rootfs_st;
  if (stat(plan.rootfs.c_str(), &rootfs_st) != 0 || !S_ISDIR(rootfs_st.st_mode))
    return absl::FailedPreconditionError(absl::StrCat("rootfs ", plan.rootfs, " is not installed"));
  for (const auto& m : request.mounts)
    RETURN_IF_ERROR(CheckDestination(plan.rootfs, m.destination));
  for (const auto& c : request.credentials)
    RETURN_IF_ERROR(CheckDestination(plan.rootfs, c.destination));
  for (const auto& t : request.tools)
    RETURN_IF_ERROR(CheckDestination(plan.rootfs, t.destination));
  for (const auto& m : request.mounts) {
    if (m.empty) {  // made in the bundle by WriteBundle: nothing of the client's to resolve
      plan.workspaces.emplace_back();
      continue;
    }
    ASSIGN_OR_RETURN(ResolvedWorkspace ws,
                     ResolveWorkspace(deployment, m.client_path, request.peer, m.read_only));
    plan.workspaces.push_back(std::move(ws));
  }
  for (const auto& c : request.credentials) {
    ASSIGN_OR_RETURN(ResolvedWorkspace cred, ResolveCredential(c.name, c.host_path));
    plan.credentials.push_back(std::move(cred));
  }
  for (const auto& t : request.tools) {
    ASSIGN_OR_RETURN(ResolvedWorkspace tool, ResolveTool(deployment, t.root));
    plan.tools.push_back(std::move(tool));
  }
  if (deployment.hasRunAs()) {
    plan.uid = deployment.getRunAs().getUid();
    plan.gid = deployment.getRunAs().getGid();
  } else {
    // Default: the owner of the first workspace root.
    ASSIGN_OR_RETURN(RootOwner owner, FirstRootOwner(deployment));
    plan.uid = owner.uid;
    plan.gid = owner.gid;
  }
  if (plan.uid == 0 || plan.gid == 0)
    return absl::FailedPreconditionError(absl::StrCat(
        "deployment ", deployment.getId().cStr(),
        ": agents never run as uid or gid 0; the workspace root is owned by root, so set runAs"));
  return plan;
}

absl::Status SandboxHost::CheckServiceRoom() const {
  if (service_ == nullptr) return absl::OkStatus();
  const ServiceBounds& bound = config_.service();
  RETURN_IF_ERROR(service_->EnsureApplied(bound));
  ASSIGN_OR_RETURN(ServiceUse use, service_->Use());
  // Sandboxes still starting may not show their cost yet: each counts as a started one.
  uint64_t starting = 1;
  for (const auto& [id, sb] : sandboxes_) starting += !sb->running && !sb->deleting;
  uint64_t memory = use.memory_bytes + starting * kSandboxStartBytes;
  uint64_t tasks = use.host_tasks + starting * kSandboxStartHostTasks;
  if (memory > bound.memory_bytes)
    return absl::ResourceExhaustedError(absl::StrCat(
        "the service's memory bound is reached: its sandboxes use ", use.memory_bytes >> 20,
        " MiB of the ", bound.memory_bytes >> 20,
        " MiB all sandboxes may use together (helper.json serviceLimits.memoryBytes), and a "
        "sandbox needs about ", kSandboxStartBytes >> 20, " MiB to start"));
  if (tasks > bound.max_host_tasks)
    return absl::ResourceExhaustedError(absl::StrCat(
        "the service's host task bound is reached: its sandboxes run ", use.host_tasks,
        " host tasks of the ", bound.max_host_tasks,
        " all sandboxes may run together (helper.json serviceLimits.maxHostTasks), and a "
        "sandbox needs about ", kSandboxStartHostTasks, " to start"));
  return absl::OkStatus();
}

absl::StatusOr<kj::Promise<void>> SandboxHost::Create(ValidatedCreate request) {
  if (Find(request.sandbox_id) != nullptr)
    return absl::AlreadyExistsError(absl::StrCat("sandbox ", request.sandbox_id, " exists"));
  std::string deployment_id = request.deployment->getId().cStr();
  RETURN_IF_ERROR(CheckCapacity(*request.deployment));
  RETURN_IF_ERROR(CheckServiceRoom());
  ASSIGN_OR_RETURN(CreatePlan plan, PlanCreate(request));
  kj::Promise<std::string> ca = std::string();
  config::NetworkPolicy::Reader policy = request.profile->getNetwork();
  bool sandbox_network = policy.getMode() == config::NetworkMode::SANDBOX;
  if (sandbox_network && networks_ == nullptr)
    return absl::FailedPreconditionError("network mode \"sandbox\" is not set up on this host");
  // Without the privhelper's resolver a sandbox would have no DNS, and its host end's port 53
  // nobody we know of to answer: refused, as when networking is not set up.
  // Names go through the egress proxy (SetEgress): without it a profile with allowNames rules
  // is refused, never given its names' addresses.
  if (sandbox_network && policy.getAllowNames().size() > 0 && networks_->egress_port() != 0 &&
      egress_ == nullptr)
    return absl::FailedPreconditionError(
        "allowNames rules need the egress proxy, which is not running on this host (see the "
        "privhelper's log)");
  if (sandbox_network && dns_ == nullptr)
    return absl::FailedPreconditionError(
        "network mode \"sandbox\" has no DNS resolver on this host: set network.dnsUpstreams in "
        "the privhelper's config (no usable nameserver in /etc/resolv.conf)");
  // Secrets (decision 59): read now, so a file that is not root's refuses the create before
  // anything is made; they go only to the egress proxy.
  ASSIGN_OR_RETURN(std::vector<EgressSecret> secrets, SecretsOf(*request.deployment, *request.profile));
  if (!secrets.empty() && (!sandbox_network || egress_ == nullptr || networks_->egress_port() == 0))
    return absl::FailedPreconditionError(
        "the profile's secrets need the egress proxy, which is not running on this host (see the "
        "privhelper's log)");

  // The bundle dir comes first: if it exists (a crash left it), it is not this sandbox's to
  // remove, and nothing has been recorded yet.
  std::string bundle_dir = absl::StrCat(BundlesDir(), "/", request.sandbox_id);
  if (mkdir(bundle_dir.c_str(), 0700) != 0) return ErrnoStatus("mkdir", bundle_dir);
  Sandbox& sb = Add(request.sandbox_id);
  sb.deployment = deployment_id;
  sb.profile = request.profile->getName().cStr();
  sb.uid = plan.uid;
  sb.gid = plan.gid;
  sb.default_cwd = request.mounts.empty() ? "/" : request.mounts[0].destination;
  for (const auto& t : request.tools) sb.tool_path.push_back(t.destination);
  for (const auto& m : request.mounts)
    if (!m.read_only) sb.kept.push_back(m.destination);
  for (const auto& c : request.credentials)
    if (!c.read_only) sb.kept.push_back(c.destination);
  sb.home = request.profile->getHomePath().cStr();
  sb.created_ms = NowUnixMs();
  // Until runsc is asked to create the container, a failure undoes all that was written and
  // mounted (sb.files, sb.staging, the overlay) and forgets the record.
  absl::Cleanup forget = [this, &sb] { Forget(sb); };
  if (sandbox_network) {
    // After every check, before anything runs: Forget removes it again on any failure.
    ASSIGN_OR_RETURN(sb.link, networks_->Create(sb.id, policy));
    for (uint16_t port : policy.getInboundPorts()) sb.inbound_ports.push_back(port);
    RETURN_IF_ERROR(dns_->AddSandbox(sb.id, sb.link->host_addr, sb.link->sandbox_addr,
                                     network::AllowedNamesFrom(policy)));
    if (networks_->egress_port() != 0 && policy.getAllowNames().size() > 0) {
      // The placeholders, in every process's environment and in the files the profile asks
      // for; the values stay in the proxy.
      for (size_t i = 0; i < secrets.size(); ++i) {
        auto use = request.profile->getSecrets()[i];
        for (auto r : request.deployment->getSecrets())
          if (r.getName() == use.getName())
            sb.secret_env.push_back(absl::StrCat(r.getEnvVar().cStr(), "=", secrets[i].placeholder));
        if (use.getFile().size() > 0)
          sb.secret_files.push_back({use.getFile().cStr(), secrets[i].placeholder});
      }
      if (!secrets.empty()) sb.secret_env.push_back(absl::StrCat("NODE_EXTRA_CA_CERTS=", kSandboxEgressCaPath));
      for (const EgressSecret& secret : secrets)
        for (const std::string& h : secret.hosts)
          if (std::find(sb.secret_hosts.begin(), sb.secret_hosts.end(), h) == sb.secret_hosts.end())
            sb.secret_hosts.push_back(h);
      ASSIGN_OR_RETURN(ca, egress_->Add(sb.id, sb.link->host_addr, sb.link->sandbox_addr,
                                        network::AllowedNamesFrom(policy), std::move(secrets)));
    }
  }
  RETURN_IF_ERROR(WriteBundle(sb, request, plan));
  std::move(forget).Cancel();
  if (sb.secret_env.empty()) return StartContainer(sb.id, sb.generation);
  // The sandbox's CA, from the proxy, into its trust store before anything runs in it.
  std::string id = sb.id;
  uint64_t generation = sb.generation;
  // A proxy that does not answer in time fails the create (it counts against capacity while
  // it waits).
  auto answered = timer_.timeoutAfter(kEgressAnswerPatience, kj::mv(ca));
  return answered.then([this, id, generation](std::string ca_pem) -> kj::Promise<void> {
             Sandbox* sb = Find(id, generation);
             if (sb == nullptr || sb->deleting)
               return StatusToException(
                   absl::FailedPreconditionError("sandbox was deleted while being created"));
             // The proxy is unprivileged: what it answers is checked before the sandbox
             // trusts it (a CA for more than the secrets' hosts would let it impersonate any).
             absl::Status trusted = CheckEgressCa(ca_pem, sb->secret_hosts);
             if (trusted.ok()) trusted = WriteTrustFiles(*sb, ca_pem);
             if (!trusted.ok()) return StatusToException(trusted);
             return StartContainer(id, generation);
           })
      .catch_([this, id, generation](kj::Exception&& e) -> kj::Promise<void> {
        Sandbox* sb = Find(id, generation);
        if (sb == nullptr || sb->running || sb->container_created) return kj::mv(e);
        // Before runsc was asked: the proxy refused or the trust could not be written.
        return Destroy(id, generation)
            .catch_([](kj::Exception&& cleanup) {
              KJ_LOG(ERROR, "cleanup after a failed create failed", cleanup);
            })
            .then([e = kj::mv(e)]() mutable -> kj::Promise<void> { return kj::mv(e); });
      });
}

namespace {

// Rewrites a bundle file in place (the same inode: the sandbox's bind of it stays).
absl::Status RewriteInPlace(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path);
  kj::AutoCloseFd owned(fd);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("write", path);
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status SandboxHost::WriteTrustFiles(Sandbox& sb, const std::string& ca_pem) {
  ASSIGN_OR_RETURN(std::string bundle, TrustBundleText(sb.bundle_dir + "/rootfs", ca_pem));
  RETURN_IF_ERROR(RewriteInPlace(sb.bundle_dir + "/trust-ca.pem", ca_pem));
  return RewriteInPlace(sb.bundle_dir + "/trust-bundle.crt", bundle);
}

void SandboxHost::NewEgressCa(const std::string& id, const std::string& ca_pem) {
  Sandbox* sb = Find(id);
  if (sb == nullptr || sb->secret_env.empty()) return;
  absl::Status wrote = CheckEgressCa(ca_pem, sb->secret_hosts);
  if (wrote.ok()) wrote = WriteTrustFiles(*sb, ca_pem);
  if (!wrote.ok()) KJ_LOG(ERROR, "cannot write a sandbox's new egress CA", id, wrote.ToString());
}

absl::StatusOr<std::vector<EgressSecret>> SandboxHost::SecretsOf(
    config::Deployment::Reader deployment, config::LaunchProfile::Reader profile) const {
  std::vector<EgressSecret> out;
  for (auto use : profile.getSecrets()) {
    std::optional<config::SecretRegistration::Reader> found;
    for (auto r : deployment.getSecrets())
      if (r.getName() == use.getName()) found = r;
    // LoadConfig checked that every secret a deployment's profiles ask for is registered.
    if (!found)
      return absl::FailedPreconditionError(
          absl::StrCat("secret \"", use.getName().cStr(), "\" is not registered for this deployment"));
    EgressSecret secret;
    secret.name = found->getName().cStr();
    for (auto h : found->getHosts()) secret.hosts.push_back(h.cStr());
    secret.header = found->getHeader().cStr();
    secret.placeholder = NewPlaceholder(secret.name);
    ASSIGN_OR_RETURN(secret.value, ReadSecretFile(found->getPath().cStr()));
    out.push_back(std::move(secret));
  }
  return out;
}

absl::Status SandboxHost::WriteBundle(Sandbox& sb, const ValidatedCreate& request,
                                      const CreatePlan& plan) {
  std::string mounts_dir = sb.bundle_dir + "/mounts";
  if (mkdir(mounts_dir.c_str(), 0700) != 0) return ErrnoStatus("mkdir", mounts_dir);
  std::string record_path = sb.bundle_dir + "/sandbox.json";
  std::string network_block =
      sb.link ? absl::StrCat(network::FormatIpv4(network::SandboxNetworks::BlockOf(*sb.link)),
                             "/", network::AddressPool::kBlockPrefix)
              : "";
  RETURN_IF_ERROR(WriteNewFile(record_path, RenderRecord(sb.id, sb.deployment, sb.profile, sb.uid,
                                                         sb.gid, sb.default_cwd, sb.home,
                                                         sb.created_ms, network_block, sb.kept)));
  sb.files.push_back(record_path);

  ASSIGN_OR_RETURN(std::string merged, MountRootfsOverlay(plan.rootfs, sb.bundle_dir));
  // Into the sandbox's own upper layer, before anything runs in it.
  RETURN_IF_ERROR(WriteSandboxIdentity(merged, {sb.uid, sb.gid, sb.home}));
  if (sb.link) RETURN_IF_ERROR(WriteSandboxResolvConf(merged, network::FormatIpv4(sb.link->host_addr)));
  // Each placeholder file: root's, world-readable, mounted read-only where the profile asked.
  for (size_t i = 0; i < sb.secret_files.size(); ++i) {
    std::string path = absl::StrCat(sb.bundle_dir, "/secret-file-", i);
    RETURN_IF_ERROR(WriteNewFile(path, sb.secret_files[i].second + "\n", 0444));
    sb.files.push_back(path);
  }
  BundleSpec spec;
  if (sb.link) spec.netns_path = sb.link->netns_path;
  spec.rootfs = merged;
  spec.shim = shim_;
  // What is kept, for the sandbox's processes to read (Api.SandboxPaths): world-readable in the
  // root-only bundle dir, mounted read-only like the shim.
  std::string kept_path = sb.bundle_dir + "/kept";
  RETURN_IF_ERROR(WriteNewFile(kept_path, KeptFileText(sb.kept), 0644));
  sb.files.push_back(kept_path);
  spec.kept_file = kept_path;
  spec.uid = sb.uid;
  spec.gid = sb.gid;
  spec.tmpfs_bytes = request.profile->getTmpfsBytes();
  spec.home = sb.home;
  spec.home_bytes = request.profile->getHomeBytes();
  spec.limits = config_.LimitsOf(*request.profile);
  spec.cgroups_path = SandboxCgroup(config_.helper().getCgroupParent().cStr(), sb.id);
  spec.init_is_spawner = spawner_io_ != nullptr;
  // Recorded as soon as mounted, so the teardown unmounts exactly what exists.
  auto stage = [&](const ResolvedWorkspace& source, const std::string& staging,
                   const std::string& destination, bool read_only) -> absl::Status {
    RETURN_IF_ERROR(StageBind(source, staging, read_only));
    sb.staging.push_back(staging);
    spec.mounts.push_back({staging, destination, read_only});
    return absl::OkStatus();
  };
  for (size_t i = 0; i < plan.workspaces.size(); ++i) {
    const auto& m = request.mounts[i];
    if (m.empty) {
      // A directory of its own, owned by its run-as user, beneath the root-only bundle dir: no
      // one else reaches it, and it goes with the sandbox (RemoveBundle).
      std::string dir = absl::StrCat(mounts_dir, "/", kEmptyWorkspacePrefix, i);
      if (mkdir(dir.c_str(), 0700) != 0) return ErrnoStatus("mkdir", dir);
      sb.empty_dirs.push_back(dir);
      if (lchown(dir.c_str(), sb.uid, sb.gid) != 0) return ErrnoStatus("chown", dir);
      spec.mounts.push_back({dir, m.destination, /*read_only=*/false});
      if (i == 0) sb.first_workspace_dir = dir;
      continue;
    }
    std::string staging = absl::StrCat(mounts_dir, "/", i);
    RETURN_IF_ERROR(stage(plan.workspaces[i], staging, m.destination, m.read_only));
    if (i == 0) sb.first_workspace_dir = staging;
  }
  for (size_t i = 0; i < sb.secret_files.size(); ++i)
    spec.mounts.push_back({absl::StrCat(sb.bundle_dir, "/secret-file-", i), sb.secret_files[i].first,
                           /*read_only=*/true});
  if (!sb.secret_env.empty()) {
    // The sandbox's trust: its egress CA alone and the system bundle with it, written once the
    // proxy has answered (before runsc starts it), and again if the proxy restarts.
    for (const auto& [name, destination] : {std::pair<const char*, const char*>{"trust-ca.pem", kSandboxEgressCaPath},
                                            {"trust-bundle.crt", kSandboxCaBundlePath}}) {
      std::string path = absl::StrCat(sb.bundle_dir, "/", name);
      RETURN_IF_ERROR(WriteNewFile(path, "", 0644));
      sb.files.push_back(path);
      spec.mounts.push_back({path, destination, /*read_only=*/true});
    }
  }
  for (size_t i = 0; i < plan.credentials.size(); ++i) {
    const auto& c = request.credentials[i];
    RETURN_IF_ERROR(stage(plan.credentials[i], absl::StrCat(mounts_dir, "/credential-", c.name),
                          c.destination, c.read_only));
  }
  // Tools are always read-only: one root serves every sandbox of the deployment.
  for (size_t i = 0; i < plan.tools.size(); ++i) {
    const auto& t = request.tools[i];
    RETURN_IF_ERROR(stage(plan.tools[i], absl::StrCat(mounts_dir, "/tool-", t.name),
                          t.destination, /*read_only=*/true));
  }
  std::string config_path = sb.bundle_dir + "/config.json";
  RETURN_IF_ERROR(WriteNewFile(config_path, RenderOciConfig(spec)));
  sb.files.push_back(config_path);
  return absl::OkStatus();
}

kj::Promise<void> SandboxHost::StartContainer(const std::string& id, uint64_t generation) {
  Sandbox* sb = Find(id, generation);
  std::string bundle_dir = sb->bundle_dir;
  RunscNetwork network = sb->link ? RunscNetwork::kSandbox : RunscNetwork::kNone;
  // Counted as created before runsc is asked: a `run` that fails or times out part way may
  // leave a container, and the teardown below (kill, then `delete --force`, which takes "does
  // not exist" as done) removes whatever there is.
  sb->container_created = true;
  // `run --detach` is `create` then `start` in one runsc process, with the same flags and the
  // same bundle: one runsc start-up (~25-45 ms of Go initialisation here) fewer per sandbox
  // (docs/performance.md, "One-shot command"). Debian's runsc 20221219 sets up the sandbox's
  // network at start, so this process gets the network flag too.
  // The init is the spawner (WriteBundle): its channel is the init's stdin and stdout, which
  // runsc passes on to it. runsc's copies are the only ones the sandbox keeps.
  InitStdio init;
  auto to = MakePipe();
  auto from = MakePipe();
  bool with_spawner = spawner_io_ != nullptr && to.ok() && from.ok();
  if (with_spawner) {
    absl::Status keyed = NewSpawnerKey(*sb, true);
    if (!keyed.ok()) KJ_LOG(ERROR, "its spawner cannot be reattached", id, keyed.ToString());
    fcntl(from->read.get(), F_SETPIPE_SZ, 1 << 20);  // as StartSpawner's
    init = {to->read.get(), from->write.get()};
  }
  auto run = runsc_.Run({"run", "--detach", "--bundle", bundle_dir, id}, network, init);
  if (with_spawner) {
    to->read = nullptr;
    from->write = nullptr;
    OpenSpawnerChannel(*sb, kj::mv(to->write), kj::mv(from->read), true);
  }
  return kj::mv(run)
      .then([](RunscResult started) {
        return Settle(RunscStatus(started, absl::StatusCode::kInternal, "cannot start sandbox: "));
      })
      .then([this, id, generation]() -> kj::Promise<void> {
        Sandbox* sb = Find(id, generation);
        if (sb == nullptr || sb->deleting)
          return StatusToException(
              absl::FailedPreconditionError("sandbox was deleted while being created"));
        // Watched before it is reported created, so no death goes unseen, nor its status.
        WatchHostProcesses(*sb);
        sb->running = true;
        if (sb->spawner.get() == nullptr) {
          // Not waited for: until it says hello, processes are runsc execs.
          StartSpawner(*sb);
          return kj::READY_NOW;
        }
        // The init is the spawner: answered once it said hello (it does as it starts), so the
        // first process already starts through it; one that stays silent is taken down.
        return sb->spawner->Hello()
            .exclusiveJoin(timer_.afterDelay(kSpawnerHelloPatience))
            .then([this, id, generation]() -> kj::Promise<void> {
              Sandbox* sb = Find(id, generation);
              // A delete that came during the wait: the create does not answer success.
              if (sb == nullptr || sb->deleting)
                return StatusToException(
                    absl::FailedPreconditionError("sandbox was deleted while being created"));
              if (sb->spawner.get() != nullptr &&
                  sb->spawner->state() == SpawnerChannel::State::kStarting)
                sb->spawner->Fail("it did not say hello in time");
              return kj::READY_NOW;
            });
      })
      .catch_([this, id, generation](kj::Exception&& e) -> kj::Promise<void> {
        // Whatever failed (runsc, a spawn, a timeout): tear down what exists, then report.
        Sandbox* sb = Find(id, generation);
        if (sb == nullptr || sb->running) return kj::mv(e);
        return Destroy(id, generation)
            .catch_([](kj::Exception&& cleanup) {
              KJ_LOG(ERROR, "cleanup after a failed create failed", cleanup);
            })
            .then([e = kj::mv(e)]() mutable -> kj::Promise<void> { return kj::mv(e); });
      });
}

kj::Promise<void> SandboxHost::Sequenced(Sandbox& sb, kj::Function<kj::Promise<void>()> step) {
  kj::Promise<void> before = kj::READY_NOW;
  KJ_IF_MAYBE(last, sb.transitions) { before = last->addBranch(); }
  auto run = before.then([step = kj::mv(step)]() mutable { return step(); }).fork();
  sb.transitions = run.addBranch().catch_([](kj::Exception&&) {}).fork();
  return run.addBranch();
}

absl::StatusOr<kj::Promise<void>> SandboxHost::Pause(const ValidatedSandboxRef& request) {
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(request.sandbox_id, Need::kRunning));
  RETURN_IF_ERROR(RequireNotStopped(*sb));
  sb->paused = true;  // nothing new starts from now on, even before runsc has frozen it
  return Sequenced(*sb, [this, id = sb->id, gen = sb->generation] { return Freeze(id, gen); });
}

absl::StatusOr<kj::Promise<void>> SandboxHost::Resume(const ValidatedSandboxRef& request) {
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(request.sandbox_id, Need::kRunning));
  RETURN_IF_ERROR(RequireNotStopped(*sb));
  return Sequenced(*sb, [this, id = sb->id, gen = sb->generation] { return Thaw(id, gen); });
}

kj::Promise<void> SandboxHost::Freeze(const std::string& id, uint64_t generation) {
  Sandbox* sb = Find(id, generation);
  if (sb != nullptr && sb->frozen) return kj::READY_NOW;  // paused already
  if (sb == nullptr || sb->deleting)
    return StatusToException(absl::NotFoundError(absl::StrCat("sandbox ", id, " was deleted")));
  return runsc_.Run({"pause", id}).then([this, id, generation](RunscResult paused) {
    Sandbox* sb = Find(id, generation);
    if (sb == nullptr)
      return Settle(absl::NotFoundError(absl::StrCat("sandbox ", id, " was deleted")));
    if (paused.ok()) {
      sb->frozen = true;
      return Settle(absl::OkStatus());
    }
    sb->paused = sb->frozen;  // as before this pause
    absl::Status stopped = RequireNotStopped(*sb);
    return Settle(stopped.ok() ? RunscStatus(paused, absl::StatusCode::kInternal,
                                             "cannot pause sandbox: ")
                               : stopped);
  });
}

kj::Promise<void> SandboxHost::Thaw(const std::string& id, uint64_t generation) {
  Sandbox* sb = Find(id, generation);
  if (sb == nullptr || sb->deleting)
    return StatusToException(absl::NotFoundError(absl::StrCat("sandbox ", id, " was deleted")));
  kj::Promise<void> thawed = kj::READY_NOW;
  if (sb->frozen) {
    thawed = runsc_.Run({"resume", id}).then([this, id, generation](RunscResult resumed) {
      Sandbox* sb = Find(id, generation);
      if (sb == nullptr)
        return Settle(absl::NotFoundError(absl::StrCat("sandbox ", id, " was deleted")));
      if (resumed.ok()) sb->frozen = false;
      absl::Status stopped = RequireNotStopped(*sb);
      return Settle(resumed.ok() || !stopped.ok()
                        ? stopped
                        : RunscStatus(resumed, absl::StatusCode::kInternal,
                                      "cannot resume sandbox: "));
    });
  }
  return thawed.then([this, id, generation] {
    if (Sandbox* sb = Find(id, generation)) sb->paused = false;
    return SendQueuedSignals(id, generation);
  });
}

kj::Promise<void> SandboxHost::SendQueuedSignals(const std::string& id, uint64_t generation) {
  Sandbox* sb = Find(id, generation);
  if (sb == nullptr || sb->paused || sb->queued_signals.empty()) return kj::READY_NOW;
  auto [process_id, sig] = sb->queued_signals.front();
  sb->queued_signals.erase(sb->queued_signals.begin());
  kj::Promise<void> sent = kj::READY_NOW;
  auto it = sb->processes.find(process_id);
  if (it != sb->processes.end() && !it->second->exited) {
    // A process that ended meanwhile needs no signal; a failed one does not fail the resume.
    sent = Kill(id, generation, process_id, sig, timer_.now() + kPidPatience)
               .catch_([id, process_id = process_id](kj::Exception&& e) {
                 KJ_LOG(WARNING, "a signal queued while paused failed", id, process_id, e);
               });
  }
  return sent.then([this, id, generation] { return SendQueuedSignals(id, generation); });
}

absl::StatusOr<kj::Promise<kj::AutoCloseFd>> SandboxHost::ConnectPort(
    const ValidatedConnect& request) {
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(request.sandbox_id, Need::kRunning));
  RETURN_IF_ERROR(RequireNotStopped(*sb));
  if (sb->paused)
    return absl::FailedPreconditionError(absl::StrCat("sandbox ", sb->id, " is paused"));
  // The profile the sandbox runs decides, from the root-owned config; the broker's word counts
  // for nothing here.
  const config::LaunchProfile::Reader* profile = config_.FindProfile(sb->profile);
  if (profile == nullptr || profile->getNetwork().getMode() != config::NetworkMode::SANDBOX)
    return absl::FailedPreconditionError("sandbox has no network");
  bool allowed = false;
  for (uint16_t port : profile->getNetwork().getInboundPorts()) allowed |= port == request.port;
  if (!allowed)
    return absl::PermissionDeniedError(absl::StrCat(
        "port ", request.port, " is not in the profile's network.inboundPorts"));
  // Mode sandbox without a namespace: its network was never set up (or is gone).
  if (!sb->link || networks_ == nullptr) return absl::FailedPreconditionError("sandbox has no network");
  if (ports_ == nullptr) return absl::UnavailableError("connections are not available here");
  // From the host's end of its link: gVisor takes the sandbox-side address off the veth, so
  // the sandbox's namespace has no route to it; the connection is marked so the firewall lets
  // it (and only it) into the link.
  return ports_->Connect(absl::StrCat("/proc/self/fd/", networks_->host_ns_fd()),
                         sb->link->sandbox_addr, request.port);
}

absl::Status SandboxHost::RequireNotStopped(const Sandbox& sb) {
  if (sb.stopped)
    return absl::FailedPreconditionError(
        absl::StrCat("sandbox ", sb.id, " is stopped: ", sb.stop_reason));
  if (sb.oom_killed)
    return absl::FailedPreconditionError(
        absl::StrCat("sandbox ", sb.id, " is oom-killed: ", kOomKilledSandboxReason));
  return absl::OkStatus();
}

absl::StatusOr<kj::Promise<SandboxHost::Stop>> SandboxHost::WaitStopped(
    const ValidatedSandboxRef& request) {
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(request.sandbox_id, Need::kAny));
  return sb->stop.addBranch();
}

void SandboxHost::MarkStopped(Sandbox& sb, std::string reason, bool oom_killed) {
  if (sb.stop_known) return;
  // A delete's own kill is seen here too: that is no news.
  if (!sb.deleting) KJ_LOG(WARNING, "sandbox stopped", sb.id, reason);
  sb.stopped = true;
  sb.stop_known = true;
  sb.stop_reason = std::move(reason);
  sb.oom_killed = sb.oom_killed || oom_killed;
  sb.stop_fulfiller->fulfill(Stop{sb.stop_reason, sb.oom_killed});
}

void SandboxHost::WatchHostProcesses(Sandbox& sb) {
  std::string cgroup = SandboxCgroup(config_.helper().getCgroupParent().cStr(), sb.id);
  std::string state_file = absl::StrCat(config_.helper().getRunDir().cStr(), "/runsc/", sb.id,
                                        "_sandbox:", sb.id, ".state");
  HostPids pids = ReadHostPids(state_file);
  if (pids.sentry <= 0) {
    // Not knowing is not stopping: a sandbox is never marked dead because a file was unreadable.
    KJ_LOG(ERROR, "cannot watch a sandbox: no sentry pid in runsc's state file", sb.id,
           state_file);
    return;
  }
  auto sentry = watcher_.Watch(pids.sentry, cgroup);
  if (!sentry.ok()) {
    KJ_LOG(ERROR, "cannot watch a sandbox", sb.id, sentry.status().ToString());
    return;
  }
  if (sentry->get() == nullptr) {
    // It died between its start and now: there is no status to wait for.
    bool oom = ReadOomKillCount(cgroup, cgroup_root_).value_or(0) > 0;
    MarkStopped(sb, oom ? kOomKilledSandboxReason : kSentryExited, oom);
    MarkHalted(sb);
    return;
  }
  sb.halt_watched = true;
  kj::Own<WatchedProcess> gofer;
  auto watched_gofer = watcher_.Watch(pids.gofer, cgroup);
  if (watched_gofer.ok() && watched_gofer->get() != nullptr) {
    gofer = kj::mv(*watched_gofer);
  } else {
    // The sentry ends with its gofer (measured), so the sandbox is still watched.
    KJ_LOG(WARNING, "cannot watch a sandbox's gofer; watching its sentry only", sb.id);
  }
  // OOM kills counted before now are not this stop's cause.
  uint64_t ooms_before = ReadOomKillCount(cgroup, cgroup_root_).value_or(0);
  auto sentry_exit = (*sentry)->Exited().fork();
  // Nothing runs in it once its sentry is gone: a delete answers then (decision 39).
  kj::Promise<void> halt = sentry_exit.addBranch().then([this, id = sb.id, gen = sb.generation] {
    if (Sandbox* sb = Find(id, gen)) MarkHalted(*sb);
  }).eagerlyEvaluate(nullptr);  // a join runs its parts' continuations only once all are ready
  kj::Promise<bool> sentry_first = sentry_exit.addBranch().then([] { return true; });
  if (gofer.get() != nullptr)
    sentry_first = sentry_first.exclusiveJoin(gofer->Exited().then([] { return false; }));
  WatchedProcess* s = sentry->get();
  WatchedProcess* g = gofer.get();
  std::string id = sb.id;
  uint64_t generation = sb.generation;
  auto stop =
      sentry_first
          .then([this, id, generation, cgroup, ooms_before, s, g](bool first) {
            Sandbox* sb = Find(id, generation);
            if (sb == nullptr) return kj::Promise<void>(kj::READY_NOW);
            // Read at once: the cgroup goes when the sandbox is deleted.
            bool oom = ReadOomKillCount(cgroup, cgroup_root_).value_or(0) > ooms_before;
            // Nothing new starts in it from now on; the reason waits for the statuses.
            sb->stopped = true;
            sb->stop_reason = oom ? kOomKilledSandboxReason : first ? kSentryExited : kGoferExited;
            auto statuses = kj::heapArrayBuilder<kj::Promise<std::optional<int>>>(2);
            statuses.add(s->Status(kExitStatusPatience));
            statuses.add(g != nullptr ? g->Status(kExitStatusPatience)
                                      : kj::Promise<std::optional<int>>(std::optional<int>()));
            return kj::joinPromises(statuses.finish())
                .then([this, id, generation, oom, first](kj::Array<std::optional<int>> status) {
                  if (Sandbox* sb = Find(id, generation)) {
                    MarkStopped(*sb,
                                oom ? kOomKilledSandboxReason
                                    : DescribeStop(first, status[0], status[1]),
                                oom);
                  }
                });
          });
  auto both = kj::heapArrayBuilder<kj::Promise<void>>(2);
  both.add(kj::mv(halt));
  both.add(kj::mv(stop));
  sb.watch = kj::joinPromises(both.finish())
          .attach(kj::mv(*sentry), kj::mv(gofer))
          .eagerlyEvaluate([id](kj::Exception&& e) {
            KJ_LOG(ERROR, "watching a sandbox failed", id, e);
          });
}

void SandboxHost::DescribeNetwork(const std::string& sandbox_id,
                                  api::NetworkInfo::Builder out) const {
  auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end()) return;
  const Sandbox& sb = *it->second;
  out.setMode(sb.link ? "sandbox" : "none");
  if (!sb.link) return;
  out.setAddress(network::FormatIpv4(sb.link->sandbox_addr));
  auto ports = out.initInboundPorts(static_cast<unsigned>(sb.inbound_ports.size()));
  for (unsigned i = 0; i < sb.inbound_ports.size(); ++i) ports.set(i, sb.inbound_ports[i]);
  // The rules its resolver applies: the profile's, as configured now (an adopted sandbox's
  // resolver is set up from the same).
  if (const config::LaunchProfile::Reader* profile = config_.FindProfile(sb.profile)) {
    auto rules = profile->getNetwork().getAllowNames();
    auto names = out.initAllowNames(rules.size());
    for (unsigned i = 0; i < rules.size(); ++i) {
      names[i].setName(rules[i].getName());
      names[i].setPorts(rules[i].getPorts());
    }
  }
}

void SandboxHost::DescribePaths(const std::string& sandbox_id,
                                api::SandboxPaths::Builder out) const {
  auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end()) return;
  const Sandbox& sb = *it->second;
  auto tools = out.initToolDirectories(static_cast<unsigned>(sb.tool_path.size()));
  for (unsigned i = 0; i < sb.tool_path.size(); ++i) tools.set(i, sb.tool_path[i]);
  auto kept = out.initKept(static_cast<unsigned>(sb.kept.size()));
  for (unsigned i = 0; i < sb.kept.size(); ++i) kept.set(i, sb.kept[i]);
  out.setHome(sb.home);
}

const network::SandboxLink* SandboxHost::LinkOf(const std::string& sandbox_id) const {
  auto it = sandboxes_.find(sandbox_id);
  if (it == sandboxes_.end() || !it->second->running || !it->second->link) return nullptr;
  return &*it->second->link;
}

std::vector<SandboxHost::Usage> SandboxHost::SandboxUsage(const std::vector<std::string>& ids) const {
  auto opened = service_ != nullptr
                    ? absl::StatusOr<ServiceCgroup>(*service_)
                    : ServiceCgroup::Open(cgroup_root_, config_.helper().getCgroupParent().cStr());
  std::map<std::string, network::LinkCounters> links;
  bool any_link = false;
  for (const std::string& id : ids) {
    auto it = sandboxes_.find(id);
    any_link |= it != sandboxes_.end() && it->second->link.has_value();
  }
  if (any_link && networks_ != nullptr) {
    auto read = network::ReadLinkCounters(networks_->host_ns_fd(), network::kHostIfnamePrefix);
    if (read.ok()) links = std::move(*read);
  }
  std::vector<Usage> out;
  for (const std::string& id : ids) {
    auto it = sandboxes_.find(id);
    if (it == sandboxes_.end()) continue;
    const Sandbox& sb = *it->second;
    Usage& u = out.emplace_back();
    u.sandbox_id = id;
    if (opened.ok() && !sb.deleting && !sb.stopped) {
      auto cgroup = opened->Usage(id);
      if (cgroup.ok()) {
        u.measured = true;
        u.cgroup = *cgroup;
      }
    }
    if (sb.link) {
      u.networked = true;
      auto counters = links.find(sb.link->host_ifname);
      if (counters != links.end()) {
        // The host end's view: what it transmitted reached the sandbox.
        u.network_in_bytes = counters->second.tx_bytes;
        u.network_out_bytes = counters->second.rx_bytes;
      }
    }
  }
  return out;
}

CgroupUsage SandboxHost::ServiceUsage() const {
  auto opened = service_ != nullptr
                    ? absl::StatusOr<ServiceCgroup>(*service_)
                    : ServiceCgroup::Open(cgroup_root_, config_.helper().getCgroupParent().cStr());
  if (!opened.ok()) return {};
  return opened->Usage("").value_or(CgroupUsage{});
}

}  // namespace paseo
