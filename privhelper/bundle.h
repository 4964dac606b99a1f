// BundleWriter's pure half: renders the OCI config.json of a sandbox and the process.json of a
// `runsc exec`, from values the privhelper decided itself. Nothing in here comes from a client
// unvalidated: the caller passes staging paths it created and argv/env it already checked.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "privhelper/resource_limits.h"

namespace paseo {

struct StagedMount {
  std::string source;       // root-owned staging path inside the bundle (never a user path)
  std::string destination;  // absolute path inside the sandbox
  bool read_only = true;
};

struct BundleSpec {
  std::string rootfs;  // <stateDir>/rootfs/<version>/rootfs, mounted read-only
  std::string hostname = "paseo-sandbox";
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<StagedMount> mounts;
  uint64_t tmpfs_bytes = 64ull << 20;
  // The agent's home: a tmpfs of home_bytes owned by uid:gid, mode 0700, mounted before every
  // bind (credentials may lie beneath it). Empty: none.
  std::string home;
  uint64_t home_bytes = 256ull << 20;
  // The sandbox's bounds (Config::LimitsOf). A 0 is left out of the spec; the config never
  // yields one.
  SandboxLimits limits;
  std::string cgroups_path;         // linux.cgroupsPath, e.g. /paseo-sandbox/<id>
  std::string shim;                 // host path of the sandbox shim, mounted at kShimPath
  std::string kept_file;            // host path of its KeptFileText, mounted at kKeptPath
  // Network mode "sandbox": the pinned namespace (<runDir>/netns/<id>) runsc joins, given as
  // the network namespace's "path". Empty: a new, empty one (mode "none").
  std::string netns_path;
  // The sandbox's init is the spawner (`shim spawner --init`, its channel on the init's stdin
  // and stdout) rather than the plain `shim init`.
  bool init_is_spawner = false;
};

// Where every sandbox sees the shim (sandbox/shim.cc), its init and tty relay: read-only,
// root-owned.
inline constexpr char kShimPath[] = "/.paseo/shim";
// Where it sees what of it is kept (Api.SandboxPaths.kept): one destination per line.
inline constexpr char kKeptPath[] = "/.paseo/kept";
// The same set for a process's environment (without exactEnv), ':'-separated.
inline constexpr char kKeptEnvName[] = "PASEO_SANDBOX_KEPT";
std::string KeptFileText(const std::vector<std::string>& kept);

// The argv that runs `argv` on a rows x cols terminal through the relay.
std::vector<std::string> TtyArgv(uint16_t rows, uint16_t cols, const std::vector<std::string>& argv);

// `argv` as the process to run, given its environment `env` (KEY=VALUE entries), whether that
// is exact (api.capnp ProcessSpec.exactEnv) and whether it asked for the not-kept report
// (ProcessSpec.reportUnkept): unchanged unless one of these needs the shim, else through
// `shim exec [--unset=HOME] [--unset=PATH] --`. An exact environment needs it when it lacks HOME
// or PATH (runsc adds a HOME to every process whose environment has none; should it ever add a
// PATH, that goes too) or when runsc's own lookup (in env's PATH) would not be `search_path`'s:
// only the shim knows the tool directories without putting them in the environment.
// `runsc_exec`: started by `runsc exec` (which adds HOME), not by the spawner (which adds
// nothing and looks up in the search path itself).
std::vector<std::string> ShimExecArgv(const std::vector<std::string>& env,
                                      const std::vector<std::string>& argv,
                                      const std::string& search_path, bool exact,
                                      bool report_unkept, bool runsc_exec = true);

// What the shim is told through the environment of a process whose argv (`to_run`, as
// ShimExecArgv and TtyArgv made it) starts it: the search path and whether to report what is
// not kept. The shim reads and removes these before the program starts, so the program's
// environment is still exactly what it was given. Through the environment rather than argv so
// that an older shim (a sandbox kept across an upgrade sees the one it was created with)
// ignores what it does not know and runs the command as before, instead of refusing the
// command line. Empty when `to_run` does not start the shim.
inline constexpr char kShimSearchPathEnv[] = "PASEO_SHIM_SEARCH_PATH";
inline constexpr char kShimReportUnkeptEnv[] = "PASEO_SHIM_REPORT_UNKEPT";
std::vector<std::string> ShimEnv(const std::vector<std::string>& to_run,
                                 const std::string& search_path, bool report_unkept);

// The cgroup (relative to each hierarchy's root) runsc puts a sandbox in.
std::string SandboxCgroup(const std::string& parent, const std::string& sandbox_id);

struct ExecSpec {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd = "/";
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool tty = false;  // argv already goes through the relay; only the environment differs
  // Directories put at the front of PATH, in order: the profile's tool destinations.
  std::vector<std::string> path_prefix;
  bool exact_env = false;  // no default PATH, TERM or HOME (api.capnp ProcessSpec.exactEnv)
  std::string home;        // the sandbox's home, $HOME unless env sets one; empty: none
  std::vector<std::string> kept;  // PASEO_SANDBOX_KEPT unless exact (ProcessEnv)
  std::vector<std::string> shim_env;  // ShimEnv: after everything else, whatever `exact` says
};

// The sandbox's init: the shim's idle, orphan-reaping init (a process whose parent died is
// reparented to it and must be reaped, or it stays a zombie). Client processes all run
// through `runsc exec`, so the sandbox outlives any one of them (docs/architecture.md).
std::vector<std::string> SandboxInitArgv(bool spawner);

// The environment every sandbox process starts from; `env` entries override by key. A tty
// process also gets TERM=xterm unless `env` sets TERM, and every process HOME=`home` (when not
// empty) unless `env` sets HOME. `path_prefix` (the profile's tool directories) goes in front
// of PATH, the client's if `env` sets one, else the default (the CLI's documented behaviour).
// With `exact`, `env` is all there is, unchanged: no default PATH, TERM or HOME, and no prefix
// (the program is still looked up in the tool directories first: common/search_path.h).
// Without `exact`, a non-empty `kept` adds PASEO_SANDBOX_KEPT (kKeptEnvName) unless env sets it.
std::vector<std::string> ProcessEnv(const std::vector<std::string>& env, bool tty = false,
                                    const std::vector<std::string>& path_prefix = {},
                                    bool exact = false, const std::string& home = "",
                                    const std::vector<std::string>& kept = {});

std::string RenderOciConfig(const BundleSpec& spec);
std::string RenderProcessJson(const ExecSpec& spec);

}  // namespace paseo
