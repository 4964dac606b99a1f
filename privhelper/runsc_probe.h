// runsc.platform "auto" where the pinned runsc has both systrap and ptrace: which is faster on
// this host for agent-like work, measured once per runsc digest, kernel and CPU
// (runsc_platform.h, MeasurePlatforms) and recorded in <stateDir>/runsc-probe
// (docs/decisions.md, decision 48). systrap is not faster everywhere: on a 2-vCPU nested VM
// it took twice ptrace's time to spawn processes. Usage (privhelper start, as root):
//   ASSIGN_OR_RETURN(RunscProbe probe, ProbeRunscOnHost(runsc_fd, sha, choice.measure,
//                                                       state_dir + "/runsc-probe", run_dir));
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "privhelper/runsc_platform.h"

namespace paseo {

struct RunscProbe {
  std::string key;            // HostRunscKey when measured: another key means measure again
  std::string platform;       // the faster; empty if the measurement failed
  PlatformMedians median_ms;  // what was measured, per platform
};

// What the probe depends on: the runsc digest, the kernel release, the CPU count and model
// (one word, no spaces).
std::string HostRunscKey(absl::string_view runsc_sha256);

// The record's text ("key K", then if measured "platform P" and "median_ms P N" lines) and
// back. Parsing is strict and bounded (4 KiB): an unknown or
// repeated line, a missing field, or a platform that was not measured is an error, and the
// caller probes again.
std::string FormatRunscProbe(const RunscProbe& probe);
absl::StatusOr<RunscProbe> ParseRunscProbe(absl::string_view text);
// The record at `path` (at most 4 KiB of it read) if it parses and its key is
// HostRunscKey(runsc_sha256); else an error (missing, malformed, or another host's).
absl::StatusOr<RunscProbe> ReadRunscProbe(const std::string& path, absl::string_view runsc_sha256);

// The record at `record_path` if its key is this host's and it holds a measured choice among
// `measure`; else MeasurePlatforms over `measure` (3 rounds: about 10 s on a 2-vCPU VM),
// written there atomically. A failed measurement leaves `platform` empty (the caller falls
// back to runsc's default). `flags`: the service's own runsc flags (--directfs=false where
// runsc has it), so what is measured is what the sandboxes run with.
RunscProbe ProbeRunscOnHost(int runsc_fd, absl::string_view runsc_sha256,
                                            const std::vector<std::string>& measure,
                                            const std::string& record_path,
                                            const std::string& scratch_parent,
                                            const std::vector<std::string>& flags = {});

// The log's and doctor's line for a measured choice: "ptrace (runsc.platform auto: measured
// faster on this host, systrap 1650 ms, ptrace 980 ms; <record_path>)".
std::string DescribeMeasuredPlatform(const RunscProbe& probe, const std::string& record_path);

}  // namespace paseo
