// See bundle.h. Field choices follow the OCI runtime spec 1.0.2 as runsc reads it.
#include "privhelper/bundle.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/json_writer.h"
#include "common/search_path.h"

namespace paseo {
namespace {

// Paths masked or made read-only exactly as runc's default spec does; gVisor emulates most of
// them, but the spec states the intent and keeps other runtimes safe too.
const std::vector<std::string> kMaskedPaths = {
    "/proc/acpi",     "/proc/asound",       "/proc/kcore",      "/proc/keys",
    "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
    "/proc/scsi",     "/sys/firmware",
};
const std::vector<std::string> kReadonlyPaths = {
    "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
};

void WriteUser(JsonWriter& w, uint32_t uid, uint32_t gid) {
  w.Key("user");
  w.BeginObject();
  w.Key("uid");
  w.Int(uid);
  w.Key("gid");
  w.Int(gid);
  w.Key("additionalGids");
  w.BeginArray();
  w.Int(gid);
  w.EndArray();
  w.EndObject();
}

// No capabilities in any set, and no way to gain any.
void WriteNoCapabilities(JsonWriter& w) {
  w.Key("capabilities");
  w.BeginObject();
  for (const char* set : {"bounding", "effective", "inheritable", "permitted", "ambient"}) {
    w.Key(set);
    w.BeginArray();
    w.EndArray();
  }
  w.EndObject();
  w.Key("noNewPrivileges");
  w.Bool(true);
}

void WriteRlimit(JsonWriter& w, const char* type, uint64_t value) {
  w.BeginObject();
  w.Key("type");
  w.String(type);
  w.Key("hard");
  w.Int(static_cast<int64_t>(value));
  w.Key("soft");
  w.Int(static_cast<int64_t>(value));
  w.EndObject();
}

// `max_processes` (0: left out) becomes RLIMIT_NPROC, which gVisor's sentry enforces on the
// agent's uid across the sandbox. A `runsc exec` process whose rlimits leave it out inherits
// the container's (measured on runsc 20221219), so process.json does not repeat it.
void WriteRlimits(JsonWriter& w, uint32_t max_processes) {
  w.Key("rlimits");
  w.BeginArray();
  WriteRlimit(w, "RLIMIT_NOFILE", 65536);
  if (max_processes > 0) WriteRlimit(w, "RLIMIT_NPROC", max_processes);
  w.EndArray();
}

// linux.resources: what runsc applies to the sandbox's host cgroup.
void WriteResources(JsonWriter& w, const SandboxLimits& limits) {
  w.Key("resources");
  w.BeginObject();
  if (limits.memory_bytes > 0) {
    w.Key("memory");
    w.BeginObject();
    w.Key("limit");
    w.Int(static_cast<int64_t>(limits.memory_bytes));
    w.EndObject();
  }
  // Every sandbox starts at the base weight; a client's process start raises it for a moment
  // (cpu_priority.h).
  w.Key("cpu");
  w.BeginObject();
  w.Key("shares");
  w.Int(static_cast<int64_t>(kBaseCpuShares));
  if (limits.cpu_millis > 0) {
    w.Key("quota");
    w.Int(static_cast<int64_t>(limits.cpu_millis * kCpuPeriodMicros / 1000));
    w.Key("period");
    w.Int(static_cast<int64_t>(kCpuPeriodMicros));
  }
  w.EndObject();
  if (limits.max_host_tasks > 0) {
    w.Key("pids");
    w.BeginObject();
    w.Key("limit");
    w.Int(static_cast<int64_t>(limits.max_host_tasks));
    w.EndObject();
  }
  w.EndObject();
}

void WriteMount(JsonWriter& w, const std::string& destination, const std::string& type,
                const std::string& source, const std::vector<std::string>& options) {
  w.BeginObject();
  w.Key("destination");
  w.String(destination);
  w.Key("type");
  w.String(type);
  w.Key("source");
  w.String(source);
  w.Key("options");
  w.StringArray(options);
  w.EndObject();
}

}  // namespace

std::string SandboxCgroup(const std::string& parent, const std::string& sandbox_id) {
  return parent + "/" + sandbox_id;
}

std::vector<std::string> SandboxInitArgv(bool spawner) {
  if (spawner) return {kShimPath, "spawner", "--init"};
  return {kShimPath, "init"};
}

std::vector<std::string> TtyArgv(uint16_t rows, uint16_t cols,
                                 const std::vector<std::string>& argv) {
  std::vector<std::string> out = {kShimPath, "tty", absl::StrCat(rows), absl::StrCat(cols)};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> ShimExecArgv(const std::vector<std::string>& env,
                                      const std::vector<std::string>& argv,
                                      const std::string& search_path, bool exact,
                                      bool report_unkept, bool runsc_exec) {
  bool home = false;
  const std::string* path = nullptr;
  for (const auto& e : env) {
    home |= absl::StartsWith(e, "HOME=");
    if (path == nullptr && absl::StartsWith(e, "PATH=")) path = &e;
  }
  bool unset_home = exact && runsc_exec && !home;
  bool unset_path = exact && runsc_exec && path == nullptr;
  bool lookup = exact && runsc_exec &&
                (path == nullptr || absl::string_view(*path).substr(5) != search_path);
  if (!unset_home && !unset_path && !lookup && !report_unkept) return argv;
  std::vector<std::string> out = {kShimPath, "exec"};
  if (unset_home) out.emplace_back("--unset=HOME");
  if (unset_path) out.emplace_back("--unset=PATH");
  out.emplace_back("--");
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

std::vector<std::string> ShimEnv(const std::vector<std::string>& to_run,
                                 const std::string& search_path, bool report_unkept) {
  if (to_run.empty() || to_run[0] != kShimPath) return {};
  // Both, always, after everything else: the shim takes the last entry of each name (and only
  // that one). Clients may not send these names (common/request_checks.h kReservedEnvPrefix).
  return {absl::StrCat(kShimSearchPathEnv, "=", search_path),
          absl::StrCat(kShimReportUnkeptEnv, "=", report_unkept ? "1" : "0")};
}

namespace {

// "PATH=<prefix...>:<rest>". An empty rest adds no trailing ':', which PATH would read as the
// working directory.
std::string PrefixPath(absl::string_view path_entry, const std::vector<std::string>& prefix) {
  absl::string_view rest = path_entry.substr(5);  // after "PATH="
  std::string out = absl::StrCat("PATH=", absl::StrJoin(prefix, ":"));
  if (!rest.empty()) absl::StrAppend(&out, ":", rest);
  return out;
}

}  // namespace

std::string KeptFileText(const std::vector<std::string>& kept) {
  std::string out;
  for (const auto& k : kept) absl::StrAppend(&out, k, "\n");
  return out;
}

std::vector<std::string> ProcessEnv(const std::vector<std::string>& env, bool tty,
                                    const std::vector<std::string>& path_prefix, bool exact,
                                    const std::string& home, const std::vector<std::string>& kept) {
  std::vector<std::string> out;
  bool has_path = false;
  bool has_term = false;
  bool has_home = false;
  bool has_kept = false;
  std::string kept_prefix = absl::StrCat(kKeptEnvName, "=");
  for (const auto& e : env) {
    has_path |= e.rfind("PATH=", 0) == 0;
    has_term |= e.rfind("TERM=", 0) == 0;
    has_home |= e.rfind("HOME=", 0) == 0;
    has_kept |= e.rfind(kept_prefix, 0) == 0;
  }
  if (!has_path && !exact) out.push_back(absl::StrCat("PATH=", kDefaultSearchPath));
  if (tty && !has_term && !exact) out.emplace_back("TERM=xterm");
  if (!home.empty() && !has_home && !exact) out.push_back("HOME=" + home);
  if (!kept.empty() && !has_kept && !exact) out.push_back(kept_prefix + absl::StrJoin(kept, ":"));
  out.insert(out.end(), env.begin(), env.end());
  if (!path_prefix.empty() && !exact) {
    // Every PATH entry: with duplicates, which one a program reads is its libc's choice.
    for (auto& e : out) {
      if (e.rfind("PATH=", 0) == 0) e = PrefixPath(e, path_prefix);
    }
  }
  return out;
}

std::string RenderOciConfig(const BundleSpec& spec) {
  JsonWriter w;
  w.BeginObject();
  w.Key("ociVersion");
  w.String("1.0.2");

  w.Key("process");
  w.BeginObject();
  w.Key("terminal");
  w.Bool(false);
  WriteUser(w, spec.uid, spec.gid);
  w.Key("args");
  w.StringArray(SandboxInitArgv(spec.init_is_spawner));
  w.Key("env");
  w.StringArray(ProcessEnv({}, false, {}, false, spec.home));
  w.Key("cwd");
  w.String("/");
  WriteNoCapabilities(w);
  WriteRlimits(w, spec.limits.max_processes);
  w.EndObject();

  w.Key("root");
  w.BeginObject();
  w.Key("path");
  w.String(spec.rootfs);
  w.Key("readonly");
  w.Bool(true);
  w.EndObject();

  w.Key("hostname");
  w.String(spec.hostname);

  w.Key("mounts");
  w.BeginArray();
  WriteMount(w, "/proc", "proc", "proc", {"nosuid", "noexec", "nodev"});
  WriteMount(w, "/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"});
  WriteMount(w, "/dev/pts", "devpts", "devpts",
             {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"});
  WriteMount(w, "/dev/shm", "tmpfs", "shm",
             {"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"});
  WriteMount(w, "/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"});
  WriteMount(w, "/tmp", "tmpfs", "tmpfs",
             {"nosuid", "nodev", "mode=1777", absl::StrCat("size=", spec.tmpfs_bytes)});
  if (!spec.home.empty()) {
    // gVisor's own tmpfs (sandbox memory, under the sandbox's memory limit), so nothing of the
    // home exists on the host. uid/gid/mode make it the agent's before anything runs.
    WriteMount(w, spec.home, "tmpfs", "tmpfs",
               {"nosuid", "nodev", "mode=0700", absl::StrCat("uid=", spec.uid),
                absl::StrCat("gid=", spec.gid), absl::StrCat("size=", spec.home_bytes)});
  }
  if (!spec.shim.empty()) {
    WriteMount(w, kShimPath, "bind", spec.shim, {"bind", "ro", "nosuid", "nodev"});
  }
  if (!spec.kept_file.empty()) {
    WriteMount(w, kKeptPath, "bind", spec.kept_file, {"bind", "ro", "nosuid", "nodev", "noexec"});
  }
  for (const auto& m : spec.mounts) {
    // Non-recursive bind: the staging path is already a single root-owned bind of the resolved
    // workspace, and nothing mounted beneath it on the host should follow into the sandbox.
    WriteMount(w, m.destination, "bind", m.source,
               {"bind", m.read_only ? "ro" : "rw", "nosuid", "nodev"});
  }
  w.EndArray();

  w.Key("linux");
  w.BeginObject();
  w.Key("namespaces");
  w.BeginArray();
  for (const char* ns : {"pid", "ipc", "uts", "mount", "network"}) {
    w.BeginObject();
    w.Key("type");
    w.String(ns);
    if (std::string(ns) == "network" && !spec.netns_path.empty()) {
      w.Key("path");
      w.String(spec.netns_path);
    }
    w.EndObject();
  }
  w.EndArray();
  if (!spec.cgroups_path.empty()) {
    // An explicit path keeps every sandbox's cgroups under one parent, where cleanup and
    // garbage collection can find them (runsc would otherwise use the bare id at the top).
    w.Key("cgroupsPath");
    w.String(spec.cgroups_path);
  }
  WriteResources(w, spec.limits);
  w.Key("maskedPaths");
  w.StringArray(kMaskedPaths);
  w.Key("readonlyPaths");
  w.StringArray(kReadonlyPaths);
  w.EndObject();

  w.EndObject();
  return w.Take();
}

std::string RenderProcessJson(const ExecSpec& spec) {
  JsonWriter w;
  w.BeginObject();
  w.Key("terminal");
  w.Bool(false);
  WriteUser(w, spec.uid, spec.gid);
  w.Key("args");
  w.StringArray(spec.argv);
  w.Key("env");
  std::vector<std::string> env =
      ProcessEnv(spec.env, spec.tty, spec.path_prefix, spec.exact_env, spec.home, spec.kept);
  env.insert(env.end(), spec.shim_env.begin(), spec.shim_env.end());
  w.StringArray(env);
  w.Key("cwd");
  w.String(spec.cwd);
  WriteNoCapabilities(w);
  WriteRlimits(w, 0);
  w.EndObject();
  return w.Take();
}

}  // namespace paseo
