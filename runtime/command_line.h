// The runtime's command line, exactly as Paseo's contract v1 spells it: an operation and its
// flags (each `--name value`, each at most once, all required), nothing else.
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
};

struct Invocation {
  Operation operation;
  std::string workspace_id;  // all but describe and reconcile
  std::string exec_id;       // signal
  std::string signal;        // signal: a name such as "SIGKILL"
};

// `args` without the program name. invalid-argument for a usage error; unimplemented for the
// contract's operations this runtime does not declare (release-backing, merge-to-base).
absl::StatusOr<Invocation> ParseCommandLine(const std::vector<std::string>& args);

inline constexpr char kUsage[] =
    "usage: paseo-sandbox-runtime describe\n"
    "       paseo-sandbox-runtime create|inspect|exec|pause|resume|destroy --workspace-id ID\n"
    "       paseo-sandbox-runtime signal --workspace-id ID --exec-id ID --signal NAME\n"
    "       paseo-sandbox-runtime reconcile\n"
    "Paseo's command workspace runtime (contract version 1) over paseo-sandbox; see "
    "docs/paseo.md.\n";

}  // namespace paseo::runtime
