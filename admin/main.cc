// paseo-sandbox-admin: the operator's program. `deployment add|remove|list` change the
// root-owned deployments (validated by the privhelper's own config code, written atomically,
// then reloaded into the running service without touching its sandboxes), `doctor` checks the
// host and says how to fix what is wrong, `status` shows the service, its sandboxes and their
// logs' disk use, `gc` asks the privhelper to collect what no sandbox owns.
#include <dirent.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/main.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "admin/config_files.h"
#include "admin/doctor.h"
#include "admin/metrics.h"
#include "admin/service_state.h"
#include "common/status.h"
#include "privhelper/config.h"

namespace paseo::admin {
namespace {

// How long `deployment add|remove` and `gc` wait for the privhelper to report its reload: it
// restarts the broker, which takes well under a second; a minute covers a loaded host.
constexpr std::chrono::seconds kReloadPatience(60);

using Validity = kj::MainBuilder::Validity;

class AdminMain {
 public:
  explicit AdminMain(kj::ProcessContext& context) : context_(context) {
    // kj ends the process with _exit(), which flushes nothing: every line goes out as printed.
    setvbuf(stdout, nullptr, _IOLBF, 0);
  }

  kj::MainFunc getMain() {
    kj::MainBuilder builder(context_, "paseo-sandbox-admin",
                            "Operator commands for paseo-sandbox: change deployments (reloaded "
                            "into the running service), check the host, show status, collect "
                            "garbage. Options naming directories may come before or after the "
                            "command.");
    AddDirOptions(builder);
    return builder
        .addSubCommand("deployment", KJ_BIND_METHOD(*this, DeploymentCommand),
                       "add, remove or list deployments")
        .addSubCommand("doctor", KJ_BIND_METHOD(*this, DoctorCommand),
                       "check the host and the configuration; say how to fix each problem")
        .addSubCommand("status", KJ_BIND_METHOD(*this, StatusCommand),
                       "the service, sandboxes per deployment, disk used by logs")
        .addSubCommand("metrics", KJ_BIND_METHOD(*this, MetricsCommand),
                       "every sandbox's use and the service's health, in the Prometheus text "
                       "format (for node_exporter's textfile collector)")
        .addSubCommand("gc", KJ_BIND_METHOD(*this, GcCommand),
                       "ask the running privhelper to reload its config and collect what no "
                       "sandbox owns (SIGHUP)")
        .build();
  }

 private:
  void AddDirOptions(kj::MainBuilder& builder) {
    builder
        .addOptionWithArg({"config-dir"}, KJ_BIND_METHOD(*this, SetConfigDir), "<dir>",
                          "The root-owned configuration (default /etc/paseo-sandbox).")
        .addOptionWithArg({"state-dir"}, KJ_BIND_METHOD(*this, SetStateDir), "<dir>",
                          "The state dir (default: helper.json's stateDir).")
        .addOptionWithArg({"run-dir"}, KJ_BIND_METHOD(*this, SetRunDir), "<dir>",
                          "The run dir (default: helper.json's runDir).")
        .addOptionWithArg({"cgroup-root"}, KJ_BIND_METHOD(*this, SetCgroupRoot), "<dir>",
                          "Where cgroups are mounted (default /sys/fs/cgroup).");
  }
  Validity SetConfigDir(kj::StringPtr v) { config_dir_ = v.cStr(); return true; }
  Validity SetStateDir(kj::StringPtr v) { state_dir_ = v.cStr(); return true; }
  Validity SetRunDir(kj::StringPtr v) { run_dir_ = v.cStr(); return true; }
  Validity SetCgroupRoot(kj::StringPtr v) { cgroup_root_ = v.cStr(); return true; }

  // helper.json's directories unless given; the defaults if it does not decode (status and gc
  // still work when another config file is broken).
  void ResolveDirs() {
    if (!state_dir_.empty() && !run_dir_.empty()) return;
    std::string state = "/var/lib/paseo-sandbox", run = "/run/paseo-sandbox";
    auto dirs = ReadHelperDirs(config_dir_);
    if (dirs.ok()) {
      state = dirs->state_dir;
      run = dirs->run_dir;
    }
    if (state_dir_.empty()) state_dir_ = state;
    if (run_dir_.empty()) run_dir_ = run;
  }

  [[noreturn]] void Fail(const std::string& message) {
    std::fflush(stdout);
    context_.exitError(kj::str(message));
    std::abort();  // exitError does not return; this build's kj does not say so
  }
  void Done() {
    std::fflush(stdout);
    context_.exit();
  }
  void RequireRoot(const char* what) {
    if (geteuid() != 0) Fail(absl::StrCat(what, " must run as root (it writes ", config_dir_, ")"));
  }
  // One change of the config dir at a time: each validates against the whole dir, so two
  // concurrent adds could each pass alone and together make a config the service refuses.
  // The lock (flock on the directory) is held until this process exits.
  void LockConfigDir() {
    config_lock_ = open(config_dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (config_lock_ < 0) Fail(std::string(ErrnoStatus("open", config_dir_).message()));
    if (flock(config_lock_, LOCK_EX | LOCK_NB) != 0) {
      std::fprintf(stderr, "waiting for another paseo-sandbox-admin changing %s\n", config_dir_.c_str());
      if (flock(config_lock_, LOCK_EX) != 0) Fail(std::string(ErrnoStatus("flock", config_dir_).message()));
    }
  }

  // After the config dir changed: has the running privhelper reload it. Exit status 1 if it ran
  // and refused; no privhelper is fine (it loads the change when it starts).
  void Reload(const std::string& what) {
    ResolveDirs();
    auto pid = RunningPrivhelper(run_dir_);
    if (!pid.ok()) {
      std::printf("%s; %s: the service loads it when it starts\n", what.c_str(),
                  std::string(pid.status().message()).c_str());
      return Done();
    }
    auto generation = RequestReload(run_dir_, kReloadPatience);
    if (!generation.ok()) Fail(absl::StrCat(what, ", but ", generation.status().message()));
    if (!generation->applied())
      Fail(absl::StrCat(what, ", but privhelper ", *pid, " did not apply it (config generation ",
                        generation->number, " ", generation->outcome,
                        "); it keeps serving its previous configuration. The change is on disk: "
                        "it takes effect at the next successful reload or restart, so fix what "
                        "the privhelper refused (its log says) or undo the change"));
    std::printf("%s; privhelper %d reloaded it (config generation %llu), running sandboxes "
                "untouched\n",
                what.c_str(), *pid, static_cast<unsigned long long>(generation->number));
    Done();
  }

  // ------------------------------------------------------------------ deployment

  kj::MainFunc DeploymentCommand() {
    kj::MainBuilder builder(context_, "paseo-sandbox-admin deployment",
                            "Add, remove or list the deployments in <config-dir>/deployments.");
    AddDirOptions(builder);
    return builder
        .addSubCommand("add", KJ_BIND_METHOD(*this, AddCommand),
                       "add (or with --replace change) a deployment and reload the service")
        .addSubCommand("remove", KJ_BIND_METHOD(*this, RemoveCommand),
                       "remove a deployment and reload the service")
        .addSubCommand("list", KJ_BIND_METHOD(*this, ListCommand),
                       "list deployments with their sandbox counts")
        .build();
  }

  kj::MainFunc AddCommand() {
    kj::MainBuilder builder(
        context_, "paseo-sandbox-admin deployment add",
        "Adds deployment <id>: who may use it (--allow-uid, --allow-gid), the directories its "
        "workspaces must lie beneath (--workspace-root HOST[:CLIENT], CLIENT being the path "
        "a Docker container sees), the identity agents run as (--run-as UID:GID; default the "
        "client's own), its launch profiles (--profile, repeatable; default \"default\"), "
        "--max-sandboxes. Or --from-file F: a whole deployment JSON (schema/config.capnp), "
        "for credential and tool roots. The file is validated by the privhelper's own config "
        "code against the whole config dir before it is written (root:root 0644, atomically); "
        "then the running service reloads it.");
    AddDirOptions(builder);
    return builder
        .addOptionWithArg({"allow-uid"}, KJ_BIND_METHOD(*this, AddUid), "<uid>",
                          "A client uid allowed to use it (repeatable).")
        .addOptionWithArg({"allow-gid"}, KJ_BIND_METHOD(*this, AddGid), "<gid>",
                          "A client gid allowed to use it (repeatable).")
        .addOptionWithArg({"workspace-root"}, KJ_BIND_METHOD(*this, AddRoot), "<host[:client]>",
                          "A workspace root (repeatable).")
        .addOptionWithArg({"run-as"}, KJ_BIND_METHOD(*this, SetRunAs), "<uid:gid>",
                          "Run agents as this uid and gid.")
        .addOptionWithArg({"profile"}, KJ_BIND_METHOD(*this, AddProfile), "<name>",
                          "A launch profile it may use (repeatable; the first is its default).")
        .addOptionWithArg({"max-sandboxes"}, KJ_BIND_METHOD(*this, SetMax), "<n>",
                          "At most this many sandboxes at once (default 16).")
        .addOptionWithArg({"from-file"}, KJ_BIND_METHOD(*this, SetFromFile), "<file>",
                          "Take the whole deployment from this JSON file.")
        .addOption({"replace"}, KJ_BIND_METHOD(*this, SetReplace),
                   "Replace the deployment if it exists.")
        .addOption({"adopt-sandboxes"}, KJ_BIND_METHOD(*this, SetAdopt),
                   "Add a deployment whose id still has sandboxes (left running by a forced "
                   "remove): whoever the new file allows gets them.")
        .addOption({"no-reload"}, KJ_BIND_METHOD(*this, SetNoReload),
                   "Only write the file; do not signal the service.")
        .expectOptionalArg("<id>", KJ_BIND_METHOD(*this, SetId))
        .callAfterParsing(KJ_BIND_METHOD(*this, RunAdd))
        .build();
  }
  Validity AddUid(kj::StringPtr v) {
    uint32_t n;
    if (!absl::SimpleAtoi(v.cStr(), &n)) return "not a uid";
    spec_.allowed_uids.push_back(n);
    return true;
  }
  Validity AddGid(kj::StringPtr v) {
    uint32_t n;
    if (!absl::SimpleAtoi(v.cStr(), &n)) return "not a gid";
    spec_.allowed_gids.push_back(n);
    return true;
  }
  Validity AddRoot(kj::StringPtr v) {
    spec_.workspace_roots.push_back(ParseRoot(v.cStr()));
    return true;
  }
  Validity SetRunAs(kj::StringPtr v) {
    std::string text = v.cStr();
    size_t colon = text.find(':');
    uint32_t uid, gid;
    if (colon == std::string::npos || !absl::SimpleAtoi(text.substr(0, colon), &uid) ||
        !absl::SimpleAtoi(text.substr(colon + 1), &gid))
      return "expected <uid>:<gid>";
    spec_.run_as = std::make_pair(uid, gid);
    return true;
  }
  Validity AddProfile(kj::StringPtr v) {
    spec_.profiles.emplace_back(v.cStr());
    return true;
  }
  Validity SetMax(kj::StringPtr v) {
    uint32_t n;
    if (!absl::SimpleAtoi(v.cStr(), &n)) return "not a number";
    spec_.max_sandboxes = n;
    return true;
  }
  Validity SetFromFile(kj::StringPtr v) { from_file_ = v.cStr(); return true; }
  Validity SetReplace() { replace_ = true; return true; }
  Validity SetAdopt() { adopt_ = true; return true; }
  Validity SetNoReload() { no_reload_ = true; return true; }
  Validity SetForce() { force_ = true; return true; }
  Validity SetId(kj::StringPtr v) { spec_.id = v.cStr(); return true; }

  Validity RunAdd() {
    RequireRoot("deployment add");
    LockConfigDir();
    std::string contents;
    if (!from_file_.empty()) {
      if (!spec_.allowed_uids.empty() || !spec_.allowed_gids.empty() ||
          !spec_.workspace_roots.empty() || spec_.run_as || !spec_.profiles.empty() ||
          spec_.max_sandboxes)
        return "--from-file takes the whole deployment: give no other deployment options";
      auto text = ReadWholeFile(from_file_);
      if (!text.ok()) Fail(absl::StrCat("cannot read ", from_file_, ": ", text.status().message()));
      contents = *std::move(text);
    } else {
      if (spec_.id.empty()) return "give the deployment's <id> (or --from-file)";
      if (spec_.allowed_uids.empty() && spec_.allowed_gids.empty())
        return "give at least one --allow-uid or --allow-gid";
      if (spec_.workspace_roots.empty()) return "give at least one --workspace-root";
      contents = DeploymentJson(spec_);
    }
    auto id = DeploymentIdOf(contents, from_file_.empty() ? "the deployment" : from_file_);
    if (!id.ok()) Fail(absl::StrCat("refused, nothing changed: ", id.status().message()));
    if (!spec_.id.empty() && *id != spec_.id)
      Fail(absl::StrCat("refused: ", from_file_, " defines deployment \"", *id, "\", not \"",
                        spec_.id, "\""));
    std::string target = absl::StrCat(config_dir_, "/deployments/", *id, ".json");
    auto existing = FileOfDeployment(config_dir_, *id);
    if (existing.ok()) {
      if (!replace_)
        Fail(absl::StrCat("refused: deployment \"", *id, "\" exists (", *existing,
                          "); --replace to change it"));
      target = *existing;
    } else {
      struct stat st;
      if (lstat(target.c_str(), &st) == 0)
        Fail(absl::StrCat("refused: ", target, " exists and defines another deployment"));
      // Sandboxes a forced remove left running are authorized by deployment id: a new
      // deployment of the same id would hand them (processes, workspaces, run-as identity) to
      // whoever it allows. Only on purpose.
      ResolveDirs();
      auto records = ListSandboxRecords(state_dir_);
      if (!records.ok())
        Fail(absl::StrCat("refused, nothing changed: cannot tell whether deployment \"", *id,
                          "\" still has sandboxes: ", records.status().message()));
      std::vector<std::string> orphans;
      for (const auto& r : *records)
        if (r.deployment == *id && !r.deleting) orphans.push_back(r.id);
      if (!orphans.empty() && !adopt_)
        Fail(absl::StrCat("refused, nothing changed: sandboxes of a removed deployment \"", *id,
                          "\" still run (", absl::StrJoin(orphans, ", "),
                          "); the new deployment's users would get them. Restart the service "
                          "(onRestart kill deletes them) or add it with --adopt-sandboxes"));
    }
    absl::Status owned = CheckConfigOwnership(config_dir_);
    if (!owned.ok())
      Fail(absl::StrCat("refused, nothing changed: ", owned.message(),
                        " (the privhelper would not load it)"));
    std::string relative = target.substr(config_dir_.size() + 1);
    auto validated = ValidateChange(config_dir_, {relative, contents});
    if (!validated.ok())
      Fail(absl::StrCat("refused, nothing changed: ", validated.status().message()));
    std::string deployments = config_dir_ + "/deployments";
    if (mkdir(deployments.c_str(), 0755) != 0 && errno != EEXIST)
      Fail(std::string(ErrnoStatus("mkdir", deployments).message()));
    absl::Status written = WriteFileAtomically(target, contents, 0644);
    if (!written.ok()) Fail(std::string(written.message()));
    std::string what = absl::StrCat(existing.ok() ? "replaced " : "wrote ", target);
    if (no_reload_) {
      std::printf("%s (not reloaded)\n", what.c_str());
      return true;
    }
    Reload(what);
    return true;
  }

  kj::MainFunc RemoveCommand() {
    kj::MainBuilder builder(
        context_, "paseo-sandbox-admin deployment remove",
        "Removes deployment <id> and reloads the service. Refused while the deployment has "
        "sandboxes (their owners would lose access to them: the broker authorizes every call "
        "by deployment) unless --force; forced, they keep running until the service stops, "
        "and adding the deployment again takes --adopt-sandboxes (whoever it allows gets them).");
    AddDirOptions(builder);
    return builder
        .addOption({"force"}, KJ_BIND_METHOD(*this, SetForce),
                   "Remove it even though it has sandboxes.")
        .addOption({"no-reload"}, KJ_BIND_METHOD(*this, SetNoReload),
                   "Only remove the file; do not signal the service.")
        .expectArg("<id>", KJ_BIND_METHOD(*this, SetId))
        .callAfterParsing(KJ_BIND_METHOD(*this, RunRemove))
        .build();
  }

  Validity RunRemove() {
    RequireRoot("deployment remove");
    LockConfigDir();
    ResolveDirs();
    auto file = FileOfDeployment(config_dir_, spec_.id);
    if (!file.ok()) Fail(std::string(file.status().message()));
    auto records = ListSandboxRecords(state_dir_);
    if (!records.ok())
      Fail(absl::StrCat("cannot tell whether it has sandboxes: ", records.status().message()));
    std::vector<std::string> live;
    for (const auto& r : *records)
      if (r.deployment == spec_.id && !r.deleting) live.push_back(r.id);
    if (!live.empty() && !force_)
      Fail(absl::StrCat("refused: deployment \"", spec_.id, "\" has ", live.size(),
                        " sandbox(es) (", absl::StrJoin(live, ", "),
                        "); their owners lose access with it: have them deleted first "
                        "(paseo-sandbox rm, as their owner), or --force"));
    absl::Status owned = CheckConfigOwnership(config_dir_);
    if (!owned.ok()) Fail(absl::StrCat("refused, nothing changed: ", owned.message()));
    std::string relative = file->substr(config_dir_.size() + 1);
    auto validated = ValidateChange(config_dir_, {relative, std::nullopt});
    if (!validated.ok())
      Fail(absl::StrCat("refused, nothing changed: ", validated.status().message()));
    absl::Status removed = RemoveFileDurably(*file);
    if (!removed.ok()) Fail(std::string(removed.message()));
    std::string what = absl::StrCat("removed ", *file);
    if (!live.empty()) absl::StrAppend(&what, " (", live.size(), " sandbox(es) keep running)");
    if (no_reload_) {
      std::printf("%s (not reloaded)\n", what.c_str());
      return true;
    }
    Reload(what);
    return true;
  }

  kj::MainFunc ListCommand() {
    kj::MainBuilder builder(context_, "paseo-sandbox-admin deployment list",
                            "Lists the deployments the config dir defines (as the privhelper "
                            "loads them) and how many sandboxes each has.");
    AddDirOptions(builder);
    return builder.callAfterParsing(KJ_BIND_METHOD(*this, RunList)).build();
  }

  Validity RunList() {
    auto config = LoadConfig(config_dir_);
    if (!config.ok()) Fail(std::string(config.status().message()));
    ResolveDirs();
    auto records = ListSandboxRecords(state_dir_);
    std::map<std::string, int> counts;
    if (records.ok())
      for (const auto& r : *records) ++counts[r.deployment];
    for (const auto& d : (*config)->deployments()) {
      std::vector<std::string> uids, gids, roots;
      for (uint32_t u : d.getAllowedUids()) uids.push_back(absl::StrCat(u));
      for (uint32_t g : d.getAllowedGids()) gids.push_back(absl::StrCat(g));
      for (auto r : d.getWorkspaceRoots())
        roots.push_back(absl::StrCat(r.getHostPath().cStr(), r.getClientPath().size() > 0 ? ":" : "",
                                     r.getClientPath().cStr()));
      std::string id = d.getId().cStr();
      std::printf("%s uids=%s gids=%s roots=%s profiles=%s sandboxes=%s\n", id.c_str(),
                  absl::StrJoin(uids, ",").c_str(), absl::StrJoin(gids, ",").c_str(),
                  absl::StrJoin(roots, ",").c_str(),
                  absl::StrJoin((*config)->ProfilesOf(d), ",").c_str(),
                  records.ok() ? absl::StrCat(counts[id]).c_str() : "?");
    }
    return true;
  }

  // ------------------------------------------------------------------ doctor

  kj::MainFunc DoctorCommand() {
    kj::MainBuilder builder(
        context_, "paseo-sandbox-admin doctor",
        "Checks the kernel, the config, the pinned runsc, the gVisor platform (by starting a "
        "sandbox), cgroups, the service and its socket, a user's access (--user), the rootfs "
        "versions and free space. Prints ok or FAIL per check, and a fix for each failure; "
        "exits 1 if any failed.");
    AddDirOptions(builder);
    return builder
        .addOptionWithArg({"user"}, KJ_BIND_METHOD(*this, SetUser), "<name>",
                          "Also check that this user may use the service.")
        .addOption({"no-probe"}, KJ_BIND_METHOD(*this, SetNoProbe),
                   "Do not start a sandbox to probe the platform.")
        .callAfterParsing(KJ_BIND_METHOD(*this, RunDoctorCommand))
        .build();
  }
  Validity SetUser(kj::StringPtr v) { user_ = v.cStr(); return true; }
  Validity SetNoProbe() { probe_ = false; return true; }

  Validity RunDoctorCommand() {
    DoctorOptions options;
    options.config_dir = config_dir_;
    options.cgroup_root = cgroup_root_;
    options.state_dir = state_dir_;
    options.run_dir = run_dir_;
    options.user = user_;
    options.probe = probe_;
    int failed = PrintResults(RunDoctor(options), stdout);
    if (failed > 0) Fail(absl::StrCat(failed, " check(s) failed"));
    return true;
  }

  // ------------------------------------------------------------------ status, gc

  kj::MainFunc StatusCommand() {
    kj::MainBuilder builder(context_, "paseo-sandbox-admin status",
                            "The service (privhelper and broker), sandboxes per deployment "
                            "(from their records), disk used by output logs. Exits 1 if the "
                            "service does not run.");
    AddDirOptions(builder);
    return builder.callAfterParsing(KJ_BIND_METHOD(*this, RunStatus)).build();
  }

  // The privhelper's child running the broker binary, or -1.
  static pid_t BrokerOf(pid_t privhelper) {
    DIR* d = opendir("/proc");
    if (d == nullptr) return -1;
    pid_t found = -1;
    while (dirent* e = readdir(d)) {
      int pid;
      if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
      std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
      std::string line;
      std::getline(stat, line);
      size_t close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream rest(line.substr(close + 2));
      std::string state;
      int ppid = 0;
      rest >> state >> ppid;
      if (ppid == privhelper && line.find("(paseo-sandbox-b") != std::string::npos) found = pid;
    }
    closedir(d);
    return found;
  }

  Validity RunStatus() {
    ResolveDirs();
    auto pid = RunningPrivhelper(run_dir_);
    bool running = pid.ok();
    if (running) {
      auto generation = ReadGeneration(run_dir_);
      pid_t broker = BrokerOf(*pid);
      std::printf("service: privhelper %d runs, broker %s, config generation %s\n", *pid,
                  broker > 0 ? absl::StrCat(broker).c_str() : "not running",
                  generation.ok()
                      ? absl::StrCat(generation->number, " ", generation->outcome).c_str()
                      : "unknown");
    } else {
      std::printf("service: not running (%s)\n", std::string(pid.status().message()).c_str());
    }
    auto records = ListSandboxRecords(state_dir_);
    if (!records.ok()) {
      std::printf("sandboxes: unknown (%s)\n", std::string(records.status().message()).c_str());
    } else {
      std::map<std::string, std::vector<const SandboxSummary*>> by_deployment;
      auto config = LoadConfig(config_dir_);
      if (config.ok())
        for (const auto& d : (*config)->deployments()) by_deployment[d.getId().cStr()];
      for (const auto& r : *records) by_deployment[r.deployment].push_back(&r);
      for (const auto& [deployment, sandboxes] : by_deployment) {
        bool configured = config.ok() && (*config)->FindDeployment(deployment) != nullptr;
        std::printf("deployment %s: %zu sandbox(es)%s\n", deployment.c_str(), sandboxes.size(),
                    configured || !config.ok() ? "" : " (not in the config any more)");
        for (const SandboxSummary* s : sandboxes)
          std::printf("  %s uid %u profile %s%s\n", s->id.c_str(), s->uid, s->profile.c_str(),
                      s->deleting ? " (deleting)" : "");
      }
    }
    uint64_t logs = DiskUsage(state_dir_ + "/broker");
    uint64_t bundles = DiskUsage(state_dir_ + "/bundles");
    std::printf("disk: %.1f MiB of output logs under %s/broker, %.1f MiB of bundles under %s/bundles\n",
                static_cast<double>(logs) / (1 << 20), state_dir_.c_str(),
                static_cast<double>(bundles) / (1 << 20), state_dir_.c_str());
    if (!running) Fail("the service does not run");
    return true;
  }

  // ------------------------------------------------------------------ metrics

  kj::MainFunc MetricsCommand() {
    kj::MainBuilder builder(
        context_, "paseo-sandbox-admin metrics",
        "Asks the running service on <run-dir>/operator.sock (root's alone) for what every "
        "sandbox of every deployment uses -- CPU, memory, host tasks, processes, output, network "
        "-- and for its own health -- all sandboxes against the service's bounds, broker restarts "
        "and reloads, audit lines, refused requests by reason, open connections and parked "
        "calls -- and prints them in the Prometheus text format. With --textfile-dir, writes "
        "them to <dir>/paseo_sandbox.prom instead (replaced whole), for node_exporter's textfile "
        "collector (run it from a timer or cron). If the service cannot "
        "be asked, the output is paseo_sandbox_up 0 alone and the exit status 1.");
    AddDirOptions(builder);
    builder.addOptionWithArg(
        {"textfile-dir"},
        [this](kj::StringPtr v) -> Validity {
          if (!v.startsWith("/")) return "must be an absolute path";
          textfile_dir_ = v.cStr();
          return true;
        },
        "<dir>", "Write <dir>/paseo_sandbox.prom (e.g. /var/lib/prometheus/node-exporter).");
    return builder.callAfterParsing(KJ_BIND_METHOD(*this, RunMetrics)).build();
  }

  Validity RunMetrics() {
    ResolveDirs();
    std::string text;
    std::string socket = run_dir_ + "/operator.sock";
    kj::Maybe<kj::Exception> failed = kj::runCatchingExceptions([&] {
      auto io = kj::setupAsyncIo();
      kj::Own<kj::AsyncIoStream> stream;
      kj::Own<capnp::TwoPartyClient> client;
      auto asked = io.provider->getNetwork()
                       .parseAddress(kj::str("unix:", socket))
                       .then([](kj::Own<kj::NetworkAddress> a) { return a->connect(); })
                       .then([&](kj::Own<kj::AsyncIoStream> connected) {
                         stream = kj::mv(connected);
                         client = kj::heap<capnp::TwoPartyClient>(*stream);
                         auto op = client->bootstrap().castAs<operator_api::Operator>();
                         return op.metricsRequest().send().then(
                             [&text](capnp::Response<operator_api::Operator::MetricsResults> r) {
                               text = PrometheusText(r);
                             });
                       });
      io.provider->getTimer()
          .timeoutAfter(kMetricsPatience, kj::mv(asked))
          .wait(io.waitScope);
    });
    bool up = failed == nullptr;
    if (!up) text = PrometheusDown();
    if (!textfile_dir_.empty()) {
      absl::Status written = WriteTextfile(textfile_dir_, text);
      if (!written.ok()) Fail(std::string(written.message()));
    } else {
      std::fputs(text.c_str(), stdout);
    }
    KJ_IF_MAYBE(e, failed) {
      Fail(absl::StrCat("the service could not be asked on ", socket, ": ",
                        e->getDescription().cStr()));
    }
    return true;
  }

  kj::MainFunc GcCommand() {
    kj::MainBuilder builder(
        context_, "paseo-sandbox-admin gc",
        "Asks the running privhelper (SIGHUP, pid from <run-dir>/privhelper.pid) to reload its "
        "config and collect runsc containers outside its registry, stale bundles and cgroups; "
        "live sandboxes are left alone. Without a running privhelper, the same collection "
        "runs at its next start.");
    AddDirOptions(builder);
    return builder.callAfterParsing(KJ_BIND_METHOD(*this, RunGc)).build();
  }

  Validity RunGc() {
    ResolveDirs();
    auto pid = RunningPrivhelper(run_dir_);
    if (!pid.ok())
      Fail(absl::StrCat(pid.status().message(), "; it collects garbage at start"));
    auto generation = RequestReload(run_dir_, kReloadPatience);
    if (!generation.ok()) Fail(std::string(generation.status().message()));
    std::printf("garbage collection requested from privhelper %d (see its log)\n", *pid);
    if (!generation->applied())
      std::printf("note: its config reload was refused (%s); it keeps its previous "
                  "configuration\n", generation->outcome.c_str());
    return true;
  }

  kj::ProcessContext& context_;
  std::string config_dir_ = "/etc/paseo-sandbox";
  std::string state_dir_;
  std::string run_dir_;
  std::string cgroup_root_ = "/sys/fs/cgroup";
  DeploymentSpec spec_;
  std::string from_file_;
  std::string textfile_dir_;
  static constexpr kj::Duration kMetricsPatience = 10 * kj::SECONDS;
  bool replace_ = false;
  bool adopt_ = false;
  int config_lock_ = -1;
  bool no_reload_ = false;
  bool force_ = false;
  std::string user_;
  bool probe_ = true;
};

}  // namespace
}  // namespace paseo::admin

KJ_MAIN(paseo::admin::AdminMain)
