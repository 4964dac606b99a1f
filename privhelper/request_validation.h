// Re-validation of every broker request on the privileged side, one validator per Helper
// method (schema/helper.capnp). The broker already checked them; these checks assume it did
// not (a compromised broker must get no more than an authorized client). Each validator takes
// the method's params and returns a checked value that SandboxHost acts on; pure functions
// over the config, unit-tested directly, and request_validation_test fails if a Helper method
// has no validator with refusal cases.
//
//   ASSIGN_OR_RETURN(ValidatedSignal request, ValidateSignal(context.getParams()));
//   host.Signal(request);
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/request_checks.h"
#include "privhelper/config.h"
#include "privhelper/peer_access.h"
#include "schema/helper.capnp.h"

namespace paseo {

// policy and inventory take no parameters: nothing to check, but they pass the same
// validate-then-act path as every other method.
struct ValidatedPolicy {};
struct ValidatedInventory {};

// A process named by ids that are safe as path components and runsc container ids.
struct ValidatedProcessRef {
  std::string sandbox_id;
  std::string process_id;
};

struct ValidatedSignal {
  ValidatedProcessRef process;
  int signal = 0;  // 1..64
};

struct ValidatedDelete {
  std::string sandbox_id;
};

// A sandbox named by an id that is safe as a path component and a runsc container id.
struct ValidatedSandboxRef {
  std::string sandbox_id;
};

// Sandbox.connect: a port of a sandbox, 1..65535. Whether the sandbox's profile lets it be
// reached is SandboxHost's to decide (it knows which profile the sandbox runs).
struct ValidatedConnect {
  std::string sandbox_id;
  uint16_t port = 0;
};

struct ValidatedMount {
  std::string client_path;  // empty for `empty`
  std::string destination;
  bool read_only = true;
  bool empty = false;  // Api.WorkspaceMount.empty: a new directory of the sandbox's own
};

struct ValidatedCredential {
  std::string name;
  std::string host_path;    // from the deployment's credentialRoots
  std::string destination;  // from the profile
  bool read_only = true;
};

// A tool the profile places, from the root that the deployment registers under its name.
struct ValidatedTool {
  std::string name;
  config::ToolRoot::Reader root;  // in the root-owned config
  std::string destination;        // from the profile; always read-only
};

inline constexpr size_t kMaxMounts = 16;
inline constexpr size_t kMaxCredentials = 8;
// The primary gid and NGROUPS_MAX supplementary ones.
inline constexpr size_t kMaxPeerGids = 65537;

// Points into the root-owned config, which outlives every request.
struct ValidatedCreate {
  std::string sandbox_id;
  const config::Deployment::Reader* deployment = nullptr;
  const config::LaunchProfile::Reader* profile = nullptr;
  // The client the broker created this for, one the deployment allows; workspaces are given
  // only if it could open them itself (workspace_resolver.h).
  PeerIdentity peer;
  std::vector<ValidatedMount> mounts;
  std::vector<ValidatedCredential> credentials;
  // Every tool of the profile, in its order (which is also their order on PATH).
  std::vector<ValidatedTool> tools;
};

struct ValidatedStart {
  ValidatedProcessRef process;
  ProcessCommand command;  // common/request_checks.h
};

absl::StatusOr<ValidatedPolicy> ValidatePolicy(helper::Helper::PolicyParams::Reader params);

// Sandbox id; deployment and profile names (no NUL, UTF-8), the deployment known and the
// profile one it may use (ChooseProfile); at most kMaxMounts workspaces, each path absolute,
// bounded and without NUL, each destination normalized absolute, not /, not under /proc, /sys,
// /dev, /tmp or /.paseo, not overlapping another; at most kMaxCredentials credentials, each a
// valid name the deployment has and the profile places, once, not overlapping a workspace; the
// peer (peerUid, peerGids) one the deployment allows -- its uid in allowedUids or one of its
// gids in allowedGids, as the broker's MayUse decides -- with at most kMaxPeerGids gids; the
// profile's tools, each registered by the deployment, none overlapping a workspace. The
// claim itself cannot be verified here: a compromised broker can name any identity the
// deployment allows, and no other.
absl::StatusOr<ValidatedCreate> ValidateCreate(const Config& config,
                                               helper::Helper::CreateSandboxParams::Reader params);

// Ids, the command through CheckProcessCommand (argv, env, cwd, terminal size), and
// workspaceCwd through CheckWorkspaceCwd (resolved against the workspace by SandboxHost).
absl::StatusOr<ValidatedStart> ValidateStart(helper::Helper::StartProcessParams::Reader params);

absl::StatusOr<ValidatedProcessRef> ValidateWait(helper::Helper::WaitProcessParams::Reader params);

// Ids, and a signal number 1..64 (CheckSignal).
absl::StatusOr<ValidatedSignal> ValidateSignal(helper::Helper::SignalProcessParams::Reader params);

absl::StatusOr<ValidatedDelete> ValidateDelete(helper::Helper::DeleteSandboxParams::Reader params);

absl::StatusOr<ValidatedInventory> ValidateInventory(
    helper::Helper::InventoryParams::Reader params);

// A process ref, and where the broker's logs of its streams end (any values).
struct ValidatedReattach {
  ValidatedProcessRef process;
  uint64_t stdout_offset = 0;
  uint64_t stderr_offset = 0;
};
absl::StatusOr<ValidatedReattach> ValidateReattach(helper::Helper::ReattachParams::Reader params);

absl::StatusOr<ValidatedProcessRef> ValidateCloseInput(
    helper::Helper::CloseInputParams::Reader params);

absl::StatusOr<ValidatedSandboxRef> ValidateWaitSandbox(
    helper::Helper::WaitSandboxParams::Reader params);

absl::StatusOr<ValidatedSandboxRef> ValidatePauseSandbox(
    helper::Helper::PauseSandboxParams::Reader params);

absl::StatusOr<ValidatedSandboxRef> ValidateResumeSandbox(
    helper::Helper::ResumeSandboxParams::Reader params);
absl::StatusOr<ValidatedSandboxRef> ValidateAwaitGone(helper::Helper::AwaitGoneParams::Reader params);
absl::StatusOr<ValidatedSandboxRef> ValidateSpawnerState(
    helper::Helper::SpawnerStateParams::Reader params);

// Helper.sandboxUsage: at most kMaxUsageIds ids, each safe as a path component.
inline constexpr size_t kMaxUsageIds = 1024;
struct ValidatedSandboxIds {
  std::vector<std::string> sandbox_ids;
};
absl::StatusOr<ValidatedSandboxIds> ValidateSandboxUsage(
    helper::Helper::SandboxUsageParams::Reader params);

// The sandbox id, and a port 1..65535.
absl::StatusOr<ValidatedConnect> ValidateConnectPort(
    helper::Helper::ConnectPortParams::Reader params);

absl::StatusOr<ValidatedProcessRef> ValidateReleaseProcess(
    helper::Helper::ReleaseProcessParams::Reader params);

}  // namespace paseo
