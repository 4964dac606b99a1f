// How a process inside a sandbox ended, as the privhelper learns it.
//
// `runsc exec` flattens its process's wait status into its own exit code (death by signal N
// becomes 128+N, exactly like `exit 128+N`), but it logs the raw status first: with
// `--debug-log` it writes "Exiting with status: <wait status>" (runsc/cli/main.go). The
// privhelper gives each `runsc exec` a private memfd as that log and decodes the line, so the
// status comes from the sentry, not from anything the sandboxed program could write.
//
// When runsc could not wait for its process (the whole sandbox died), the sandbox's memory
// cgroup says whether the host's OOM killer did it: a sandbox that exceeds its memory limit
// loses its sentry, and every process in it is reported as oom-killed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "common/process_exit.h"

namespace paseo {

// The raw wait status if the last line of a runsc log is "... Exiting with status: N"; nullopt
// if it is not, or N does not decode as an exit or a death by signal.
std::optional<int> ParseRunscExitLine(const std::string& log);

// The oom_kill counter from a cgroup v1 memory.oom_control or v2 memory.events text.
std::optional<uint64_t> ParseOomKillCount(const std::string& text);

// The oom_kill counter of the memory cgroup at `cgroup_path` (relative to the hierarchy root,
// e.g. "/paseo-sandbox/<id>"), v1 or v2; nullopt if neither file is readable.
std::optional<uint64_t> ReadOomKillCount(const std::string& cgroup_path,
                                         const std::string& cgroup_root = "/sys/fs/cgroup");

// Decides how a process ended from its `runsc exec`'s own wait status, that exec's log (whose
// status must agree with runsc's exit code), and whether the sandbox's cgroup recorded an OOM
// kill while the process ran.
ProcessExit DecideProcessExit(int runsc_wait_status, const std::string& runsc_log,
                              bool sandbox_oom_killed);

}  // namespace paseo
