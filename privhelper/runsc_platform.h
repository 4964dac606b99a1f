// Which gVisor platform sandboxes run on. helper.json's runsc.platform is "auto" (the default),
// "systrap", "ptrace" or "kvm". What the pinned runsc has is read from its own flag help
// (`runsc flags`), so an upgrade of the pin changes the choice without a change here. "auto"
// never picks kvm (it needs /dev/kvm and is chosen only when configured). Where the pinned
// runsc has both systrap and ptrace, "auto" picks the one measured faster on this host for
// agent-like work (process spawns and small-file churn in a sandbox), once per host, runsc
// and kernel, and records it (docs/decisions.md, decision 48): systrap is not faster
// everywhere (on a 2-vCPU nested VM it took twice ptrace's time to spawn processes). Usage:
//   ASSIGN_OR_RETURN(PlatformChoice c, ChoosePlatformFromProbe(
//       helper.getRunsc().getPlatform().cStr(), RunscPlatforms(runsc_fd)));
//   then, if c.measure is not empty, the measured choice from privhelper/runsc_probe.h.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/strings/string_view.h"

namespace paseo {

struct PlatformChoice {
  std::string platform;  // the --platform value
  std::string why;       // one line for the log and for `paseo-sandbox-admin doctor`
  // "auto" with both systrap and ptrace available: `platform` is only the fallback until
  // ProbeRunscOnHost (runsc_probe.h) has measured, or read the record of, which is faster here.
  std::vector<std::string> measure;
};

// The platforms named by the -platform flag's help in `runsc flags` output, in its order, e.g.
// "specifies which platform to use: systrap (default), ptrace, kvm." -> {systrap, ptrace, kvm}.
// Empty if the text has no such flag.
std::vector<std::string> ParseRunscPlatforms(absl::string_view flags_help);

// `runsc flags` of the verified runsc (its open fd): the help of every global flag.
absl::StatusOr<std::string> RunscFlagsHelp(int runsc_fd);
// Whether that help lists the global flag `name` (e.g. "directfs").
bool RunscHasFlag(absl::string_view help, absl::string_view name);

// What the pinned runsc's flag help says, read once: its platforms (an error if the help could
// not be read or names none) and whether it has -directfs, which every call then turns off.
struct RunscFlagsInfo {
  absl::StatusOr<std::vector<std::string>> platforms;
  bool has_directfs_flag = false;
  // The flags every call gets because of it: {"--directfs=false"} or nothing.
  std::vector<std::string> FixedFlags() const;
};
RunscFlagsInfo ReadRunscFlags(int runsc_fd);

// Runs the verified runsc (its open fd) as `runsc flags` and parses its platforms. Errors: it
// could not run, did not exit 0 within 10 s, or named no platform.
absl::StatusOr<std::vector<std::string>> RunscPlatforms(int runsc_fd);

// `runsc --version`'s version ("0.0~20240729.0"), from the verified fd.
absl::StatusOr<std::string> RunscVersion(int runsc_fd);

// The platform to use for `configured` given what runsc has. InvalidArgument for an unknown
// setting; FailedPrecondition when the configured platform (or, for auto, neither systrap nor
// ptrace) is missing from `available`.
absl::StatusOr<PlatformChoice> ChoosePlatform(absl::string_view configured,
                                              const std::vector<std::string>& available);

// The same, from what RunscPlatforms gave: if runsc's help could not be read or parsed (a
// runsc that words it differently), an explicitly configured platform is used as is (runsc
// itself refuses one it lacks, at the first create) and `why` says so; "auto" is an error then.
absl::StatusOr<PlatformChoice> ChoosePlatformFromProbe(
    absl::string_view configured, const absl::StatusOr<std::vector<std::string>>& available);

// One sandbox on `platform` from the verified runsc (its open fd):
// `runsc --root=<fresh 0700 dir under scratch_parent> --network=none --platform=P do COMMAND`,
// stdin /dev/null, in a fresh network namespace of its own (runsc 20221219 binds the sandbox's
// unauthenticated control socket in the caller's netns, and `do` runs on the host's root).
// Returns its wall time; an error says how it ended, with the start of its output. A run past
// `timeout` is killed. `drop_caps` leave runsc's bounding set first (a probe of what it needs);
// `flags` go before `do` (the service's own, e.g. --directfs=false).
absl::StatusOr<absl::Duration> RunPlatformSandbox(int runsc_fd, const std::string& platform,
                                                  const std::string& scratch_parent,
                                                  const std::vector<std::string>& command,
                                                  absl::Duration timeout,
                                                  const std::vector<int>& drop_caps = {},
                                                  const std::vector<std::string>& flags = {});

// Median wall time per platform, in the candidates' order (those that failed are left out).
using PlatformMedians = std::vector<std::pair<std::string, int64_t>>;
// The measured workload for "auto": 100 process spawns and 200 small files written, read and
// removed, in a `runsc do` sandbox; each candidate `rounds` times, alternating. An error only
// if no candidate ran it.
absl::StatusOr<PlatformMedians> MeasurePlatforms(int runsc_fd,
                                                 const std::vector<std::string>& candidates,
                                                 const std::string& scratch_parent, int rounds,
                                                 const std::vector<std::string>& flags = {});

}  // namespace paseo
