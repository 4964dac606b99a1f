// See doctor.h.
#include "admin/doctor.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <set>
#include <thread>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "admin/service_state.h"
#include "common/spawn.h"
#include "common/status.h"
#include "privhelper/runsc_pin.h"
#include "privhelper/runsc_platform.h"
#include "privhelper/runsc_probe.h"

namespace paseo::admin {
namespace {

CheckResult Ok(std::string name, std::string detail) {
  return {std::move(name), true, std::move(detail), ""};
}
CheckResult Fail(std::string name, std::string detail, std::string fix) {
  return {std::move(name), false, std::move(detail), std::move(fix)};
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// The directory itself if it exists, else its nearest existing ancestor (where the privhelper
// would have to create it).
std::string NearestExisting(std::string path) {
  while (!path.empty() && path != "/" && !Exists(path)) path = path.substr(0, path.rfind('/'));
  return path.empty() ? "/" : path;
}

std::string Gib(uint64_t bytes) {
  return absl::StrCat(bytes / (1ull << 30), ".", (bytes % (1ull << 30)) * 10 / (1ull << 30), " GiB");
}

}  // namespace

CheckResult CheckKernel(const std::string& release) {
  std::vector<std::string> parts = absl::StrSplit(release, absl::ByAnyChar(".-"));
  int major = 0, minor = 0;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &major) ||
      !absl::SimpleAtoi(parts[1], &minor))
    return Fail("kernel", absl::StrCat("cannot read the version of \"", release, "\""),
                "run on Linux 5.6 or later");
  if (major < kMinKernelMajor || (major == kMinKernelMajor && minor < kMinKernelMinor))
    return Fail("kernel", absl::StrCat("Linux ", release, " is older than ", kMinKernelMajor, ".",
                                       kMinKernelMinor, " (openat2 and pidfds are needed)"),
                absl::StrCat("upgrade the kernel to ", kMinKernelMajor, ".", kMinKernelMinor,
                             " or later"));
  return Ok("kernel", "Linux " + release);
}

CheckResult CheckConfig(const std::string& config_dir, std::unique_ptr<Config>* config) {
  auto loaded = LoadConfig(config_dir);
  if (!loaded.ok())
    return Fail("config", std::string(loaded.status().message()),
                absl::StrCat("correct the file named above (the privhelper refuses to start "
                             "with it); `paseo-sandbox-privhelper --check-config --config-dir ",
                             config_dir, "` checks it again"));
  absl::Status owned = CheckConfigOwnership(config_dir);
  if (!owned.ok())
    return Fail("config", std::string(owned.message()),
                absl::StrCat("chown -R root:root ", config_dir, " && chmod -R go-w ", config_dir));
  std::string detail = absl::StrCat(config_dir, ": ", (*loaded)->deployments().size(),
                                    " deployment(s), ", (*loaded)->profiles().size(),
                                    " profile(s)");
  *config = std::move(*loaded);
  return Ok("config", detail);
}

CheckResult CheckRunsc(const config::RunscPin::Reader& pin) {
  std::string path = pin.getPath().cStr();
  auto fd = OpenPinnedRunsc(pin);
  if (fd.ok()) {
    absl::StatusOr<std::string> version = RunscVersion(*fd);
    close(*fd);
    if (!version.ok())
      return Fail("runsc", absl::StrCat(path, " matches the pinned sha256 but ", version.status().message()),
                  "pin a gVisor runsc: installer/install-deps installs the project's pinned one");
    std::string detail = absl::StrCat(path, " matches the pinned sha256 ", pin.getSha256().cStr(),
                                      "; runsc version ", *version);
    // gVisor versions are 0.0~YYYYMMDD.N; the project pins 20240729 (installer/runsc-pin).
    // Older releases (bookworm's 20221219) stay supported, on ptrace only.
    if (absl::StrContains(*version, "~") && version->substr(version->find('~') + 1) < "20240729")
      absl::StrAppend(&detail, " (older than the project's pinned 20240729: supported, on ptrace "
                               "only; installer/install-deps then installer/install pin 20240729)");
    return Ok("runsc", detail);
  }
  if (fd.status().code() == absl::StatusCode::kNotFound)
    return Fail("runsc", std::string(fd.status().message()),
                absl::StrCat("install gVisor's runsc at ", path,
                             " (installer/install-deps then installer/install put the pinned 20240729 there), or set "
                             "runsc.path in helper.json"));
  // Tell a digest mismatch apart from an unsafe owner: the fixes differ.
  int raw = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  auto actual = raw >= 0 ? Sha256OfFd(raw, path) : absl::StatusOr<std::string>(absl::UnknownError(""));
  if (raw >= 0) close(raw);
  if (actual.ok() && *actual != pin.getSha256().cStr())
    return Fail("runsc",
                absl::StrCat(path, ": sha256 ", *actual, " does not match the pinned ",
                             pin.getSha256().cStr()),
                absl::StrCat("if this runsc is the one you trust (sha256sum ", path,
                             "), set runsc.sha256 in helper.json to ", *actual,
                             " and restart the service; otherwise reinstall the pinned runsc"));
  return Fail("runsc", std::string(fd.status().message()),
              absl::StrCat("chown root:root ", path, " && chmod go-w ", path));
}

CheckResult ProbePlatform(const config::RunscPin::Reader& pin, const std::string& scratch_parent,
                          const std::string& record_path) {
  std::string name = "platform";
  // The platform the privhelper uses: the same choice from the same runsc flag help and the
  // same measured record (privhelper/runsc_platform.h), then a real sandbox on it.
  // The verified runsc (owner and digest checked on this very fd), executed from the fd: a file
  // swapped in at the path after the check never runs as root.
  absl::StatusOr<int> runsc_fd = OpenPinnedRunsc(pin);
  if (!runsc_fd.ok())
    return Fail(name, "not probed: " + std::string(runsc_fd.status().message()),
                "fix the runsc check first");
  absl::Cleanup close_runsc = [&] { close(*runsc_fd); };
  const RunscFlagsInfo runsc_flags = ReadRunscFlags(*runsc_fd);
  absl::StatusOr<PlatformChoice> choice =
      ChoosePlatformFromProbe(pin.getPlatform().cStr(), runsc_flags.platforms);
  if (!choice.ok())
    return Fail(name, std::string(choice.status().message()),
                "set runsc.platform in helper.json to \"auto\" (or to one the pinned runsc has) "
                "and restart the service");
  if (!choice->measure.empty()) {
    // "auto" between systrap and ptrace: what the privhelper measured and recorded. doctor
    // never measures (it takes seconds and would race a starting privhelper's record).
    absl::StatusOr<RunscProbe> probe = ReadRunscProbe(record_path, pin.getSha256().cStr());
    if (probe.ok() && !probe->platform.empty()) {
      choice->platform = probe->platform;
      choice->why = DescribeMeasuredPlatform(*probe, record_path);
    } else {
      choice->why = absl::StrCat(
          "runsc.platform auto: not measured on this host for this runsc and kernel yet (",
          record_path, "); the privhelper measures systrap against ptrace at its next start. "
          "Probing runsc's own default, ", choice->platform);
    }
  }
  std::string platform = choice->platform;
  // No network at all (never the host's): the probe only shows the platform starts a sandbox.
  absl::StatusOr<absl::Duration> ran =
      RunPlatformSandbox(*runsc_fd, platform, scratch_parent, {"/bin/true"}, absl::Seconds(60), {},
                         runsc_flags.FixedFlags());
  if (ran.ok())
    return Ok(name, absl::StrCat(choice->why, ": runsc --platform=", platform, " started a sandbox"));
  std::string path = pin.getPath().cStr();
  return Fail(name,
              absl::StrCat("runsc --platform=", platform, " could not start a sandbox: ",
                           ran.status().message()),
              platform == "kvm"
                  ? "give the host /dev/kvm (nested virtualization on a VM), or set "
                    "runsc.platform to \"auto\" in helper.json"
                  : "run `" + path + " --platform=" + platform +
                        " --network=none do /bin/true` as root to see why; if ptrace is "
                        "blocked (a seccomp or LSM policy, kernel.yama.ptrace_scope=3), allow "
                        "it or use \"kvm\" where /dev/kvm exists");
}

CheckResult CheckCgroups(const std::string& cgroup_root, const std::string& parent) {
  std::string name = "cgroup";
  std::vector<std::string> dirs;  // where the sandboxes' cgroups go, one per hierarchy
  std::string version;
  if (Exists(cgroup_root + "/cgroup.controllers")) {
    version = "v2";
    dirs.push_back(cgroup_root + parent);
  } else {
    version = "v1";
    std::vector<std::string> missing;
    for (const char* controller : {"memory", "pids", "cpu"}) {
      std::string hierarchy = absl::StrCat(cgroup_root, "/", controller);
      if (!Exists(hierarchy)) missing.push_back(controller);
      else dirs.push_back(hierarchy + parent);
    }
    if (dirs.empty())
      return Fail(name, absl::StrCat("no cgroup hierarchy under ", cgroup_root),
                  absl::StrCat("mount cgroup2 at ", cgroup_root,
                               " (mount -t cgroup2 none ", cgroup_root, ")"));
    if (!missing.empty())
      return Fail(name,
                  absl::StrCat("cgroup v1 without the ", absl::StrJoin(missing, ", "),
                               " hierarchy under ", cgroup_root),
                  "mount the missing controllers, or boot with cgroup v2 "
                  "(systemd.unified_cgroup_hierarchy=1)");
  }
  for (const auto& dir : dirs) {
    std::string at = NearestExisting(dir);
    if (access(at.c_str(), W_OK) != 0)
      return Fail(name,
                  absl::StrCat("cgroup ", version, ": ", at, " is not writable (",
                               std::strerror(errno), "), so ", dir, " cannot be ",
                               at == dir ? "written" : "created"),
                  absl::StrCat("run the service as root on a read-write cgroup mount, or "
                               "delegate ", at, " to it; or set cgroupParent in helper.json "
                               "to a cgroup it may manage"));
  }
  return Ok(name, absl::StrCat("cgroup ", version, "; ", absl::StrJoin(dirs, ", "),
                               " can be created or written"));
}

CheckResult CheckSocket(const std::string& run_dir, const std::string& socket_group) {
  std::string name = "socket";
  std::string path = run_dir + "/supervisor.sock";
  struct stat st;
  if (lstat(path.c_str(), &st) != 0)
    return Fail(name, absl::StrCat(path, ": ", std::strerror(errno)),
                "start the service (systemctl start paseo-sandbox); its log says why it stopped");
  if (!S_ISSOCK(st.st_mode))
    return Fail(name, path + " is not a socket",
                "remove it and restart the service (something else wrote there)");
  group* gr = getgrnam(socket_group.c_str());
  std::vector<std::string> wrong;
  if (gr == nullptr || st.st_gid != gr->gr_gid)
    wrong.push_back(absl::StrCat("group gid ", st.st_gid, " is not ", socket_group));
  if ((st.st_mode & 07777) != 0660)
    wrong.push_back(absl::StrFormat("mode %o is not 660", st.st_mode & 07777));
  if (st.st_uid != 0) wrong.push_back(absl::StrCat("owner uid ", st.st_uid, " is not root"));
  if (!wrong.empty())
    return Fail(name, absl::StrCat(path, ": ", absl::StrJoin(wrong, "; ")),
                "restart the service (the privhelper makes the socket root:" + socket_group +
                    " 0660); check that nothing else changes it");
  return Ok(name, absl::StrCat(path, " root:", socket_group, " 0660"));
}

CheckResult CheckUser(const std::string& user, const std::string& socket_group,
                      const Config* config) {
  std::string name = "user " + user;
  passwd* pw = getpwnam(user.c_str());
  if (pw == nullptr)
    return Fail(name, "no such user", "name an existing user (--user)");
  uid_t uid = pw->pw_uid;
  gid_t primary = pw->pw_gid;
  group* gr = getgrnam(socket_group.c_str());
  if (gr == nullptr)
    return Fail(name, absl::StrCat("the socket group ", socket_group, " does not exist"),
                absl::StrCat("groupadd --system ", socket_group));
  gid_t socket_gid = gr->gr_gid;
  int count = 64;
  std::vector<gid_t> groups(static_cast<size_t>(count));
  if (getgrouplist(user.c_str(), primary, groups.data(), &count) < 0) {
    groups.resize(static_cast<size_t>(count));
    getgrouplist(user.c_str(), primary, groups.data(), &count);
  }
  groups.resize(static_cast<size_t>(count));
  bool member = std::find(groups.begin(), groups.end(), socket_gid) != groups.end();
  if (!member)
    return Fail(name,
                absl::StrCat(user, " (uid ", uid, ") is not in group ", socket_group,
                             ", so it cannot connect to the socket"),
                absl::StrCat("usermod -aG ", socket_group, " ", user,
                             " (then log in again, or restart the user's daemon)"));
  if (config != nullptr) {
    std::vector<std::string> allowed;
    for (const auto& d : config->deployments()) {
      bool by_uid = false, by_gid = false;
      for (uint32_t u : d.getAllowedUids()) by_uid |= u == uid;
      for (uint32_t g : d.getAllowedGids())
        by_gid |= std::find(groups.begin(), groups.end(), g) != groups.end();
      if (by_uid || by_gid) allowed.emplace_back(d.getId().cStr());
    }
    if (allowed.empty())
      return Fail(name,
                  absl::StrCat(user, " (uid ", uid, ") is in group ", socket_group,
                               " but no deployment allows it"),
                  absl::StrCat("paseo-sandbox-admin deployment add <id> --allow-uid ", uid,
                               " --workspace-root <dir> ..., or add ", uid,
                               " to allowedUids of a deployment"));
    return Ok(name, absl::StrCat("in group ", socket_group, "; allowed by ",
                                 absl::StrJoin(allowed, ", ")));
  }
  return Ok(name, "in group " + socket_group);
}

CheckResult CheckRootfs(const Config& config, const std::string& state_dir) {
  std::string name = "rootfs";
  std::set<std::string> versions;
  std::string fallback = config.helper().getRootfsVersion().cStr();
  for (const auto& p : config.profiles())
    versions.insert(p.getRootfsVersion().size() > 0 ? p.getRootfsVersion().cStr() : fallback);
  if (versions.empty()) versions.insert(fallback);
  std::vector<std::string> missing, present;
  for (const auto& v : versions) {
    std::string path = absl::StrCat(state_dir, "/rootfs/", v, "/rootfs");
    struct stat st;
    if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) missing.push_back(path);
    else present.push_back(v);
  }
  if (!missing.empty())
    return Fail(name, absl::StrCat("missing: ", absl::StrJoin(missing, ", ")),
                absl::StrCat("build it with rootfs/build-rootfs --out ", state_dir,
                             "/rootfs (it prints the version; name that version in the "
                             "profile's or helper.json's rootfsVersion)"));
  return Ok(name, absl::StrCat("present: ", absl::StrJoin(present, ", ")));
}

CheckResult CheckFreeSpace(const std::string& state_dir, uint64_t min_free) {
  std::string name = "disk";
  struct statvfs vfs;
  if (statvfs(NearestExisting(state_dir).c_str(), &vfs) != 0)
    return Fail(name, absl::StrCat("statvfs ", state_dir, ": ", std::strerror(errno)),
                "create the state dir (the privhelper makes it at start)");
  uint64_t free_bytes = static_cast<uint64_t>(vfs.f_bavail) * vfs.f_frsize;
  if (free_bytes < min_free)
    return Fail(name,
                absl::StrCat(Gib(free_bytes), " free on the filesystem of ", state_dir,
                             " (less than ", Gib(min_free), ")"),
                absl::StrCat("free space there: delete finished sandboxes (paseo-sandbox rm), "
                             "whose output logs are under ", state_dir,
                             "/broker, or remove unused rootfs versions under ", state_dir,
                             "/rootfs"));
  return Ok(name, absl::StrCat(Gib(free_bytes), " free on the filesystem of ", state_dir));
}

CheckResult CheckService(const std::string& run_dir) {
  auto pid = RunningPrivhelper(run_dir);
  if (!pid.ok())
    return Fail("service", std::string(pid.status().message()),
                "systemctl start paseo-sandbox (journalctl -u paseo-sandbox says why it stopped)");
  auto generation = ReadGeneration(run_dir);
  std::string config = generation.ok() ? absl::StrCat(", config generation ", generation->number,
                                                      " ", generation->outcome)
                                       : "";
  if (generation.ok() && !generation->applied())
    return Fail("service", absl::StrCat("privhelper ", *pid, " runs", config),
                "correct the config and reload (paseo-sandbox-admin gc); the running "
                "configuration is the previous one");
  return Ok("service", absl::StrCat("privhelper ", *pid, " runs", config));
}

std::vector<CheckResult> RunDoctor(const DoctorOptions& options) {
  std::vector<CheckResult> results;
  utsname u;
  results.push_back(uname(&u) == 0 ? CheckKernel(u.release)
                                   : Fail("kernel", "uname failed", "run on Linux"));
  std::unique_ptr<Config> config;
  results.push_back(CheckConfig(options.config_dir, &config));
  if (config == nullptr) {
    // Everything else reads the config: without it there is nothing more to check.
    if (!options.user.empty()) results.push_back(CheckUser(options.user, "paseo-sandbox", nullptr));
    return results;
  }
  auto helper = config->helper();
  std::string state_dir = options.state_dir.empty() ? helper.getStateDir().cStr() : options.state_dir;
  std::string run_dir = options.run_dir.empty() ? helper.getRunDir().cStr() : options.run_dir;
  results.push_back(CheckRunsc(helper.getRunsc()));
  if (options.probe) {
    if (results.back().ok) results.push_back(ProbePlatform(helper.getRunsc(), options.scratch_parent,
                                                                state_dir + "/runsc-probe"));
    else results.push_back(Fail("platform", "not probed: runsc is not the pinned one",
                                "fix the runsc check first"));
  }
  results.push_back(CheckCgroups(options.cgroup_root, helper.getCgroupParent().cStr()));
  results.push_back(CheckService(run_dir));
  results.push_back(CheckSocket(run_dir, helper.getSocketGroup().cStr()));
  if (!options.user.empty())
    results.push_back(CheckUser(options.user, helper.getSocketGroup().cStr(), config.get()));
  results.push_back(CheckRootfs(*config, state_dir));
  results.push_back(CheckFreeSpace(state_dir));
  return results;
}

int PrintResults(const std::vector<CheckResult>& results, FILE* out) {
  int failed = 0;
  for (const auto& r : results) {
    std::fprintf(out, "%s %s: %s\n", r.ok ? "ok  " : "FAIL", r.name.c_str(), r.detail.c_str());
    if (!r.ok) {
      ++failed;
      std::fprintf(out, "     fix: %s\n", r.fix.c_str());
    }
  }
  return failed;
}

}  // namespace paseo::admin
