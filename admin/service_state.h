// What `paseo-sandbox-admin` learns about, and asks of, a running service: the privhelper
// named by <runDir>/privhelper.pid (checked through /proc), the outcome of its last config
// load in <runDir>/config-generation, the sandboxes recorded under <stateDir>/bundles, and the
// disk the broker's output logs take. Usage:
//   ASSIGN_OR_RETURN(Generation g, RequestReload("/run/paseo-sandbox", std::chrono::seconds(60)));
//   if (!g.applied()) ...  // g.outcome says why
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace paseo::admin {

// The pid in <run_dir>/privhelper.pid, if that process runs the paseo-sandbox-privhelper
// binary (/proc/<pid>/exe), so a stale pid file never gets another process signalled.
// FailedPrecondition otherwise, saying which.
absl::StatusOr<pid_t> RunningPrivhelper(const std::string& run_dir,
                                        const std::string& proc = "/proc");

// <runDir>/config-generation as the privhelper writes it: "<number> <outcome>".
struct Generation {
  uint64_t number = 0;
  std::string outcome;  // "loaded", "applied", "refused: <why>", "applied, but ..."
  bool applied() const { return outcome == "loaded" || outcome == "applied"; }
};
absl::StatusOr<Generation> ParseGeneration(const std::string& text);
absl::StatusOr<Generation> ReadGeneration(const std::string& run_dir);

// SIGHUP to the running privhelper (it reloads its config, then collects garbage), then waits
// up to `patience` for config-generation to pass the number it had; returns the new one.
// DeadlineExceeded if it did not change in time (an older privhelper that only collects).
absl::StatusOr<Generation> RequestReload(const std::string& run_dir,
                                         std::chrono::milliseconds patience);

// One <stateDir>/bundles/<id>/sandbox.json record (schema/records.capnp SandboxRecord).
struct SandboxSummary {
  std::string id;
  std::string deployment;
  std::string profile;
  uint32_t uid = 0;
  int64_t created_ms = 0;
  bool deleting = false;
};
// Every readable record, sorted by id; a bundle without one (mid-create) is skipped.
absl::StatusOr<std::vector<SandboxSummary>> ListSandboxRecords(const std::string& state_dir);

// Bytes allocated to the files under `dir` (st_blocks), not following symlinks nor crossing
// into other filesystems; 0 if it does not exist.
uint64_t DiskUsage(const std::string& dir);

}  // namespace paseo::admin
