// See sandbox_host.h. This file: starting processes (runsc exec and the spawner), tracking them,
// their signals and stdio for a (re)starting broker, and the spawner's channel.
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
#include <memory>
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

absl::StatusOr<SandboxHost::Stdio> SandboxHost::StartProcess(const ValidatedStart& request) {
  const std::string& process_id = request.process.process_id;
  ASSIGN_OR_RETURN(Sandbox * sb, FindSandbox(request.process.sandbox_id, Need::kRunning));
  RETURN_IF_ERROR(RequireNotStopped(*sb));
  // Its secrets' placeholders and CA path (decision 59), in every environment that does not set
  // them itself, an exact one too: the profile promised them to whatever runs in the sandbox.
  ProcessCommand command = request.command;
  for (const std::string& e : sb->secret_env) {
    std::string name = e.substr(0, e.find('=') + 1);
    bool set = false;
    for (const std::string& given : command.env) set |= given.rfind(name, 0) == 0;
    if (!set) command.env.push_back(e);
  }
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
  // Work a client waits on goes first: before the start itself, which needs the CPU too.
  if (priority_ != nullptr) priority_->Started(sb->id);
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
  absl::Status keyed = NewSpawnerKey(sb, false);
  if (!keyed.ok()) KJ_LOG(ERROR, "its spawner cannot be reattached", sb.id, keyed.ToString());
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
                                     kj::AutoCloseFd from_spawner, bool is_init, bool reattach) {
  std::string id = sb.id;
  uint64_t generation = sb.generation;
  sb.spawner_is_init = is_init;
  SpawnerChannel::Options options;
  options.key = sb.spawner_key;
  options.reattach = reattach;
  options.timer = &timer_;
  sb.spawner = kj::heap<SpawnerChannel>(
      *spawner_io_, kj::mv(to_spawner), kj::mv(from_spawner),
      [this, id, generation, is_init, reattach](std::string why) {
        Sandbox* sb = Find(id, generation);
        if (sb == nullptr) return;
        sb->spawner_down = why;
        // A spawner that broke the protocol may still run: it goes (its children with it). An
        // init spawner stays (killing it would end the sandbox): the channel told it to drop its
        // processes, and it waits for a reattach that will not come from this privhelper.
        if (!is_init && !reattach && sb->running && !sb->frozen && !sb->deleting) {
          if (auto pid = ReadInternalPid(sb->spawner_pid_file); pid.ok())
            reaper_.add(runsc_.Run({"kill", absl::StrCat("--pid=", *pid), id, "KILL"}).ignoreResult());
        }
      },
      kj::mv(options));
}

absl::Status SandboxHost::NewSpawnerKey(Sandbox& sb, bool is_init) {
  std::string key(spawner::kKeyBytes, '\0');
  if (getrandom(key.data(), key.size(), 0) != static_cast<ssize_t>(key.size()))
    return ErrnoStatus("getrandom", "");
  std::string path = sb.bundle_dir + kSpawnerKeyFile;
  unlink(path.c_str());  // an adopted sandbox's, whose spawner could not be reattached
  std::erase(sb.files, path);
  sb.files.push_back(path);
  RETURN_IF_ERROR(WriteNewFile(path, absl::StrCat(ToHex(key), "\n", is_init ? "init" : "exec", "\n")));
  sb.spawner_key = key;
  return absl::OkStatus();
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
  request.drop_oldest = command.drop_oldest;
  request.name = process_id;
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

absl::StatusOr<kj::Promise<SandboxHost::Reattached>> SandboxHost::Reattach(
    const ValidatedReattach& request) {
  ASSIGN_OR_RETURN(Process * p, FindProcess(request.process, Need::kAny));
  if (!p->held) {
    // The pipes go on where they are: the broker's log ends there.
    Stdio stdio{Dup(p->kept_stdin), Dup(p->kept_stdout), Dup(p->kept_stderr)};
    if (stdio.stdout_r.get() < 0 || stdio.stderr_r.get() < 0)
      return absl::ResourceExhaustedError("out of file descriptors");
    return kj::Promise<Reattached>(
        Reattached{kj::mv(stdio), request.stdout_offset, request.stderr_offset});
  }
  Sandbox& sb = *Find(request.process.sandbox_id);
  if (sb.spawner.get() == nullptr) return absl::UnavailableError("the sandbox's spawner is down");
  ASSIGN_OR_RETURN(kj::Promise<SpawnerChannel::Resumed> resumed,
                   sb.spawner->Resume(p->spawner_id, request.stdout_offset, request.stderr_offset));
  // Finished even if the broker that asked dies meanwhile (as RunToCompletion's work): the
  // process is then no longer held, and the next broker's reattach takes its kept pipes. Left
  // to the call, a broker gone mid-restore dropped the resume, and the spawner's answer then
  // read as a violation that ended every process of the sandbox.
  auto answer = kj::newPromiseAndFulfiller<Reattached>();
  auto fulfiller =
      std::make_shared<kj::Own<kj::PromiseFulfiller<Reattached>>>(kj::mv(answer.fulfiller));
  reaper_.add(resumed.then(
      [process = kj::addRef(*p), fulfiller](SpawnerChannel::Resumed r) mutable {
        // Kept as any process's are, so a broker restart later takes them over again.
        process->held = false;
        process->kept_stdin = Dup(r.stdin_w);
        process->kept_stdout = Dup(r.stdout_r);
        process->kept_stderr = Dup(r.stderr_r);
        if (process->kept_stdout.get() < 0 || process->kept_stderr.get() < 0 ||
            (r.stdin_w.get() >= 0 && process->kept_stdin.get() < 0)) {
          (*fulfiller)->reject(StatusToException(absl::ResourceExhaustedError("out of file descriptors")));
          return;
        }
        (*fulfiller)->fulfill(Reattached{Stdio{kj::mv(r.stdin_w), kj::mv(r.stdout_r), kj::mv(r.stderr_r)},
                                         r.stdout_start, r.stderr_start});
      },
      [fulfiller](kj::Exception&& e) { (*fulfiller)->reject(kj::mv(e)); }));
  return kj::mv(answer.promise);
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
                            helper::Helper::InventoryResults::Builder out) {
  std::vector<Sandbox*> live;
  size_t processes = 0;
  for (auto& [id, sb] : sandboxes_) {
    if (!sb->running || sb->deleting) continue;
    live.push_back(sb.get());
    processes += sb->processes.size();
  }
  auto sandboxes = out.initSandboxes(static_cast<unsigned>(live.size()));
  auto kept = out.initProcesses(static_cast<unsigned>(processes));
  unsigned s = 0, k = 0;
  for (Sandbox* sb : live) {
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
    o.setLostReason(sb->lost_reason);
    sb->lost_reason.clear();
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

}  // namespace paseo
