// See sandbox_host.h.
#include "privhelper/sandbox_host.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
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

namespace paseo {
namespace {

// Writes a file the privhelper generated, root-only, refusing to follow or reuse anything.
absl::Status WriteNewFile(const std::string& path, const std::string& content,
                          mode_t mode = 0600) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return ErrnoStatus("create", path);
  kj::AutoCloseFd owned(fd);
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus("write", path);
    }
    done += static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

struct Pipe {
  kj::AutoCloseFd read, write;
};

absl::StatusOr<Pipe> MakePipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return ErrnoStatus("pipe2", "");
  return Pipe{kj::AutoCloseFd(fds[0]), kj::AutoCloseFd(fds[1])};
}

// A close-on-exec duplicate (above stdio), or no fd for no fd.
kj::AutoCloseFd Dup(const kj::AutoCloseFd& fd) {
  return fd.get() < 0 ? kj::AutoCloseFd() : kj::AutoCloseFd(fcntl(fd.get(), F_DUPFD_CLOEXEC, 3));
}

// Ok if runsc succeeded; else an error of `code` whose message ends with what runsc said.
absl::Status RunscStatus(const RunscResult& result, absl::StatusCode code,
                         absl::string_view context) {
  if (result.ok()) return absl::OkStatus();
  return absl::Status(code, absl::StrCat(context, result.Describe()));
}

// The host's asynchronous errors carry the same reason tokens as its synchronous ones.
kj::Promise<void> Settle(const absl::Status& status) {
  if (status.ok()) return kj::READY_NOW;
  return StatusToException(status);
}

// The pid `runsc exec` wrote for its process (inside the sandbox's pid namespace).
absl::StatusOr<long> ReadInternalPid(const std::string& pid_file) {
  std::ifstream in(pid_file);
  long pid = 0;
  if (!(in >> pid) || pid <= 0) return absl::UnavailableError("process is still starting; retry");
  return pid;
}

// What a restarted privhelper reads to know what a surviving container is.
std::string RenderRecord(const std::string& id, const std::string& deployment,
                         const std::string& profile, uid_t uid, gid_t gid,
                         const std::string& default_cwd, const std::string& home,
                         int64_t created_ms, const std::string& network_block,
                         const std::vector<std::string>& kept, bool deleting = false) {
  capnp::MallocMessageBuilder message;
  auto record = message.initRoot<records::SandboxRecord>();
  record.setId(id);
  record.setDeploymentId(deployment);
  record.setProfile(profile);
  record.setUid(uid);
  record.setGid(gid);
  record.setDefaultCwd(default_cwd);
  record.setHome(home);
  record.setCreatedAtUnixMs(created_ms);
  record.setNetworkBlock(network_block);
  record.setDeleting(deleting);
  auto k = record.initKept(static_cast<unsigned>(kept.size()));
  for (unsigned i = 0; i < kept.size(); ++i) k.set(i, kept[i]);
  capnp::JsonCodec codec;
  auto text = codec.encode(record.asReader());
  return std::string(text.cStr(), text.size());
}

absl::StatusOr<records::SandboxRecord::Reader> ReadRecord(const std::string& path,
                                                          capnp::MallocMessageBuilder& message) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(path + ": no record");
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  capnp::JsonCodec codec;
  auto root = message.initRoot<records::SandboxRecord>();
  auto error = kj::runCatchingExceptions(
      [&] { codec.decode(kj::ArrayPtr<const char>(s.data(), s.size()), root); });
  if (error != nullptr) return absl::InvalidArgumentError(path + ": unreadable record");
  return root.asReader();
}

int64_t NowUnixMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A JSON object's top-level fields (capnp's codec, as for `runsc list`); nullopt if `text` is
// not one.
std::optional<std::map<std::string, capnp::JsonValue::Reader>> JsonFields(
    const std::string& text, capnp::MallocMessageBuilder& message) {
  auto root = message.initRoot<capnp::JsonValue>();
  capnp::JsonCodec codec;
  auto error = kj::runCatchingExceptions(
      [&] { codec.decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), root); });
  if (error != nullptr || !root.isObject()) return std::nullopt;
  std::map<std::string, capnp::JsonValue::Reader> fields;
  for (auto field : root.asReader().getObject())
    fields.emplace(field.getName().cStr(), field.getValue());
  return fields;
}

// A sandbox's two host processes, from runsc's own record of the container,
// <runsc root>/<id>_sandbox:<id>.state (root-only, written by the pinned runsc): "sandbox":
// {"pid": N} is the sentry (runsc-sandbox `boot`; `runsc state` reports the same pid, measured
// on 20221219) and "goferPid" the gofer, which `runsc state` does not report. Read from the file
// because a `runsc state` costs a runsc process, about 30 ms on the create path. 0 for what is
// not there; the pids are checked against the sandbox's cgroup before they are believed.
struct HostPids {
  pid_t sentry = 0;
  pid_t gofer = 0;
};

HostPids ReadHostPids(const std::string& state_file) {
  std::ifstream in(state_file);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  HostPids pids;
  if (text.size() > (1 << 20)) return pids;
  capnp::MallocMessageBuilder message;
  auto fields = JsonFields(text, message);
  if (!fields) return pids;
  auto number = [](std::map<std::string, capnp::JsonValue::Reader>& f, const char* name) {
    auto it = f.find(name);
    return it != f.end() && it->second.isNumber() ? static_cast<pid_t>(it->second.getNumber()) : 0;
  };
  pids.gofer = number(*fields, "goferPid");
  auto sandbox = fields->find("sandbox");
  if (sandbox != fields->end() && sandbox->second.isObject()) {
    std::map<std::string, capnp::JsonValue::Reader> inner;
    for (auto f : sandbox->second.getObject()) inner.emplace(f.getName().cStr(), f.getValue());
    pids.sentry = number(inner, "pid");
  }
  return pids;
}

constexpr char kSentryExited[] = "its gVisor kernel (runsc-sandbox) exited";
constexpr char kGoferExited[] = "its gVisor file server (runsc-gofer) exited";

// " (killed by signal 9)", " (exit status 2)", or "" if the status is unknown.
std::string DescribeWaitStatus(std::optional<int> status) {
  if (!status) return "";
  if (WIFSIGNALED(*status)) return absl::StrCat(" (killed by signal ", WTERMSIG(*status), ")");
  if (WIFEXITED(*status)) return absl::StrCat(" (exit status ", WEXITSTATUS(*status), ")");
  return "";
}

// Why a sandbox stopped, from which of its processes was seen to exit first and their statuses.
// Either one's death takes the other (measured: a killed sentry's gofer exits 0 within 3 ms; a
// killed gofer's sentry exits 137), so both may be seen at once, in either order: a killed one
// is the cause rather than one that exited by itself.
std::string DescribeStop(bool sentry_first, std::optional<int> sentry, std::optional<int> gofer) {
  auto killed = [](std::optional<int> s) { return s && WIFSIGNALED(*s); };
  bool sentry_caused = sentry_first ? !(killed(gofer) && !killed(sentry))
                                    : killed(sentry) && !killed(gofer);
  return sentry_caused ? absl::StrCat(kSentryExited, DescribeWaitStatus(sentry))
                       : absl::StrCat(kGoferExited, DescribeWaitStatus(gofer));
}

}  // namespace

// ---------------------------------------------------------------- records and lookups

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

// ---------------------------------------------------------------- create

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

absl::StatusOr<kj::Promise<void>> SandboxHost::Create(ValidatedCreate request) {
  if (Find(request.sandbox_id) != nullptr)
    return absl::AlreadyExistsError(absl::StrCat("sandbox ", request.sandbox_id, " exists"));
  std::string deployment_id = request.deployment->getId().cStr();
  RETURN_IF_ERROR(CheckCapacity(*request.deployment));
  ASSIGN_OR_RETURN(CreatePlan plan, PlanCreate(request));
  config::NetworkPolicy::Reader policy = request.profile->getNetwork();
  bool sandbox_network = policy.getMode() == config::NetworkMode::SANDBOX;
  if (sandbox_network && networks_ == nullptr)
    return absl::FailedPreconditionError("network mode \"sandbox\" is not set up on this host");
  // Without the privhelper's resolver a sandbox would have no DNS, and its host end's port 53
  // nobody we know of to answer: refused, as when networking is not set up.
  if (sandbox_network && dns_ == nullptr)
    return absl::FailedPreconditionError(
        "network mode \"sandbox\" has no DNS resolver on this host: set network.dnsUpstreams in "
        "the privhelper's config (no usable nameserver in /etc/resolv.conf)");

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
  }
  RETURN_IF_ERROR(WriteBundle(sb, request, plan));
  std::move(forget).Cancel();
  return StartContainer(sb.id, sb.generation);
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

// ---------------------------------------------------------------- processes

absl::StatusOr<SandboxHost::Stdio> SandboxHost::StartProcess(const ValidatedStart& request) {
  const std::string& process_id = request.process.process_id;
  const ProcessCommand& command = request.command;
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(request.process.sandbox_id, Need::kRunning));
  RETURN_IF_ERROR(RequireNotStopped(*sb));
  if (sb->paused)
    return absl::FailedPreconditionError(absl::StrCat("sandbox ", sb->id, " is paused"));
  if (sb->processes.count(process_id))
    return absl::AlreadyExistsError(absl::StrCat("process ", process_id, " exists"));
  size_t running = 0;
  for (const auto& [id, p] : sb->processes) running += p->exited ? 0 : 1;
  if (running >= max_processes_)
    return absl::ResourceExhaustedError("too many processes running in this sandbox");

  ExecSpec exec;
  ASSIGN_OR_RETURN(exec.cwd, WorkingDirectory(*sb, command));
  // Looked up apart from the environment, so an exact one stays exact (common/search_path.h);
  // without exactEnv, PATH itself carries the same directories and runsc's lookup agrees.
  std::string search_path = SearchPath(sb->tool_path, command.env);
  std::vector<std::string> argv = ShimExecArgv(command.env, command.argv, search_path,
                                              command.exact_env, command.report_unkept);
  exec.argv = command.tty ? TtyArgv(command.rows, command.cols, argv) : argv;
  exec.shim_env = ShimEnv(exec.argv, search_path, command.report_unkept);
  exec.exact_env = command.exact_env;
  exec.tty = command.tty;
  exec.env = command.env;
  exec.path_prefix = sb->tool_path;
  exec.home = sb->home;
  exec.kept = sb->kept;
  exec.uid = sb->uid;
  exec.gid = sb->gid;
  StartSpawner(*sb);  // an adopted sandbox gets its spawner at its first process
  if (auto through = StartThroughSpawner(*sb, process_id, command, exec))
    return kj::mv(*through);

  auto in = MakePipe();
  auto out = MakePipe();
  auto err = MakePipe();
  if (!in.ok() || !out.ok() || !err.ok()) return absl::ResourceExhaustedError("out of pipes");
  // A tty process has one stream: the relay's (and runsc's own) stderr joins the terminal's
  // output, and the stderr pipe the broker gets is at end-of-file from the start.
  ASSIGN_OR_RETURN(
      RunscExecStarted started,
      StartRunscExec(*sb, process_id, exec, in->read.get(), out->write.get(),
                     command.tty ? out->write.get() : err->write.get()));
  Process& p = Track(*sb, process_id, kj::mv(started.exit));
  p.pid_file = started.pid_file;
  p.process_json = started.process_json;
  // Our copies of the child's ends close here.
  return KeepCopies(p, command, Stdio{kj::mv(in->write), kj::mv(out->read), kj::mv(err->read)});
}

absl::StatusOr<SandboxHost::RunscExecStarted> SandboxHost::StartRunscExec(
    Sandbox& sb, const std::string& process_id, const ExecSpec& exec, int in, int out, int err) {
  std::string process_json = absl::StrCat(sb.bundle_dir, "/process-", process_id, ".json");
  std::string pid_file = absl::StrCat(sb.bundle_dir, "/process-", process_id, ".pid");
  RETURN_IF_ERROR(WriteNewFile(process_json, RenderProcessJson(exec)));
  sb.files.push_back(process_json);
  sb.files.push_back(pid_file);
  // runsc logs the process's raw wait status here (exit_status.h).
  kj::AutoCloseFd exec_log(memfd_create("runsc-exec-log", MFD_CLOEXEC));
  if (exec_log.get() < 0) return absl::ResourceExhaustedError("out of file descriptors");
  ASSIGN_OR_RETURN(kj::Promise<int> runsc_exit,
                   runsc_.Start({"exec", "--process", process_json, "--internal-pid-file",
                                 pid_file, sb.id},
                                RunscStdio{in, out, err, exec_log.get()}));
  return RunscExecStarted{RunscExecEnd(kj::mv(runsc_exit), kj::mv(exec_log)), pid_file,
                          process_json};
}

absl::StatusOr<SandboxHost::Stdio> SandboxHost::KeepCopies(Process& p, const ProcessCommand& command,
                                                           Stdio stdio) {
  p.argv = command.argv;
  p.tty = command.tty;
  // Copies of the broker's ends: if the broker dies, its successor takes them over (while
  // it is down, the process blocks on a full pipe; nothing is lost).
  p.kept_stdin = Dup(stdio.stdin_w);
  p.kept_stdout = Dup(stdio.stdout_r);
  p.kept_stderr = Dup(stdio.stderr_r);
  if (p.kept_stdin.get() < 0 || p.kept_stdout.get() < 0 || p.kept_stderr.get() < 0)
    return absl::ResourceExhaustedError("out of file descriptors");
  return stdio;
}

absl::StatusOr<std::string> SandboxHost::WorkingDirectory(const Sandbox& sb,
                                                          const ProcessCommand& command) {
  if (!command.workspace_cwd.has_value())
    return command.cwd.empty() ? sb.default_cwd : command.cwd;
  if (sb.default_cwd == "/")
    return absl::InvalidArgumentError("workspaceCwd: the sandbox has no workspace");
  const std::string& relative = *command.workspace_cwd;
  // Checked on the host, beneath the staged bind the sandbox sees at default_cwd; the same path
  // is then handed to runsc, so the sandbox's kernel resolves what was checked.
  RETURN_IF_ERROR(CheckWorkspaceCwdBeneath(sb.first_workspace_dir, relative));
  std::string cwd = relative.empty() ? sb.default_cwd : absl::StrCat(sb.default_cwd, "/", relative);
  if (cwd.size() > kMaxWorkspaceCwdBytes)
    return absl::InvalidArgumentError(
        "workspaceCwd: longer than 4095 bytes with the workspace's destination");
  return cwd;
}

std::vector<std::string> SandboxHost::ToolPath(const std::string& profile) const {
  std::vector<std::string> path;
  if (const config::LaunchProfile::Reader* p = config_.FindProfile(profile)) {
    for (auto t : p->getTools()) path.emplace_back(t.getDestination().cStr());
  }
  return path;
}

// ---------------------------------------------------------------- the spawner

void SandboxHost::StartSpawner(Sandbox& sb) {
  if (spawner_io_ == nullptr || sb.spawner.get() != nullptr || !sb.spawner_down.empty() ||
      !sb.running || sb.deleting || sb.stopped || sb.paused)
    return;
  // The same process spec as any process of the sandbox (its run-as user, no capabilities,
  // no_new_privs, its limits): what the spawner forks can do no more than a runsc exec could.
  ExecSpec exec;
  exec.argv = {kShimPath, "spawner"};
  exec.uid = sb.uid;
  exec.gid = sb.gid;
  exec.home = sb.home;
  exec.path_prefix = sb.tool_path;
  std::string json = sb.bundle_dir + "/spawner.json";
  sb.spawner_pid_file = sb.bundle_dir + "/spawner.pid";
  for (const std::string& file : {json, sb.spawner_pid_file}) {
    unlink(file.c_str());  // an adopted sandbox's, from the previous privhelper
    std::erase(sb.files, file);
    sb.files.push_back(file);
  }
  auto fail = [&sb](absl::Status why) {
    sb.spawner_down = absl::StrCat("cannot start it: ", why.message());
    KJ_LOG(ERROR, "cannot start a sandbox's spawner", sb.id, why.ToString());
  };
  absl::Status written = WriteNewFile(json, RenderProcessJson(exec));
  if (!written.ok()) return fail(written);
  auto to = MakePipe();
  auto from = MakePipe();
  kj::AutoCloseFd errors(memfd_create("spawner-stderr", MFD_CLOEXEC));
  kj::AutoCloseFd exec_log(memfd_create("runsc-exec-log", MFD_CLOEXEC));
  if (!to.ok() || !from.ok() || errors.get() < 0 || exec_log.get() < 0)
    return fail(absl::ResourceExhaustedError("out of file descriptors"));
  // Room for a few output frames at once, so the spawner rarely waits on the host pipe (a
  // failure only leaves the default 64 KiB).
  fcntl(from->read.get(), F_SETPIPE_SZ, 1 << 20);
  auto runsc_exit = runsc_.Start(
      {"exec", "--process", json, "--internal-pid-file", sb.spawner_pid_file, sb.id},
      RunscStdio{to->read.get(), from->write.get(), errors.get(), exec_log.get()});
  if (!runsc_exit.ok()) return fail(runsc_exit.status());
  std::string id = sb.id;
  uint64_t generation = sb.generation;
  OpenSpawnerChannel(sb, kj::mv(to->write), kj::mv(from->read), false);
  // Reaped whatever becomes of the sandbox; its end takes the channel down with a reason.
  auto ended = runsc_exit->fork();
  reaper_.add(ended.addBranch().ignoreResult());
  reaper_.add(ended.addBranch().then(
      [this, id, generation, errors = kj::mv(errors)](int status) {
        Sandbox* sb = Find(id, generation);
        if (sb == nullptr || sb->spawner.get() == nullptr) return;
        std::string said = ReadMemfd(errors.get());
        while (!said.empty() && (said.back() == '\n' || said.back() == ' ')) said.pop_back();
        if (said.size() > 500) said = said.substr(said.size() - 500);
        sb->spawner->Fail(absl::StrCat("its runsc exec ended (",
                                       WIFSIGNALED(status) ? absl::StrCat("signal ", WTERMSIG(status))
                                                           : absl::StrCat("exit status ", WEXITSTATUS(status)),
                                       ")", said.empty() ? "" : ": ", said));
      }));
}

void SandboxHost::OpenSpawnerChannel(Sandbox& sb, kj::AutoCloseFd to_spawner,
                                     kj::AutoCloseFd from_spawner, bool is_init) {
  std::string id = sb.id;
  uint64_t generation = sb.generation;
  sb.spawner_is_init = is_init;
  sb.spawner = kj::heap<SpawnerChannel>(
      *spawner_io_, kj::mv(to_spawner), kj::mv(from_spawner),
      [this, id, generation, is_init](std::string why) {
        Sandbox* sb = Find(id, generation);
        if (sb == nullptr) return;
        sb->spawner_down = why;
        // A spawner that broke the protocol may still run: it goes (its children with it). An
        // init spawner stays: it sees its channel end, kills what it started and is a plain
        // init from then on (killing it would end the sandbox).
        if (!is_init && sb->running && !sb->frozen && !sb->deleting) {
          if (auto pid = ReadInternalPid(sb->spawner_pid_file); pid.ok())
            reaper_.add(runsc_.Run({"kill", absl::StrCat("--pid=", *pid), id, "KILL"}).ignoreResult());
        }
      });
}

std::optional<absl::StatusOr<SandboxHost::Stdio>> SandboxHost::StartThroughSpawner(
    Sandbox& sb, const std::string& process_id, const ProcessCommand& command,
    const ExecSpec& exec) {
  if (sb.spawner.get() == nullptr || sb.spawner->state() != SpawnerChannel::State::kUp)
    return std::nullopt;
  const std::string& cwd = exec.cwd;
  // What runsc exec would have been given: the relay for a terminal, the environment
  // RenderProcessJson writes (the spawner adds nothing, so an exact one needs no `shim exec`).
  spawner::StartRequest request;
  request.merge_stderr = command.tty;
  request.cwd = cwd;
  request.search_path = SearchPath(sb.tool_path, command.env);
  std::vector<std::string> argv =
      ShimExecArgv(command.env, command.argv, request.search_path, command.exact_env,
                   command.report_unkept, /*runsc_exec=*/false);
  request.argv = command.tty ? TtyArgv(command.rows, command.cols, argv) : argv;
  request.env =
      ProcessEnv(command.env, command.tty, sb.tool_path, command.exact_env, sb.home, sb.kept);
  for (auto& e : ShimEnv(request.argv, request.search_path, command.report_unkept))
    request.env.push_back(std::move(e));
  // A working directory its user may not enter: runsc exec's sentry sets it all the same (no
  // search check), the spawner's chdir cannot, so runsc exec starts it on the same pipes.
  std::string id = sb.id;
  uint64_t generation = sb.generation;
  auto refused = [this, id, generation, process_id, exec](int in, int out, int err)
      -> absl::StatusOr<kj::Promise<ProcessExit>> {
    Sandbox* sb = Find(id, generation);
    if (sb == nullptr || !sb->running) return absl::FailedPreconditionError("sandbox gone");
    auto it = sb->processes.find(process_id);
    if (it == sb->processes.end()) return absl::NotFoundError("process gone");
    ASSIGN_OR_RETURN(RunscExecStarted started,
                     StartRunscExec(*sb, process_id, exec, in, out, err));
    it->second->spawner_id = 0;  // signals go through runsc from now on
    it->second->pid_file = started.pid_file;
    it->second->process_json = started.process_json;
    return kj::mv(started.exit);
  };
  auto started = sb.spawner->Start(request, SpawnerChannel::ChdirRefused(kj::mv(refused)));
  if (!started.ok()) {
    // Too large for a frame, or the spawner went down just now: runsc exec starts it.
    if (started.status().code() == absl::StatusCode::kInvalidArgument ||
        started.status().code() == absl::StatusCode::kUnavailable)
      return std::nullopt;
    return absl::StatusOr<Stdio>(started.status());
  }
  Process& p = Track(sb, process_id, kj::mv(started->exit));
  p.spawner_id = started->id;
  return KeepCopies(
      p, command,
      Stdio{kj::mv(started->stdin_w), kj::mv(started->stdout_r), kj::mv(started->stderr_r)});
}

absl::StatusOr<std::string> SandboxHost::SpawnerState(const ValidatedSandboxRef& request) {
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(request.sandbox_id, Need::kAny));
  if (spawner_io_ == nullptr) return std::string("off");
  if (!sb->spawner_down.empty()) return absl::StrCat("down: ", sb->spawner_down);
  if (sb->spawner.get() == nullptr) return std::string("not started");
  return std::string(sb->spawner->state() == SpawnerChannel::State::kUp ? "running" : "starting");
}

kj::Promise<ProcessExit> SandboxHost::RunscExecEnd(kj::Promise<int> runsc_exit,
                                                   kj::AutoCloseFd exec_log) {
  return runsc_exit.then([log = kj::mv(exec_log)](int runsc_status) {
    // No OOM here: Track decides that for every way a process ends.
    return DecideProcessExit(runsc_status, ReadMemfd(log.get()), false);
  });
}

SandboxHost::Process& SandboxHost::Track(Sandbox& sb, const std::string& process_id,
                                         kj::Promise<ProcessExit> exit) {
  std::string cgroup = SandboxCgroup(config_.helper().getCgroupParent().cStr(), sb.id);
  // OOM kills counted before this process started are not its end.
  uint64_t ooms_before = ReadOomKillCount(cgroup, cgroup_root_).value_or(0);
  auto ended = exit.then([cgroup, root = cgroup_root_, ooms_before](ProcessExit end) {
    if (end.kind != ProcessExit::kUnknown) return end;
    // Read at once: the cgroup goes when the sandbox is deleted.
    auto ooms = ReadOomKillCount(cgroup, root);
    return ooms.value_or(0) > ooms_before ? ProcessExit::OomKilled() : end;
  });
  auto process = kj::refcounted<Process>(kj::mv(ended));
  Process* raw = process.get();
  // Owned by the process record, so the raw pointer cannot outlive it.
  process->watcher = process->exit.addBranch()
                         .then([this, raw, id = sb.id, gen = sb.generation](ProcessExit end) {
                           raw->exited = true;
                           raw->kept_stdin = nullptr;  // nobody can write to it any more
                           if (end.kind == ProcessExit::kOomKilled) {
                             // Remembered for a restarted broker's inventory.
                             if (Sandbox* s = Find(id, gen)) s->oom_killed = true;
                           }
                         })
                         .eagerlyEvaluate(nullptr);
  sb.processes.emplace(process_id, kj::mv(process));
  return *raw;
}

absl::StatusOr<kj::Promise<ProcessExit>> SandboxHost::Wait(const ValidatedProcessRef& request) {
  ASSIGN_OR_RETURN(Process * p, FindProcess(request, Need::kAny));
  return p->exit.addBranch().attach(kj::addRef(*p));
}

absl::StatusOr<kj::Promise<void>> SandboxHost::Signal(const ValidatedSignal& request) {
  ASSIGN_OR_RETURN(Process * p, FindProcess(request.process, Need::kRunning));
  // `exited` is set as soon as the exit is reaped, so a stale pid file is never used.
  if (p->exited) return absl::FailedPreconditionError("process has ended");
  Sandbox& sb = *Find(request.process.sandbox_id);
  RETURN_IF_ERROR(RequireNotStopped(sb));
  if (sb.paused) {
    // runsc cannot signal into a frozen container: the signal goes out on resume.
    if (sb.queued_signals.size() >= kMaxQueuedSignals)
      return absl::ResourceExhaustedError("too many signals queued for a paused sandbox");
    sb.queued_signals.emplace_back(request.process.process_id, request.signal);
    return kj::Promise<void>(kj::READY_NOW);
  }
  return Kill(sb.id, sb.generation, request.process.process_id, request.signal,
              timer_.now() + kPidPatience);
}

kj::Promise<void> SandboxHost::Kill(const std::string& sandbox_id, uint64_t generation,
                                    const std::string& process_id, int sig,
                                    kj::TimePoint deadline) {
  Sandbox* sb = Find(sandbox_id, generation);
  auto it = sb == nullptr ? decltype(sb->processes)::iterator() : sb->processes.find(process_id);
  if (sb == nullptr || it == sb->processes.end() || it->second->exited)
    return StatusToException(absl::FailedPreconditionError("process has ended"));
  if (uint32_t spawned = it->second->spawner_id) {
    // Its spawner has its pid; a process whose spawner went down has ended.
    if (sb->spawner.get() == nullptr)
      return StatusToException(absl::FailedPreconditionError("process has ended"));
    return Settle(sb->spawner->Signal(spawned, sig));
  }
  absl::StatusOr<long> internal_pid = ReadInternalPid(it->second->pid_file);
  if (!internal_pid.ok()) {
    if (timer_.now() >= deadline) return StatusToException(internal_pid.status());
    return timer_.afterDelay(kPidPoll).then([this, sandbox_id, generation, process_id, sig,
                                             deadline] {
      return Kill(sandbox_id, generation, process_id, sig, deadline);
    });
  }
  return runsc_
      .Run({"kill", absl::StrCat("--pid=", *internal_pid), sandbox_id, absl::StrCat(sig)})
      .then([](RunscResult killed) {
        return Settle(RunscStatus(killed, absl::StatusCode::kFailedPrecondition, ""));
      });
}

// ---------------------------------------------------------------- pause and resume

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

absl::StatusOr<SandboxHost::Stdio> SandboxHost::Reattach(const ValidatedProcessRef& request) {
  ASSIGN_OR_RETURN(Process * p, FindProcess(request, Need::kAny));
  Stdio stdio{Dup(p->kept_stdin), Dup(p->kept_stdout), Dup(p->kept_stderr)};
  if (stdio.stdout_r.get() < 0 || stdio.stderr_r.get() < 0)
    return absl::ResourceExhaustedError("out of file descriptors");
  return stdio;
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

absl::Status SandboxHost::CloseInput(const ValidatedProcessRef& request) {
  ASSIGN_OR_RETURN(Process * p, FindProcess(request, Need::kAny));
  p->kept_stdin = nullptr;
  return absl::OkStatus();
}

absl::Status SandboxHost::ReleaseProcess(const ValidatedProcessRef& request) {
  ASSIGN_OR_RETURN(Process * p, FindProcess(request, Need::kAny));
  if (!p->exited) return absl::FailedPreconditionError("process still runs");
  Sandbox& sb = *Find(request.sandbox_id);
  for (const std::string& file : {p->process_json, p->pid_file}) {
    if (file.empty()) continue;
    unlink(file.c_str());
    std::erase(sb.files, file);
  }
  if (p->spawner_id != 0 && sb.spawner.get() != nullptr) sb.spawner->Release(p->spawner_id);
  // The record holds the kept stdio and (through its exit promise) the exec log; a Wait still
  // in flight holds its own reference and lets go when it answers.
  sb.processes.erase(request.process_id);
  return absl::OkStatus();
}

void SandboxHost::Inventory(const ValidatedInventory&,
                            helper::Helper::InventoryResults::Builder out) const {
  std::vector<const Sandbox*> live;
  size_t processes = 0;
  for (const auto& [id, sb] : sandboxes_) {
    if (!sb->running || sb->deleting) continue;
    live.push_back(sb.get());
    processes += sb->processes.size();
  }
  auto sandboxes = out.initSandboxes(static_cast<unsigned>(live.size()));
  auto kept = out.initProcesses(static_cast<unsigned>(processes));
  unsigned s = 0, k = 0;
  for (const Sandbox* sb : live) {
    auto o = sandboxes[s++];
    o.setSandboxId(sb->id);
    o.setDeploymentId(sb->deployment);
    o.setProfile(sb->profile);
    o.setCreatedAtUnixMs(sb->created_ms);
    o.setUnattached(sb->unattached);
    o.setPaused(sb->paused);
    o.setOomKilled(sb->oom_killed);
    o.setStopped(sb->stopped || sb->oom_killed);
    o.setStopReason(sb->stopped ? sb->stop_reason
                                : sb->oom_killed ? kOomKilledSandboxReason : "");
    DescribeNetwork(sb->id, o.initNetwork());
    DescribePaths(sb->id, o.initPaths());
    for (const auto& [pid, p] : sb->processes) {
      auto po = kept[k++];
      po.setSandboxId(sb->id);
      po.setProcessId(pid);
      po.setTty(p->tty);
      // argv stays out: it can be up to 1 MiB per process, and the broker keeps it in its own
      // record; an inventory must stay small enough for any number of processes.
    }
  }
}

// ---------------------------------------------------------------- a sandbox that stops

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

// ---------------------------------------------------------------- delete

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

// ---------------------------------------------------------------- reconcile

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
        for (const auto& c : *containers) AdoptOrDestroy(c.id, c.status, policy);
        CollectUnowned();
        return kj::READY_NOW;
      });
}

void SandboxHost::AdoptOrDestroy(const std::string& id, const std::string& status,
                                 config::RestartPolicy policy) {
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
