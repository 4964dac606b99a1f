// What the pinned runsc needs and does on this host, found by running it, once per runsc digest,
// kernel and CPU, and recorded in <stateDir>/runsc-probe (docs/decisions.md, decision 48).
// Workarounds and the capability list follow what a probe saw, never a version string, so
// bookworm's runsc 20221219 and Debian's 20240729 both run with exactly what each needs:
//   - gofer_userns: runsc 20240729 starts its gofer (and sentry) in a user namespace mapping
//     every uid to itself, which Linux 5.12+ allows only with CAP_SETFCAP; inside it the gofer
//     holds CAP_CHOWN and CAP_SYS_CHROOT of its own, so the privhelper needs those two only for
//     a runsc whose gofer runs in the host's user namespace (20221219).
//   - platform: for runsc.platform "auto" where runsc has systrap and ptrace, the one measured
//     faster here for agent-like work (runsc_platform.h, MeasurePlatforms).
// Usage (privhelper start, as root, before the capability drop):
//   ASSIGN_OR_RETURN(RunscProbe probe,
//       ProbeRunscOnHost(runsc_fd, sha, choice.measure, state_dir + "/runsc-probe", run_dir));
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
  std::string key;            // HostRunscKey when probed: another key means probe again
  bool gofer_userns = false;  // the gofer needs CAP_SETFCAP for its user namespace
  std::string platform;       // "auto"'s measured choice; empty if not measured
  PlatformMedians median_ms;  // what was measured, per platform
};

// What the probe depends on: the runsc digest, the kernel release, the CPU count and model
// (one word, no spaces).
std::string HostRunscKey(absl::string_view runsc_sha256);

// The record's text ("key K", "gofer_userns yes|no", then if measured "platform P" and
// "median_ms P N" lines) and back. Parsing is strict and bounded (4 KiB): an unknown or
// repeated line, a missing field, or a platform that was not measured is an error, and the
// caller probes again.
std::string FormatRunscProbe(const RunscProbe& probe);
absl::StatusOr<RunscProbe> ParseRunscProbe(absl::string_view text);

// The record at `record_path` if its key is this host's and, when `measure` names platforms,
// it holds a measured choice among them; else a fresh probe (one sandbox without CAP_SETFCAP;
// with `measure`, MeasurePlatforms over it, 3 rounds: about 10 s on a 2-vCPU VM), written
// there atomically. A failed measurement leaves `platform` empty (the caller falls back). An
// error: runsc could not start a sandbox at all.
absl::StatusOr<RunscProbe> ProbeRunscOnHost(int runsc_fd, absl::string_view runsc_sha256,
                                            const std::vector<std::string>& measure,
                                            const std::string& record_path,
                                            const std::string& scratch_parent);

// The log's and doctor's line for a measured choice: "ptrace (runsc.platform auto: measured
// faster on this host, systrap 1650 ms, ptrace 980 ms; <record_path>)".
std::string DescribeMeasuredPlatform(const RunscProbe& probe, const std::string& record_path);

}  // namespace paseo
