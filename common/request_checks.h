// Checks of request fields that the broker and the privhelper both apply: the broker to refuse
// early with the same words, the privhelper again because it trusts no broker. Pure functions
// over capnp readers, so one copy serves both sides and is unit-tested directly.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <capnp/list.h>
#include <capnp/blob.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paseo {

// Environment names a client may not send (CheckProcessCommand refuses them): the supervisor's
// own words to the in-sandbox shim.
inline constexpr char kReservedEnvPrefix[] = "PASEO_SHIM_";

inline constexpr size_t kMaxArgs = 4096;
inline constexpr size_t kMaxEnv = 4096;
inline constexpr size_t kMaxArgvBytes = 1 << 20;
inline constexpr size_t kMaxLabels = 32;
inline constexpr size_t kMaxLabelBytes = 256;

// A client text that names something (an id, a deployment, a profile, a credential, a label):
// no NUL byte (capnp Text would be read up to it) and valid UTF-8.
absl::Status CheckName(absl::string_view field, capnp::Text::Reader text);
bool IsValidUtf8(absl::string_view text);
bool HasNul(capnp::Text::Reader text);

// An absolute path without empty, "." or ".." components, no trailing slash (except "/"),
// no NUL, shorter than PATH_MAX.
bool IsNormalizedAbsolutePath(absl::string_view path);

// A signal number a client may send: 1..64.
absl::Status CheckSignal(int sig);

// A terminal needs at least one row and one column.
absl::Status CheckTerminalSize(uint32_t rows, uint32_t cols);

// The launch profile a create uses: `requested`, or the deployment's first allowed one when
// empty; permission-denied if the deployment may not use it.
absl::StatusOr<std::string> ChooseProfile(const std::vector<std::string>& allowed,
                                          absl::string_view requested,
                                          absl::string_view deployment_id);

// At most kMaxLabels labels, each key and value at most kMaxLabelBytes and a valid name.
struct LabelView {
  capnp::Text::Reader key, value;
};
absl::Status CheckLabels(const std::vector<LabelView>& labels);

// A client-chosen key (api.capnp SandboxSpec.key, ProcessSpec.key): at most kMaxKeyBytes and a
// valid name. Empty is allowed (no key).
inline constexpr size_t kMaxKeyBytes = 256;
absl::Status CheckKey(absl::string_view field, capnp::Text::Reader key);

// What a process runs: argv (non-empty, no NUL, argv[0] non-empty), env (KEY=VALUE, no NUL),
// total size bounded, cwd absolute and normalized when given, a terminal size when tty.
struct ProcessCommand {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;  // empty: the sandbox's default
  // ProcessSpec.workspaceCwd in CheckWorkspaceCwd's normalized form ("" is the first
  // workspace itself); unset when the client sent none.
  std::optional<std::string> workspace_cwd;
  bool exact_env = false;  // api.capnp ProcessSpec.exactEnv
  bool report_unkept = false;  // api.capnp ProcessSpec.reportUnkept
  bool drop_oldest = false;    // its output mode is dropOldest (helper.capnp StartProcessRequest)
  bool tty = false;
  uint16_t rows = 0;  // tty only
  uint16_t cols = 0;
};
absl::StatusOr<ProcessCommand> CheckProcessCommand(capnp::List<capnp::Text>::Reader argv,
                                                   capnp::List<capnp::Text>::Reader env,
                                                   capnp::Text::Reader cwd, bool tty,
                                                   uint16_t rows, uint16_t cols);

// ProcessSpec.workspaceCwd, the syntax both sides check before the privhelper resolves it
// against the workspace itself: empty means unset; otherwise `cwd` must be empty, and it must be
// relative (no leading "/"), valid UTF-8 without NUL, at most kMaxWorkspaceCwdBytes, and no ".."
// may climb above the workspace when read left to right. Returns the normalized form: empty
// and "." components dropped, so "." and "./" mean the workspace itself (returned as ""), and
// ".." components kept: the privhelper resolves them physically beneath the workspace, as the
// sandbox's kernel will.
inline constexpr size_t kMaxWorkspaceCwdBytes = 4095;
absl::StatusOr<std::optional<std::string>> CheckWorkspaceCwd(capnp::Text::Reader workspace_cwd,
                                                             capnp::Text::Reader cwd);

}  // namespace paseo
