// Which gVisor platform sandboxes run on. helper.json's runsc.platform is "auto" (the default),
// "systrap", "ptrace" or "kvm"; "auto" picks systrap where the pinned runsc has it (gVisor's
// default since mid-2023, much faster than ptrace on syscall-heavy work), ptrace otherwise, and
// never kvm (it needs /dev/kvm and is chosen only when configured). What the pinned runsc has is
// read from its own flag help (`runsc flags`), so an upgrade of the pin changes the choice
// without a change here. Usage:
//   ASSIGN_OR_RETURN(PlatformChoice c, ChoosePlatformFromProbe(
//       helper.getRunsc().getPlatform().cStr(), RunscPlatforms(runsc_fd)));
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paseo {

struct PlatformChoice {
  std::string platform;  // the --platform value
  std::string why;       // one line for the log and for `paseo-sandbox-admin doctor`
};

// The platforms named by the -platform flag's help in `runsc flags` output, in its order, e.g.
// "specifies which platform to use: systrap (default), ptrace, kvm." -> {systrap, ptrace, kvm}.
// Empty if the text has no such flag.
std::vector<std::string> ParseRunscPlatforms(absl::string_view flags_help);

// Runs the verified runsc (its open fd) as `runsc flags` and parses its platforms. Errors: it
// could not run, did not exit 0 within 10 s, or named no platform.
absl::StatusOr<std::vector<std::string>> RunscPlatforms(int runsc_fd);

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

}  // namespace paseo
