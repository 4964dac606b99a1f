// `paseo-sandbox-admin doctor`: checks a host for everything the service needs and says, for
// each failed check, how to fix it. Each check is a function over paths the caller chooses (the
// config dir, the cgroup mount, the state dir), so most of them are tested unprivileged on
// fakes; the platform probe really starts a sandbox. Usage:
//   DoctorOptions options{.config_dir = "/etc/paseo-sandbox", .user = "alice"};
//   std::vector<CheckResult> results = RunDoctor(options);
//   PrintResults(results, stdout);  // "ok   ..." / "FAIL ..." + "     fix: ..."
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "privhelper/config.h"

namespace paseo::admin {

struct CheckResult {
  std::string name;    // "runsc", "cgroup", ...
  bool ok = false;
  std::string detail;  // what was found
  std::string fix;     // for a failure: what to do about it
};

// The oldest kernel the service runs on: openat2 (RESOLVE_BENEATH for workspace resolution)
// came in 5.6, pidfds in 5.3.
inline constexpr int kMinKernelMajor = 5;
inline constexpr int kMinKernelMinor = 6;
// Below this much free space on the state dir's filesystem, doctor fails.
inline constexpr uint64_t kMinFreeBytes = 1ull << 30;

// `release` is uname's (e.g. "6.1.0-18-amd64").
CheckResult CheckKernel(const std::string& release);
// Loads the config with the privhelper's code; `config` is set on success.
CheckResult CheckConfig(const std::string& config_dir, std::unique_ptr<Config>* config);
// The pinned runsc: root-owned, and its sha256 the pinned one (the privhelper's own check).
CheckResult CheckRunsc(const config::RunscPin::Reader& pin);
// Starts a sandbox running /bin/true (`runsc do`, no network) in a scratch runsc root under
// `scratch_parent`, on the platform the privhelper uses: the configured one, or for "auto" the
// one the privhelper measured and recorded at `record_path` (<stateDir>/runsc-probe),
// whose figures it shows.
CheckResult ProbePlatform(const config::RunscPin::Reader& pin, const std::string& scratch_parent,
                          const std::string& record_path);
// cgroup v2 (<root>/cgroup.controllers) or v1 (per-controller hierarchies): the controllers
// the sandboxes are limited by are there, and <root>[/<controller>]<parent> can be created or
// written by this process.
CheckResult CheckCgroups(const std::string& cgroup_root, const std::string& parent);
// <runDir>/supervisor.sock is a socket, group `socket_group`, mode 0660.
CheckResult CheckSocket(const std::string& run_dir, const std::string& socket_group);
// `user` may reach the socket (is in `socket_group`, primary or supplementary) and is allowed
// by some deployment (by uid, or by one of its gids).
CheckResult CheckUser(const std::string& user, const std::string& socket_group,
                      const Config* config);
// Every rootfs version the profiles (or helper.json's default) name exists under
// <state_dir>/rootfs (as <version>/rootfs).
CheckResult CheckRootfs(const Config& config, const std::string& state_dir);
// The state dir's filesystem has at least `min_free` bytes free.
CheckResult CheckFreeSpace(const std::string& state_dir, uint64_t min_free = kMinFreeBytes);
// The privhelper named by <runDir>/privhelper.pid runs.
CheckResult CheckService(const std::string& run_dir);

struct DoctorOptions {
  std::string config_dir = "/etc/paseo-sandbox";
  std::string cgroup_root = "/sys/fs/cgroup";
  std::string state_dir;  // empty: helper.json's
  std::string run_dir;    // empty: helper.json's
  std::string user;       // empty: no user check
  bool probe = true;      // start a real sandbox for the platform check
  std::string scratch_parent = "/tmp";
};

std::vector<CheckResult> RunDoctor(const DoctorOptions& options);
// One line per check ("ok   name: detail" or "FAIL name: detail") and a "     fix: ..." line
// under each failure. Returns the number of failures.
int PrintResults(const std::vector<CheckResult>& results, FILE* out);

}  // namespace paseo::admin
