// See request_validation.h.
#include "absl/strings/string_view.h"
#include "privhelper/request_validation.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/ids.h"
#include "common/status.h"

namespace paseo {
namespace {

absl::Status Invalid(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

bool IsUnder(absl::string_view path, absl::string_view dir) {
  return path == dir || absl::StartsWith(path, absl::StrCat(dir, "/"));
}

}  // namespace

absl::StatusOr<ValidatedCreate> ValidateCreate(const Config& config,
                                               helper::CreateSandboxRequest::Reader request) {
  ValidatedCreate out;
  if (!IsValidId(request.getSandboxId().cStr()) || HasNul(request.getSandboxId()))
    return Invalid("sandboxId", "not a valid id");
  out.sandbox_id = request.getSandboxId().cStr();
  out.deployment = config.FindDeployment(request.getDeploymentId().cStr());
  if (out.deployment == nullptr || HasNul(request.getDeploymentId()))
    return absl::PermissionDeniedError(
        absl::StrCat("deploymentId: no deployment \"", request.getDeploymentId().cStr(), "\""));
  std::vector<std::string> allowed = config.ProfilesOf(*out.deployment);
  std::string profile = request.getProfile().size() > 0 ? request.getProfile().cStr() : allowed[0];
  if (std::find(allowed.begin(), allowed.end(), profile) == allowed.end() ||
      HasNul(request.getProfile()))
    return absl::PermissionDeniedError(absl::StrCat(
        "profile: deployment ", out.deployment->getId().cStr(), " may not use profile \"",
        profile, "\""));
  out.profile = config.FindProfile(profile);
  if (out.profile == nullptr) return absl::InternalError("profile vanished from config");

  auto mounts = request.getWorkspaces();
  if (mounts.size() > kMaxMounts) return Invalid("workspaces", "too many workspaces");
  for (size_t i = 0; i < mounts.size(); ++i) {
    auto m = mounts[i];
    std::string field = absl::StrCat("workspaces[", i, "]");
    if (HasNul(m.getPath()) || HasNul(m.getDestination()))
      return Invalid(field, "contains a NUL byte");
    if (m.getPath().size() == 0 || m.getPath()[0] != '/' || m.getPath().size() > 4095)
      return Invalid(field + ".path", "must be an absolute path shorter than PATH_MAX");
    std::string dest = m.getDestination().size() > 0 ? m.getDestination().cStr() : "/workspace";
    if (!IsNormalizedAbsolutePath(dest) || dest == "/")
      return Invalid(field + ".destination", "must be a normalized absolute path other than /");
    for (const char* reserved : {"/proc", "/sys", "/dev", "/tmp", "/.paseo"}) {
      if (IsUnder(dest, reserved))
        return Invalid(field + ".destination", absl::StrCat("may not be under ", reserved));
    }
    for (const auto& other : out.mounts) {
      if (IsUnder(dest, other.destination) || IsUnder(other.destination, dest))
        return Invalid(field + ".destination", "overlaps another workspace's destination");
    }
    out.mounts.push_back(ValidatedMount{m.getPath().cStr(), dest,
                                        m.getMode() != api::AccessMode::READ_WRITE});
  }

  auto credentials = request.getCredentials();
  if (credentials.size() > kMaxCredentials) return Invalid("credentials", "too many credentials");
  for (size_t i = 0; i < credentials.size(); ++i) {
    std::string field = absl::StrCat("credentials[", i, "]");
    std::string name = credentials[i].cStr();
    if (HasNul(credentials[i]) || !IsValidId(name)) return Invalid(field, "not a valid name");
    ValidatedCredential c;
    c.name = name;
    for (auto root : out.deployment->getCredentialRoots()) {
      if (name == root.getName().cStr()) c.host_path = root.getHostPath().cStr();
    }
    if (c.host_path.empty())
      return absl::PermissionDeniedError(absl::StrCat(
          field, ": deployment ", out.deployment->getId().cStr(), " has no credential \"", name,
          "\""));
    for (auto m : out.profile->getCredentials()) {
      if (name == m.getName().cStr()) {
        c.destination = m.getDestination().cStr();
        c.read_only = !m.getWritable();
      }
    }
    if (c.destination.empty())
      return absl::PermissionDeniedError(absl::StrCat(
          field, ": profile ", out.profile->getName().cStr(), " places no credential \"", name,
          "\""));
    for (const auto& other : out.credentials) {
      if (other.name == name) return Invalid(field, "named twice");
    }
    for (const auto& m : out.mounts) {
      if (IsUnder(c.destination, m.destination) || IsUnder(m.destination, c.destination))
        return Invalid(field, "its destination overlaps a workspace's destination");
    }
    out.credentials.push_back(std::move(c));
  }
  return out;
}

absl::StatusOr<ValidatedStart> ValidateStart(helper::StartProcessRequest::Reader request) {
  ValidatedStart out;
  if (!IsValidId(request.getSandboxId().cStr()) || HasNul(request.getSandboxId()))
    return Invalid("sandboxId", "not a valid id");
  if (!IsValidId(request.getProcessId().cStr()) || HasNul(request.getProcessId()))
    return Invalid("processId", "not a valid id");
  out.sandbox_id = request.getSandboxId().cStr();
  out.process_id = request.getProcessId().cStr();
  auto argv = request.getArgv();
  if (argv.size() == 0) return Invalid("argv", "must not be empty");
  if (argv.size() > kMaxArgs) return Invalid("argv", "too many arguments");
  if (request.getEnv().size() > kMaxEnv) return Invalid("env", "too many entries");
  size_t total = 0;
  for (auto a : argv) {
    if (HasNul(a)) return Invalid("argv", "contains a NUL byte");
    total += a.size() + 1;
    out.argv.emplace_back(a.cStr());
  }
  if (out.argv[0].empty()) return Invalid("argv[0]", "must not be empty");
  for (auto e : request.getEnv()) {
    absl::string_view entry(e.cStr(), e.size());
    size_t eq = entry.find('=');
    if (HasNul(e) || eq == absl::string_view::npos || eq == 0)
      return Invalid("env", "entries must be KEY=VALUE without NUL bytes");
    total += e.size() + 1;
    out.env.emplace_back(entry);
  }
  if (total > kMaxArgvBytes) return Invalid("argv", "argv and env exceed 1 MiB");
  out.tty = request.getTty();
  if (out.tty) {
    if (request.getRows() == 0 || request.getCols() == 0)
      return Invalid("rows", "a terminal needs at least one row and one column");
    out.rows = request.getRows();
    out.cols = request.getCols();
  }
  if (request.getCwd().size() > 0) {
    if (HasNul(request.getCwd()) || !IsNormalizedAbsolutePath(request.getCwd().cStr()))
      return Invalid("cwd", "must be a normalized absolute path");
    out.cwd = request.getCwd().cStr();
  }
  return out;
}

}  // namespace paseo
