// See helper_server.h.
#include "privhelper/helper_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <fstream>
#include <sstream>

#include <capnp/compat/json.h>

#include <kj/debug.h>

#include "absl/strings/str_cat.h"
#include "common/ids.h"
#include "common/rpc_errors.h"
#include "common/status.h"
#include "privhelper/bundle.h"
#include "privhelper/rootfs_overlay.h"
#include "schema/records.capnp.h"
#include "privhelper/workspace_resolver.h"

namespace paseo {
namespace {

[[noreturn]] void Fail(const absl::Status& status) {
  kj::throwFatalException(StatusToException(status));
}

// Writes a file the privhelper generated, root-only, refusing to follow or reuse anything.
absl::Status WriteNewFile(const std::string& path, const std::string& content) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
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

class FdCap final : public helper::Fd::Server {
 public:
  explicit FdCap(kj::AutoCloseFd fd) : fd_(kj::mv(fd)) {}
  kj::Maybe<int> getFd() override { return fd_.get(); }

 private:
  kj::AutoCloseFd fd_;
};


}  // namespace

SandboxHost::SandboxHost(const Config& config, RunscRunner& runsc, std::string shim)
    : config_(config), runsc_(runsc), shim_(std::move(shim)), reaper_(reap_errors_) {}

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

// Removes the sandbox's (empty) cgroup in every hierarchy. runsc deletes what it created on a
// clean delete, but not after a create that failed half-way; rmdir only removes empty ones.
void RemoveCgroups(const std::string& rel) {
  DIR* root = opendir("/sys/fs/cgroup");
  if (root == nullptr) return;
  while (dirent* e = readdir(root)) {
    if (e->d_name[0] == '.') continue;
    std::string dir = absl::StrCat("/sys/fs/cgroup/", e->d_name);
    rmdir((dir + rel).c_str());
  }
  rmdir(("/sys/fs/cgroup" + rel).c_str());  // a pure cgroup2 host
  closedir(root);
}

void SandboxHost::Forget(Sandbox& sandbox) {
  // A `runsc exec` that has not been reaped yet keeps its record until it is, so no zombie
  // is left behind and no exit is lost.
  for (auto& [pid, p] : sandbox.processes) {
    if (!p->exited) reaper_.add(p->exit.addBranch().ignoreResult().attach(kj::addRef(*p)));
  }
  RemoveBundle(sandbox);
  RemoveCgroups(SandboxCgroup(config_.helper().getCgroupParent().cStr(), sandbox.id));
  sandboxes_.erase(sandbox.id);
}

kj::Promise<void> SandboxHost::Destroy(const std::string& id, uint64_t generation) {
  Sandbox* sb = Find(id, generation);
  if (sb == nullptr) return kj::READY_NOW;
  bool was_running = sb->running;
  sb->deleting = true;
  sb->running = false;
  kj::Promise<void> destroy = kj::READY_NOW;
  if (sb->container_created) {
    destroy = runsc_.Run({"kill", "--all", id, "KILL"})
                  .ignoreResult()
                  .then([this, id] { return runsc_.Run({"delete", "--force", id}); })
                  .then([id](RunscResult deleted) {
                    // Already gone (a racing delete, or it died): that is what we wanted.
                    if (!deleted.ok() &&
                        deleted.stderr_text.find("does not exist") == std::string::npos)
                      Fail(absl::InternalError(deleted.Describe()));
                  });
  }
  return destroy.then(
      [this, id, generation]() -> kj::Promise<void> {
        if (Sandbox* sb = Find(id, generation)) Forget(*sb);
        return kj::READY_NOW;
      },
      [this, id, generation, was_running](kj::Exception&& e) -> kj::Promise<void> {
        // runsc could not delete it: keep the record (and its mounts) usable, so a retry can.
        if (Sandbox* sb = Find(id, generation)) {
          sb->deleting = false;
          sb->running = was_running;
        }
        return kj::mv(e);
      });
}

kj::Promise<void> SandboxHost::Create(ValidatedCreate request) {
  if (Find(request.sandbox_id) != nullptr)
    Fail(absl::AlreadyExistsError(absl::StrCat("sandbox ", request.sandbox_id, " exists")));
  const auto& deployment = *request.deployment;
  std::string deployment_id = deployment.getId().cStr();
  size_t count = 0;
  for (const auto& [id, sb] : sandboxes_) count += sb->deployment == deployment_id;
  if (count >= deployment.getMaxSandboxes())
    Fail(absl::ResourceExhaustedError(absl::StrCat("deployment ", deployment_id, " has ", count,
                                                   " sandboxes (its maxSandboxes)")));

  // Check destinations and resolve every workspace before touching anything, so a refusal
  // changes nothing.
  std::string rootfs = config_.RootfsPath(*request.profile);
  struct stat rootfs_st;
  if (stat(rootfs.c_str(), &rootfs_st) != 0 || !S_ISDIR(rootfs_st.st_mode))
    Fail(absl::FailedPreconditionError(absl::StrCat("rootfs ", rootfs, " is not installed")));
  for (const auto& m : request.mounts) {
    absl::Status st = CheckDestination(rootfs, m.destination);
    if (!st.ok()) Fail(st);
  }
  for (const auto& c : request.credentials) {
    absl::Status st = CheckDestination(rootfs, c.destination);
    if (!st.ok()) Fail(st);
  }
  std::vector<ResolvedWorkspace> resolved;
  for (const auto& m : request.mounts) {
    auto ws = ResolveWorkspace(deployment, m.client_path);
    if (!ws.ok()) Fail(ws.status());
    resolved.push_back(std::move(*ws));
  }
  std::vector<ResolvedWorkspace> credentials;
  for (const auto& c : request.credentials) {
    auto cred = ResolveCredential(c.name, c.host_path);
    if (!cred.ok()) Fail(cred.status());
    credentials.push_back(std::move(*cred));
  }
  uid_t uid;
  gid_t gid;
  if (deployment.hasRunAs()) {
    uid = deployment.getRunAs().getUid();
    gid = deployment.getRunAs().getGid();
  } else {
    // Default: the owner of the first workspace root.
    auto first = deployment.getWorkspaceRoots()[0];
    std::string mapped =
        first.getClientPath().size() > 0 ? first.getClientPath().cStr() : first.getHostPath().cStr();
    auto root = ResolveWorkspace(deployment, mapped);
    if (!root.ok()) Fail(root.status());
    uid = root->root_owner_uid;
    gid = root->root_owner_gid;
  }
  if (uid == 0 || gid == 0)
    Fail(absl::FailedPreconditionError(absl::StrCat(
        "deployment ", deployment_id,
        ": agents never run as uid or gid 0; the workspace root is owned by root, so set runAs")));

  auto sandbox = kj::heap<Sandbox>();
  sandbox->id = request.sandbox_id;
  sandbox->generation = next_generation_++;
  sandbox->deployment = deployment_id;
  sandbox->uid = uid;
  sandbox->gid = gid;
  sandbox->default_cwd = request.mounts.empty() ? "/" : request.mounts[0].destination;
  sandbox->bundle_dir =
      absl::StrCat(config_.helper().getStateDir().cStr(), "/bundles/", request.sandbox_id);
  sandbox->profile = request.profile->getName().cStr();
  sandbox->created_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
  Sandbox& sb = *sandbox;
  sandboxes_.emplace(sb.id, kj::mv(sandbox));

  auto fail_and_clean = [this, &sb](const absl::Status& status) -> void {
    Forget(sb);
    Fail(status);
  };
  if (mkdir(sb.bundle_dir.c_str(), 0700) != 0) {
    absl::Status st = ErrnoStatus("mkdir", sb.bundle_dir);
    sandboxes_.erase(sb.id);
    Fail(st);
  }
  std::string mounts_dir = sb.bundle_dir + "/mounts";
  if (mkdir(mounts_dir.c_str(), 0700) != 0) fail_and_clean(ErrnoStatus("mkdir", mounts_dir));
  {
    // The record a restarted privhelper reads to know what a surviving container is.
    capnp::MallocMessageBuilder message;
    auto record = message.initRoot<records::SandboxRecord>();
    record.setId(sb.id);
    record.setDeploymentId(deployment_id);
    record.setProfile(sb.profile);
    record.setUid(uid);
    record.setGid(gid);
    record.setDefaultCwd(sb.default_cwd);
    record.setCreatedAtUnixMs(sb.created_ms);
    capnp::JsonCodec codec;
    auto text = codec.encode(record.asReader());
    std::string record_path = sb.bundle_dir + "/sandbox.json";
    absl::Status st = WriteNewFile(record_path, std::string(text.cStr(), text.size()));
    if (!st.ok()) fail_and_clean(st);
    sb.files.push_back(record_path);
  }

  auto merged = MountRootfsOverlay(rootfs, sb.bundle_dir);
  if (!merged.ok()) fail_and_clean(merged.status());
  BundleSpec spec;
  spec.rootfs = *merged;
  spec.shim = shim_;
  spec.uid = uid;
  spec.gid = gid;
  spec.tmpfs_bytes = request.profile->getTmpfsBytes();
  spec.limits = config_.LimitsOf(*request.profile);
  spec.cgroups_path = SandboxCgroup(config_.helper().getCgroupParent().cStr(), sb.id);
  for (size_t i = 0; i < resolved.size(); ++i) {
    std::string staging = absl::StrCat(mounts_dir, "/", i);
    absl::Status st = StageBind(resolved[i], staging, request.mounts[i].read_only);
    if (!st.ok()) fail_and_clean(st);
    sb.staging.push_back(staging);
    spec.mounts.push_back({staging, request.mounts[i].destination, request.mounts[i].read_only});
  }
  for (size_t i = 0; i < credentials.size(); ++i) {
    const auto& c = request.credentials[i];
    std::string staging = absl::StrCat(mounts_dir, "/credential-", c.name);
    absl::Status st = StageBind(credentials[i], staging, c.read_only);
    if (!st.ok()) fail_and_clean(st);
    sb.staging.push_back(staging);
    spec.mounts.push_back({staging, c.destination, c.read_only});
  }
  std::string config_path = sb.bundle_dir + "/config.json";
  absl::Status st = WriteNewFile(config_path, RenderOciConfig(spec));
  if (!st.ok()) fail_and_clean(st);
  sb.files.push_back(config_path);

  std::string id = sb.id;
  uint64_t gen = sb.generation;
  return runsc_.Run({"create", "--bundle", sb.bundle_dir, id})
      .then([this, id, gen](RunscResult created) {
        if (!created.ok())
          Fail(absl::InternalError(absl::StrCat("cannot create sandbox: ", created.Describe())));
        if (Sandbox* sb = Find(id, gen)) sb->container_created = true;
        return runsc_.Run({"start", id});
      })
      .then([this, id, gen](RunscResult started) {
        if (!started.ok())
          Fail(absl::InternalError(absl::StrCat("cannot start sandbox: ", started.Describe())));
        Sandbox* sb = Find(id, gen);
        if (sb == nullptr || sb->deleting)
          Fail(absl::FailedPreconditionError("sandbox was deleted while being created"));
        sb->running = true;
      })
      .catch_([this, id, gen](kj::Exception&& e) -> kj::Promise<void> {
        // Whatever failed (runsc, a spawn, a timeout): tear down what exists, then report.
        Sandbox* sb = Find(id, gen);
        if (sb == nullptr || sb->running) return kj::mv(e);
        return Destroy(id, gen)
            .catch_([](kj::Exception&& cleanup) {
              KJ_LOG(ERROR, "cleanup after a failed create failed", cleanup);
            })
            .then([e = kj::mv(e)]() mutable -> kj::Promise<void> { return kj::mv(e); });
      });
}

kj::Promise<SandboxHost::Stdio> SandboxHost::StartProcess(ValidatedStart request) {
  Sandbox* sb = Find(request.sandbox_id);
  if (sb == nullptr || !sb->running || sb->deleting)
    Fail(absl::NotFoundError(absl::StrCat("no running sandbox ", request.sandbox_id)));
  if (sb->processes.count(request.process_id))
    Fail(absl::AlreadyExistsError(absl::StrCat("process ", request.process_id, " exists")));
  if (sb->processes.size() >= kMaxProcessesPerSandbox)
    Fail(absl::ResourceExhaustedError("too many processes in this sandbox"));

  ExecSpec exec;
  exec.argv = request.tty ? TtyArgv(request.rows, request.cols, request.argv) : request.argv;
  exec.tty = request.tty;
  exec.env = request.env;
  exec.cwd = request.cwd.empty() ? sb->default_cwd : request.cwd;
  exec.uid = sb->uid;
  exec.gid = sb->gid;
  std::string process_json = absl::StrCat(sb->bundle_dir, "/process-", request.process_id, ".json");
  std::string pid_file = absl::StrCat(sb->bundle_dir, "/process-", request.process_id, ".pid");
  absl::Status st = WriteNewFile(process_json, RenderProcessJson(exec));
  if (!st.ok()) Fail(st);
  sb->files.push_back(process_json);
  sb->files.push_back(pid_file);

  auto in = MakePipe();
  auto out = MakePipe();
  auto err = MakePipe();
  if (!in.ok() || !out.ok() || !err.ok()) Fail(absl::ResourceExhaustedError("out of pipes"));
  // runsc logs the process's raw wait status here (exit_status.h).
  kj::AutoCloseFd exec_log(memfd_create("runsc-exec-log", MFD_CLOEXEC));
  if (exec_log.get() < 0) Fail(absl::ResourceExhaustedError("out of file descriptors"));
  // A tty process has one stream: the relay's (and runsc's own) stderr joins the terminal's
  // output, and the stderr pipe the broker gets is at end-of-file from the start.
  int child_stderr = request.tty ? out->write.get() : err->write.get();
  auto pid = runsc_.Start({"exec", "--process", process_json, "--internal-pid-file", pid_file,
                           request.sandbox_id},
                          in->read.get(), out->write.get(), child_stderr, exec_log.get());
  if (!pid.ok()) Fail(pid.status());
  Process& p = Track(*sb, request.process_id, *pid, pid_file, kj::mv(exec_log));
  p.argv = request.argv;
  p.tty = request.tty;
  // Copies of the broker's ends: if the broker dies, its successor takes them over (while
  // it is down, the process blocks on a full pipe; nothing is lost). Our copies of the
  // child's ends close here.
  p.kept_stdin = kj::AutoCloseFd(fcntl(in->write.get(), F_DUPFD_CLOEXEC, 3));
  p.kept_stdout = kj::AutoCloseFd(fcntl(out->read.get(), F_DUPFD_CLOEXEC, 3));
  p.kept_stderr = kj::AutoCloseFd(fcntl(err->read.get(), F_DUPFD_CLOEXEC, 3));
  if (p.kept_stdin.get() < 0 || p.kept_stdout.get() < 0 || p.kept_stderr.get() < 0)
    Fail(absl::ResourceExhaustedError("out of file descriptors"));
  return Stdio{kj::mv(in->write), kj::mv(out->read), kj::mv(err->read)};
}

SandboxHost::Process& SandboxHost::Track(Sandbox& sb, const std::string& process_id, pid_t pid,
                                         const std::string& pid_file, kj::AutoCloseFd exec_log) {
  std::string cgroup = SandboxCgroup(config_.helper().getCgroupParent().cStr(), sb.id);
  // OOM kills counted before this process started are not its end.
  uint64_t ooms_before = ReadOomKillCount(cgroup).value_or(0);
  auto ended = WatchChild(runsc_.events(), pid)
                   .then([log = kj::mv(exec_log), cgroup, ooms_before](int runsc_status) {
                     // Read at once: the cgroup goes when the sandbox is deleted.
                     auto ooms = ReadOomKillCount(cgroup);
                     return DecideProcessExit(runsc_status, ReadMemfd(log.get()),
                                              ooms.value_or(0) > ooms_before);
                   });
  auto process = kj::refcounted<Process>(kj::mv(ended));
  process->pid_file = pid_file;
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

kj::Promise<ProcessExit> SandboxHost::Wait(const std::string& sandbox_id, const std::string& process_id) {
  Sandbox* sb = Find(sandbox_id);
  if (sb == nullptr) Fail(absl::NotFoundError(absl::StrCat("no sandbox ", sandbox_id)));
  auto it = sb->processes.find(process_id);
  if (it == sb->processes.end())
    Fail(absl::NotFoundError(absl::StrCat("no process ", process_id)));
  return it->second->exit.addBranch().attach(kj::addRef(*it->second));
}

kj::Promise<void> SandboxHost::Signal(const std::string& sandbox_id,
                                      const std::string& process_id, int sig) {
  if (sig < 1 || sig > 64) Fail(absl::InvalidArgumentError("signal must be 1..64"));
  Sandbox* sb = Find(sandbox_id);
  if (sb == nullptr || !sb->running || sb->deleting)
    Fail(absl::NotFoundError(absl::StrCat("no running sandbox ", sandbox_id)));
  auto it = sb->processes.find(process_id);
  if (it == sb->processes.end())
    Fail(absl::NotFoundError(absl::StrCat("no process ", process_id)));
  // `exited` is set as soon as the exit is reaped, so a stale pid file is never used.
  if (it->second->exited) Fail(absl::FailedPreconditionError("process has ended"));
  std::ifstream in(it->second->pid_file);
  long internal_pid = 0;
  if (!(in >> internal_pid) || internal_pid <= 0)
    Fail(absl::UnavailableError("process is still starting; retry"));
  return runsc_
      .Run({"kill", absl::StrCat("--pid=", internal_pid), sandbox_id, absl::StrCat(sig)})
      .then([](RunscResult r) {
        if (!r.ok()) Fail(absl::FailedPreconditionError(r.Describe()));
      });
}

kj::Promise<void> SandboxHost::Delete(const std::string& sandbox_id) {
  Sandbox* sb = Find(sandbox_id);
  if (sb == nullptr) Fail(absl::NotFoundError(absl::StrCat("no sandbox ", sandbox_id)));
  if (sb->deleting) Fail(absl::FailedPreconditionError("sandbox is already being deleted"));
  if (!sb->running) Fail(absl::FailedPreconditionError("sandbox is still being created"));
  return Destroy(sandbox_id, sb->generation);
}

namespace {

struct ListedContainer {
  std::string id;
  std::string status;
};

// Parses `runsc list --format=json` (an array of OCI state objects); nullopt if unreadable.
std::optional<std::vector<ListedContainer>> ParseRunscList(const std::string& text) {
  std::vector<ListedContainer> out;
  if (text.find_first_not_of(" \n") == std::string::npos) return out;
  capnp::MallocMessageBuilder message;
  auto root = message.initRoot<capnp::JsonValue>();
  capnp::JsonCodec codec;
  auto error = kj::runCatchingExceptions(
      [&] { codec.decodeRaw(kj::ArrayPtr<const char>(text.data(), text.size()), root); });
  if (error == nullptr && root.isNull()) return out;  // runsc prints "null" for no containers
  if (error != nullptr || !root.isArray()) {
    KJ_LOG(ERROR, "cannot parse runsc list output", text);
    return std::nullopt;
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

std::vector<std::string> Entries(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    closedir(d);
  }
  return names;
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

}  // namespace

kj::Promise<void> SandboxHost::Reconcile(config::RestartPolicy policy) {
  return runsc_.Run({"list", "--format=json"}).then([this, policy](RunscResult listed) {
    if (!listed.ok()) Fail(absl::InternalError("runsc list: " + listed.Describe()));
    std::string bundles = absl::StrCat(config_.helper().getStateDir().cStr(), "/bundles");
    auto containers = ParseRunscList(listed.stdout_text);
    // Without a trustworthy list, collecting bundles could remove live sandboxes' records.
    if (!containers) Fail(absl::InternalError("unreadable runsc list output; no collection"));
    for (const auto& c : *containers) {
      if (!IsValidId(c.id) || Find(c.id) != nullptr) continue;
      auto sandbox = kj::heap<Sandbox>();
      sandbox->id = c.id;
      sandbox->generation = next_generation_++;
      sandbox->bundle_dir = absl::StrCat(bundles, "/", c.id);
      sandbox->container_created = true;
      for (const auto& n : Entries(sandbox->bundle_dir)) {
        std::string path = absl::StrCat(sandbox->bundle_dir, "/", n);
        struct stat st;
        if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) sandbox->files.push_back(path);
      }
      for (const auto& n : Entries(sandbox->bundle_dir + "/mounts"))
        sandbox->staging.push_back(absl::StrCat(sandbox->bundle_dir, "/mounts/", n));
      capnp::MallocMessageBuilder message;
      auto record = ReadRecord(sandbox->bundle_dir + "/sandbox.json", message);
      bool adopt = policy == config::RestartPolicy::KEEP && c.status == "running" &&
                   record.ok() && config_.FindDeployment(record->getDeploymentId().cStr());
      if (record.ok()) {
        sandbox->deployment = record->getDeploymentId().cStr();
        sandbox->profile = record->getProfile().cStr();
        sandbox->uid = record->getUid();
        sandbox->gid = record->getGid();
        sandbox->default_cwd = record->getDefaultCwd().cStr();
        sandbox->created_ms = record->getCreatedAtUnixMs();
      }
      uint64_t gen = sandbox->generation;
      std::string id = c.id;
      bool running = c.status == "running";
      sandboxes_.emplace(id, kj::mv(sandbox));
      if (adopt && sandboxes_[id]->uid != 0 && sandboxes_[id]->gid != 0) {
        sandboxes_[id]->running = true;
        sandboxes_[id]->unattached = true;
        KJ_LOG(WARNING, "adopted a running sandbox from a previous privhelper", id);
      } else {
        KJ_LOG(WARNING, "destroying a sandbox left by a previous privhelper", id, running);
        reaper_.add(Destroy(id, gen));
      }
    }
  }).then([this] {
    // Bundles and cgroups that no sandbox owns: leftovers of a crash mid-create or mid-delete.
    std::string bundles = absl::StrCat(config_.helper().getStateDir().cStr(), "/bundles");
    for (const auto& n : Entries(bundles)) {
      if (Find(n) != nullptr) continue;
      Sandbox stale;
      stale.id = n;
      stale.bundle_dir = absl::StrCat(bundles, "/", n);
      for (const auto& f : Entries(stale.bundle_dir)) {
        std::string path = absl::StrCat(stale.bundle_dir, "/", f);
        struct stat st;
        if (lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) stale.files.push_back(path);
      }
      for (const auto& m : Entries(stale.bundle_dir + "/mounts"))
        stale.staging.push_back(absl::StrCat(stale.bundle_dir, "/mounts/", m));
      KJ_LOG(WARNING, "removing a stale bundle", n);
      RemoveBundle(stale);
    }
    std::string parent = config_.helper().getCgroupParent().cStr();
    std::vector<std::string> parents = {"/sys/fs/cgroup" + parent};  // a pure cgroup2 host
    for (const auto& hierarchy : Entries("/sys/fs/cgroup"))
      parents.push_back(absl::StrCat("/sys/fs/cgroup/", hierarchy, parent));
    for (const auto& dir : parents) {
      for (const auto& n : Entries(dir)) {
        struct stat st;
        if (IsValidId(n) && Find(n) == nullptr &&
            stat(absl::StrCat(dir, "/", n).c_str(), &st) == 0 && S_ISDIR(st.st_mode))
          RemoveCgroups(SandboxCgroup(parent, n));
      }
    }
  });
}

void SandboxHost::Inventory(helper::Helper::InventoryResults::Builder out) const {
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
    o.setOomKilled(sb->oom_killed);
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

kj::Promise<SandboxHost::Stdio> SandboxHost::Reattach(const std::string& sandbox_id,
                                                      const std::string& process_id) {
  Sandbox* sb = Find(sandbox_id);
  if (sb == nullptr) Fail(absl::NotFoundError(absl::StrCat("no sandbox ", sandbox_id)));
  auto it = sb->processes.find(process_id);
  if (it == sb->processes.end())
    Fail(absl::NotFoundError(absl::StrCat("no process ", process_id)));
  Process& p = *it->second;
  auto dup = [](const kj::AutoCloseFd& fd) {
    return fd.get() < 0 ? kj::AutoCloseFd() : kj::AutoCloseFd(fcntl(fd.get(), F_DUPFD_CLOEXEC, 3));
  };
  Stdio stdio{dup(p.kept_stdin), dup(p.kept_stdout), dup(p.kept_stderr)};
  if (stdio.stdout_r.get() < 0 || stdio.stderr_r.get() < 0)
    Fail(absl::ResourceExhaustedError("out of file descriptors"));
  return kj::mv(stdio);
}

void SandboxHost::CloseInput(const std::string& sandbox_id, const std::string& process_id) {
  Sandbox* sb = Find(sandbox_id);
  if (sb == nullptr) Fail(absl::NotFoundError(absl::StrCat("no sandbox ", sandbox_id)));
  auto it = sb->processes.find(process_id);
  if (it == sb->processes.end())
    Fail(absl::NotFoundError(absl::StrCat("no process ", process_id)));
  it->second->kept_stdin = nullptr;
}

kj::Promise<void> SandboxHost::RunToCompletion(kj::Promise<void> work) {
  // A broker that dies mid-request cancels its RPC calls; the work itself must still finish
  // (or clean up), so a create or delete is never left half-done.
  auto forked = work.fork();
  reaper_.add(forked.addBranch());
  return forked.addBranch();
}

kj::Promise<void> SandboxHost::DeleteAll() {
  kj::Vector<kj::Promise<void>> all;
  std::vector<std::pair<std::string, uint64_t>> ids;
  for (const auto& [id, sb] : sandboxes_) ids.emplace_back(id, sb->generation);
  for (const auto& [id, gen] : ids) {
    all.add(Destroy(id, gen).catch_([id = id](kj::Exception&& e) {
      KJ_LOG(ERROR, "cannot delete sandbox at shutdown", id, e);
    }));
  }
  return kj::joinPromises(all.releaseAsArray());
}

// ---------------------------------------------------------------- RPC adapter

kj::Promise<void> HelperServer::policy(PolicyContext context) {
  auto deployments = context.getResults().initPolicy().initDeployments(
      static_cast<unsigned>(config_.deployments().size()));
  for (size_t i = 0; i < config_.deployments().size(); ++i) {
    const auto& d = config_.deployments()[i];
    auto out = deployments[static_cast<unsigned>(i)];
    out.setId(d.getId());
    out.setAllowedUids(d.getAllowedUids());
    out.setAllowedGids(d.getAllowedGids());
    auto names = config_.ProfilesOf(d);
    auto profiles = out.initProfiles(static_cast<unsigned>(names.size()));
    for (size_t j = 0; j < names.size(); ++j) profiles.set(static_cast<unsigned>(j), names[j]);
    out.setOutputBufferBytes(config_.FindProfile(names[0])->getOutputBufferBytes());
    auto sizes = out.initProfileBufferBytes(static_cast<unsigned>(names.size()));
    for (size_t j = 0; j < names.size(); ++j)
      sizes.set(static_cast<unsigned>(j), config_.FindProfile(names[j])->getOutputBufferBytes());
  }
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::createSandbox(CreateSandboxContext context) {
  auto request = ValidateCreate(config_, context.getParams().getRequest());
  if (!request.ok()) Fail(request.status());
  return host_.RunToCompletion(host_.Create(std::move(*request)));
}

kj::Promise<void> HelperServer::startProcess(StartProcessContext context) {
  auto request = ValidateStart(context.getParams().getRequest());
  if (!request.ok()) Fail(request.status());
  return host_.StartProcess(std::move(*request)).then([context](SandboxHost::Stdio stdio) mutable {
    auto results = context.getResults();
    results.setStdin(kj::heap<FdCap>(kj::mv(stdio.stdin_w)));
    results.setStdout(kj::heap<FdCap>(kj::mv(stdio.stdout_r)));
    results.setStderr(kj::heap<FdCap>(kj::mv(stdio.stderr_r)));
  });
}

kj::Promise<void> HelperServer::waitProcess(WaitProcessContext context) {
  auto params = context.getParams();
  if (!IsValidId(params.getSandboxId().cStr()) || !IsValidId(params.getProcessId().cStr()))
    Fail(absl::InvalidArgumentError("not a valid id"));
  return host_.Wait(params.getSandboxId().cStr(), params.getProcessId().cStr())
      .then([context](ProcessExit exit) mutable {
        ToCapnp(exit, context.getResults().initStatus());
      });
}

kj::Promise<void> HelperServer::signalProcess(SignalProcessContext context) {
  auto params = context.getParams();
  if (!IsValidId(params.getSandboxId().cStr()) || !IsValidId(params.getProcessId().cStr()))
    Fail(absl::InvalidArgumentError("not a valid id"));
  return host_.Signal(params.getSandboxId().cStr(), params.getProcessId().cStr(),
                      params.getSignal());
}

kj::Promise<void> HelperServer::inventory(InventoryContext context) {
  host_.Inventory(context.getResults());
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::reattach(ReattachContext context) {
  auto params = context.getParams();
  if (!IsValidId(params.getSandboxId().cStr()) || !IsValidId(params.getProcessId().cStr()))
    Fail(absl::InvalidArgumentError("not a valid id"));
  return host_.Reattach(params.getSandboxId().cStr(), params.getProcessId().cStr())
      .then([context](SandboxHost::Stdio stdio) mutable {
        auto results = context.getResults();
        if (stdio.stdin_w.get() >= 0) results.setStdin(kj::heap<FdCap>(kj::mv(stdio.stdin_w)));
        results.setStdout(kj::heap<FdCap>(kj::mv(stdio.stdout_r)));
        results.setStderr(kj::heap<FdCap>(kj::mv(stdio.stderr_r)));
      });
}

kj::Promise<void> HelperServer::closeInput(CloseInputContext context) {
  auto params = context.getParams();
  if (!IsValidId(params.getSandboxId().cStr()) || !IsValidId(params.getProcessId().cStr()))
    Fail(absl::InvalidArgumentError("not a valid id"));
  host_.CloseInput(params.getSandboxId().cStr(), params.getProcessId().cStr());
  return kj::READY_NOW;
}

kj::Promise<void> HelperServer::deleteSandbox(DeleteSandboxContext context) {
  auto params = context.getParams();
  if (!IsValidId(params.getSandboxId().cStr())) Fail(absl::InvalidArgumentError("not a valid id"));
  return host_.RunToCompletion(host_.Delete(params.getSandboxId().cStr()));
}

}  // namespace paseo
