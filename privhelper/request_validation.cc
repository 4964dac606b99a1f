// See request_validation.h.
#include "privhelper/request_validation.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/ids.h"
#include "common/status.h"

namespace paseo {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

// The whole text, embedded NUL bytes included (cStr() would stop at the first one).
absl::string_view View(capnp::Text::Reader text) {
  return absl::string_view(text.begin(), text.size());
}

// An id becomes a path component and a runsc container id: checked here, where it enters.
absl::StatusOr<std::string> CheckId(absl::string_view field, capnp::Text::Reader id) {
  if (!IsValidId(View(id))) return Invalid(field, "not a valid id");
  return std::string(View(id));
}

absl::StatusOr<ValidatedProcessRef> CheckProcessRef(capnp::Text::Reader sandbox_id,
                                                    capnp::Text::Reader process_id) {
  ValidatedProcessRef out;
  ASSIGN_OR_RETURN(out.sandbox_id, CheckId("sandboxId", sandbox_id));
  ASSIGN_OR_RETURN(out.process_id, CheckId("processId", process_id));
  return out;
}

bool IsUnder(absl::string_view path, absl::string_view dir) {
  return path == dir || absl::StartsWith(path, absl::StrCat(dir, "/"));
}

absl::StatusOr<std::vector<ValidatedMount>> CheckWorkspaces(
    capnp::List<api::WorkspaceMount>::Reader mounts) {
  if (mounts.size() > kMaxMounts) return Invalid("workspaces", "too many workspaces");
  std::vector<ValidatedMount> out;
  for (size_t i = 0; i < mounts.size(); ++i) {
    auto m = mounts[static_cast<unsigned>(i)];
    std::string field = absl::StrCat("workspaces[", i, "]");
    if (HasNul(m.getPath()) || HasNul(m.getDestination()))
      return Invalid(field, "contains a NUL byte");
    if (m.getEmpty()) {
      if (m.getPath().size() > 0)
        return Invalid(field + ".path", "must be empty for an empty workspace");
      if (m.getMode() != api::AccessMode::READ_WRITE)
        return Invalid(field + ".mode", "an empty workspace is read-write");
    } else if (!IsNormalizedAbsolutePath(View(m.getPath())))
      // Normalized, so that a path has one spelling: no empty, "." or ".." component and no
      // trailing "/" (the CLI normalizes what its user typed; docs/running.md).
      return Invalid(field + ".path",
                     "must be a normalized absolute path shorter than PATH_MAX (no empty, \".\" "
                     "or \"..\" component, no trailing \"/\")");
    std::string dest = m.getDestination().size() > 0 ? m.getDestination().cStr() : "/workspace";
    if (!IsNormalizedAbsolutePath(dest) || dest == "/")
      return Invalid(field + ".destination", "must be a normalized absolute path other than /");
    for (const char* reserved : {"/proc", "/sys", "/dev", "/tmp", "/.paseo"}) {
      if (IsUnder(dest, reserved))
        return Invalid(field + ".destination", absl::StrCat("may not be under ", reserved));
    }
    for (const auto& other : out) {
      if (IsUnder(dest, other.destination) || IsUnder(other.destination, dest))
        return Invalid(field + ".destination", "overlaps another workspace's destination");
    }
    out.push_back(ValidatedMount{m.getPath().cStr(), dest,
                                 m.getMode() != api::AccessMode::READ_WRITE, m.getEmpty()});
  }
  return out;
}

absl::StatusOr<std::vector<ValidatedCredential>> CheckCredentials(
    const config::Deployment::Reader& deployment, const config::LaunchProfile::Reader& profile,
    const std::vector<ValidatedMount>& mounts, capnp::List<capnp::Text>::Reader credentials) {
  if (credentials.size() > kMaxCredentials) return Invalid("credentials", "too many credentials");
  std::vector<ValidatedCredential> out;
  for (size_t i = 0; i < credentials.size(); ++i) {
    std::string field = absl::StrCat("credentials[", i, "]");
    capnp::Text::Reader requested = credentials[static_cast<unsigned>(i)];
    RETURN_IF_ERROR(CheckName(field, requested));
    if (!IsValidId(View(requested))) return Invalid(field, "not a valid name");
    ValidatedCredential c;
    c.name = std::string(View(requested));
    for (auto root : deployment.getCredentialRoots()) {
      if (c.name == root.getName().cStr()) c.host_path = root.getHostPath().cStr();
    }
    if (c.host_path.empty())
      return absl::PermissionDeniedError(absl::StrCat(field, ": deployment ",
                                                      deployment.getId().cStr(),
                                                      " has no credential \"", c.name, "\""));
    for (auto m : profile.getCredentials()) {
      if (c.name == m.getName().cStr()) {
        c.destination = m.getDestination().cStr();
        c.read_only = !m.getWritable();
      }
    }
    if (c.destination.empty())
      return absl::PermissionDeniedError(absl::StrCat(field, ": profile ",
                                                      profile.getName().cStr(),
                                                      " places no credential \"", c.name, "\""));
    for (const auto& other : out) {
      if (other.name == c.name) return Invalid(field, "named twice");
    }
    for (const auto& m : mounts) {
      if (IsUnder(c.destination, m.destination) || IsUnder(m.destination, c.destination))
        return Invalid(field, "its destination overlaps a workspace's destination");
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The profile's tools, each from the root its deployment registers under that name (LoadConfig
// already refused a profile placing a tool a deployment using it lacks; checked again here), and
// no workspace the client asked for may overlap one's destination.
absl::StatusOr<std::vector<ValidatedTool>> CheckTools(const config::Deployment::Reader& deployment,
                                                      const config::LaunchProfile::Reader& profile,
                                                      const std::vector<ValidatedMount>& mounts) {
  std::vector<ValidatedTool> out;
  for (auto mount : profile.getTools()) {
    ValidatedTool t{mount.getName().cStr(), {}, mount.getDestination().cStr()};
    bool registered = false;
    for (auto root : deployment.getToolRoots()) {
      if (t.name == root.getName().cStr()) {
        t.root = root;
        registered = true;
      }
    }
    if (!registered)
      return absl::FailedPreconditionError(
          absl::StrCat("profile ", profile.getName().cStr(), " places tool \"", t.name,
                       "\", which deployment ", deployment.getId().cStr(), " does not register"));
    for (size_t i = 0; i < mounts.size(); ++i) {
      if (IsUnder(t.destination, mounts[i].destination) ||
          IsUnder(mounts[i].destination, t.destination))
        return Invalid(absl::StrCat("workspaces[", i, "].destination"),
                       absl::StrCat("overlaps the destination of tool ", t.name, " (",
                                    t.destination, ")"));
    }
    out.push_back(std::move(t));
  }
  return out;
}

// The client the broker says it acts for, if the deployment allows it (broker/authorization.cc
// MayUse makes the same decision on the real SO_PEERCRED).
absl::StatusOr<PeerIdentity> CheckPeer(const config::Deployment::Reader& deployment,
                                       uint32_t uid, capnp::List<uint32_t>::Reader gids) {
  if (gids.size() > kMaxPeerGids) return Invalid("peerGids", "too many groups");
  PeerIdentity peer;
  peer.uid = uid;
  for (uint32_t g : gids) peer.gids.push_back(g);
  for (uint32_t allowed : deployment.getAllowedUids()) {
    if (allowed == peer.uid) return peer;
  }
  for (uint32_t allowed : deployment.getAllowedGids()) {
    if (peer.InGroup(allowed)) return peer;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "peerUid: deployment ", deployment.getId().cStr(), " does not allow ", peer.Describe()));
}

}  // namespace

absl::StatusOr<ValidatedPolicy> ValidatePolicy(helper::Helper::PolicyParams::Reader) {
  return ValidatedPolicy{};
}

absl::StatusOr<ValidatedCreate> ValidateCreate(const Config& config,
                                               helper::Helper::CreateSandboxParams::Reader params) {
  auto request = params.getRequest();
  ValidatedCreate out;
  ASSIGN_OR_RETURN(out.sandbox_id, CheckId("sandboxId", request.getSandboxId()));
  RETURN_IF_ERROR(CheckName("deploymentId", request.getDeploymentId()));
  out.deployment = config.FindDeployment(View(request.getDeploymentId()));
  if (out.deployment == nullptr)
    return absl::PermissionDeniedError(absl::StrCat("deploymentId: no deployment \"",
                                                    View(request.getDeploymentId()), "\""));
  ASSIGN_OR_RETURN(out.peer,
                   CheckPeer(*out.deployment, request.getPeerUid(), request.getPeerGids()));
  RETURN_IF_ERROR(CheckName("profile", request.getProfile()));
  ASSIGN_OR_RETURN(std::string profile,
                   ChooseProfile(config.ProfilesOf(*out.deployment), View(request.getProfile()),
                                 out.deployment->getId().cStr()));
  out.profile = config.FindProfile(profile);
  if (out.profile == nullptr) return absl::InternalError("profile vanished from config");
  ASSIGN_OR_RETURN(out.mounts, CheckWorkspaces(request.getWorkspaces()));
  // Beneath the home is fine (it is mounted first); over it would hide it.
  std::string home = out.profile->getHomePath().cStr();
  for (size_t i = 0; i < out.mounts.size(); ++i) {
    if (IsUnder(home, out.mounts[i].destination))
      return Invalid(absl::StrCat("workspaces[", i, "].destination"),
                     absl::StrCat("covers the sandbox's home ", home));
  }
  ASSIGN_OR_RETURN(out.credentials, CheckCredentials(*out.deployment, *out.profile, out.mounts,
                                                     request.getCredentials()));
  ASSIGN_OR_RETURN(out.tools, CheckTools(*out.deployment, *out.profile, out.mounts));
  return out;
}

absl::StatusOr<ValidatedStart> ValidateStart(helper::Helper::StartProcessParams::Reader params) {
  auto request = params.getRequest();
  ValidatedStart out;
  ASSIGN_OR_RETURN(out.process, CheckProcessRef(request.getSandboxId(), request.getProcessId()));
  ASSIGN_OR_RETURN(out.command,
                   CheckProcessCommand(request.getArgv(), request.getEnv(), request.getCwd(),
                                       request.getTty(), request.getRows(), request.getCols()));
  ASSIGN_OR_RETURN(out.command.workspace_cwd,
                   CheckWorkspaceCwd(request.getWorkspaceCwd(), request.getCwd()));
  out.command.exact_env = request.getExactEnv();
  out.command.report_unkept = request.getReportUnkept();
  out.command.drop_oldest = request.getDropOldest();
  return out;
}

absl::StatusOr<ValidatedProcessRef> ValidateWait(helper::Helper::WaitProcessParams::Reader params) {
  return CheckProcessRef(params.getSandboxId(), params.getProcessId());
}

absl::StatusOr<ValidatedSignal> ValidateSignal(
    helper::Helper::SignalProcessParams::Reader params) {
  ValidatedSignal out;
  ASSIGN_OR_RETURN(out.process, CheckProcessRef(params.getSandboxId(), params.getProcessId()));
  RETURN_IF_ERROR(CheckSignal(params.getSignal()));
  out.signal = params.getSignal();
  return out;
}

absl::StatusOr<ValidatedDelete> ValidateDelete(
    helper::Helper::DeleteSandboxParams::Reader params) {
  ValidatedDelete out;
  ASSIGN_OR_RETURN(out.sandbox_id, CheckId("sandboxId", params.getSandboxId()));
  return out;
}

absl::StatusOr<ValidatedInventory> ValidateInventory(helper::Helper::InventoryParams::Reader) {
  return ValidatedInventory{};
}

absl::StatusOr<ValidatedReattach> ValidateReattach(helper::Helper::ReattachParams::Reader params) {
  ASSIGN_OR_RETURN(ValidatedProcessRef process,
                   CheckProcessRef(params.getSandboxId(), params.getProcessId()));
  return ValidatedReattach{std::move(process), params.getStdoutOffset(), params.getStderrOffset()};
}

absl::StatusOr<ValidatedProcessRef> ValidateCloseInput(
    helper::Helper::CloseInputParams::Reader params) {
  return CheckProcessRef(params.getSandboxId(), params.getProcessId());
}

absl::StatusOr<ValidatedProcessRef> ValidateReleaseProcess(
    helper::Helper::ReleaseProcessParams::Reader params) {
  return CheckProcessRef(params.getSandboxId(), params.getProcessId());
}

namespace {

absl::StatusOr<ValidatedSandboxRef> CheckSandboxRef(capnp::Text::Reader sandbox_id) {
  ValidatedSandboxRef out;
  ASSIGN_OR_RETURN(out.sandbox_id, CheckId("sandboxId", sandbox_id));
  return out;
}

}  // namespace

absl::StatusOr<ValidatedSandboxRef> ValidateWaitSandbox(
    helper::Helper::WaitSandboxParams::Reader params) {
  return CheckSandboxRef(params.getSandboxId());
}

absl::StatusOr<ValidatedSandboxRef> ValidatePauseSandbox(
    helper::Helper::PauseSandboxParams::Reader params) {
  return CheckSandboxRef(params.getSandboxId());
}

absl::StatusOr<ValidatedSandboxRef> ValidateResumeSandbox(
    helper::Helper::ResumeSandboxParams::Reader params) {
  return CheckSandboxRef(params.getSandboxId());
}

absl::StatusOr<ValidatedSandboxRef> ValidateAwaitGone(
    helper::Helper::AwaitGoneParams::Reader params) {
  return CheckSandboxRef(params.getSandboxId());
}

absl::StatusOr<ValidatedSandboxRef> ValidateSpawnerState(
    helper::Helper::SpawnerStateParams::Reader params) {
  return CheckSandboxRef(params.getSandboxId());
}

absl::StatusOr<ValidatedSandboxIds> ValidateSandboxUsage(
    helper::Helper::SandboxUsageParams::Reader params) {
  auto ids = params.getSandboxIds();
  if (ids.size() > kMaxUsageIds)
    return Invalid("sandboxIds", absl::StrCat("at most ", kMaxUsageIds, " ids"));
  ValidatedSandboxIds out;
  for (auto id : ids) {
    ASSIGN_OR_RETURN(std::string checked, CheckId("sandboxIds", id));
    out.sandbox_ids.push_back(std::move(checked));
  }
  return out;
}

absl::StatusOr<ValidatedConnect> ValidateConnectPort(
    helper::Helper::ConnectPortParams::Reader params) {
  ValidatedConnect out;
  ASSIGN_OR_RETURN(out.sandbox_id, CheckId("sandboxId", params.getSandboxId()));
  if (params.getPort() == 0) return Invalid("port", "must be 1..65535");
  out.port = params.getPort();
  return out;
}

}  // namespace paseo
