// The runtime's command line, as Paseo's contract spells it: an operation and its flags (each
// `--name value`, each at most once, all required), after an optional `--protocol-version N`
// that the daemon's configured command carries (the contract version: 1 unless it says 2).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace paseo::runtime {

enum class Operation {
  kDescribe,
  kCreate,
  kInspect,
  kExec,
  kSignal,
  kPause,
  kResume,
  kDestroy,
  kReconcile,
  kManageDescribe,  // v2 only: which management operations exist (none: a non-zero exit)
};

struct Invocation {
  Operation operation;
  std::string workspace_id;  // all but describe and reconcile
  std::string exec_id;       // signal
  std::string signal;        // signal: a name such as "SIGKILL"
  int protocol_version = 1;
};

// `args` without the program name. invalid-argument for a usage error; unimplemented for the
// contract's operations this runtime does not declare (release-backing, merge-to-base).
absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args);

inline constexpr char kUsage[] =
    "usage: paseo-sandbox-runtime [--protocol-version 1|2] OPERATION\n"
    "  OPERATION: describe | reconcile | manage-describe (version 2)\n"
    "           | create|inspect|exec|pause|resume|destroy --workspace-id ID\n"
    "           | signal --workspace-id ID --exec-id ID --signal NAME\n"
    "Paseo's command workspace runtime (contract version 1 unless --protocol-version 2) over "
    "paseo-sandbox; see docs/paseo.md.\n";

}  // namespace paseo::runtime
