// Re-validation of every broker request on the privileged side. The broker already checked
// them; these checks assume it did not (a compromised broker must get no more than an
// authorized client). Pure functions over the config, so they are unit-tested directly.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "privhelper/config.h"
#include "schema/helper.capnp.h"

namespace paseo {

struct ValidatedMount {
  std::string client_path;
  std::string destination;
  bool read_only = true;
};

struct ValidatedCredential {
  std::string name;
  std::string host_path;    // from the deployment's credentialRoots
  std::string destination;  // from the profile
  bool read_only = true;
};

inline constexpr size_t kMaxCredentials = 8;

struct ValidatedCreate {
  std::string sandbox_id;
  const config::Deployment::Reader* deployment = nullptr;
  const config::LaunchProfile::Reader* profile = nullptr;
  std::vector<ValidatedMount> mounts;
  std::vector<ValidatedCredential> credentials;
};

struct ValidatedStart {
  std::string sandbox_id;
  std::string process_id;
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;  // empty: caller picks the default
  bool tty = false;
  uint16_t rows = 0;  // tty only, 1..65535
  uint16_t cols = 0;
};

inline constexpr size_t kMaxMounts = 16;

// Sandbox ids, deployment, profile (must be one the deployment allows), mount count, each
// destination (normalized absolute, not /, not under /proc, /sys or /dev, no duplicates or
// nesting), workspace paths (absolute, bounded, no NUL).
absl::StatusOr<ValidatedCreate> ValidateCreate(const Config& config,
                                               helper::CreateSandboxRequest::Reader request);

// Ids, non-empty argv without NUL bytes, env entries of the form KEY=VALUE, cwd absolute and
// normalized when given, total size bounded.
absl::StatusOr<ValidatedStart> ValidateStart(helper::StartProcessRequest::Reader request);

}  // namespace paseo
