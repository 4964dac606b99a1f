// What `paseo-sandbox-admin deployment add|remove` does to the root-owned config dir: every
// change is first applied to a private staged copy and loaded with the privhelper's own
// LoadConfig, so the admin accepts exactly what the privhelper will; only then is the real
// file written (or removed) crash-safely. Usage:
//   ASSIGN_OR_RETURN(auto config, ValidateChange("/etc/paseo-sandbox", change));
//   RETURN_IF_ERROR(WriteFileAtomically(path, contents, 0644));
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "privhelper/config.h"

namespace paseo::admin {

// One file of the config dir to write (contents) or remove (nullopt), by its path relative to
// the dir ("deployments/x.json").
struct ConfigChange {
  std::string relative_path;
  std::optional<std::string> contents;
};

// Copies helper.json, deployments/*.json and profiles/*.json of `config_dir` into a fresh
// private directory under `scratch_parent`, applies `change` there, and loads it with
// LoadConfig. The copy is removed before returning. Errors name the real config dir's paths.
absl::StatusOr<std::unique_ptr<Config>> ValidateChange(const std::string& config_dir,
                                                       const ConfigChange& change,
                                                       const std::string& scratch_parent = "/tmp");

// Replaces `path` with `contents`, mode `mode` (root:root when running as root): a temporary
// file in the same directory, fsync, rename over `path`, fsync of the directory. A crash leaves
// the old file or the new one, never a part; the temporary name does not end in ".json", so
// LoadConfig never reads it.
absl::Status WriteFileAtomically(const std::string& path, const std::string& contents,
                                 mode_t mode);
// The whole content of `path` (NotFound-like errno status naming it if it cannot be opened).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// Removes `path` and fsyncs its directory.
absl::Status RemoveFileDurably(const std::string& path);

// What `deployment add` is given on its command line.
struct DeploymentSpec {
  std::string id;
  std::vector<uint32_t> allowed_uids;
  std::vector<uint32_t> allowed_gids;
  struct Root {
    std::string host_path;
    std::string client_path;  // empty: the host path
  };
  std::vector<Root> workspace_roots;
  std::optional<std::pair<uint32_t, uint32_t>> run_as;  // uid, gid
  std::vector<std::string> profiles;
  std::optional<uint32_t> max_sandboxes;
};

// The deployment as the JSON file the privhelper reads (schema/config.capnp Deployment),
// encoded by capnp's JsonCodec so the field names are the schema's.
std::string DeploymentJson(const DeploymentSpec& spec);

// "HOST[:CLIENT]" of --workspace-root: split at the first ':' (a host path with ':' cannot be
// given this way; use --from-file).
DeploymentSpec::Root ParseRoot(const std::string& text);

// The id a deployment file declares (decoded as the privhelper decodes it), or its decode error.
absl::StatusOr<std::string> DeploymentIdOf(const std::string& json, const std::string& file);

// The file under <config_dir>/deployments that defines deployment `id` (any name ending in
// .json), or NotFound.
absl::StatusOr<std::string> FileOfDeployment(const std::string& config_dir, const std::string& id);

// helper.json's stateDir and runDir (schema defaults where it leaves them out), read on their
// own so that status and gc still find the service when another config file is broken.
struct HelperDirs {
  std::string state_dir;
  std::string run_dir;
};
absl::StatusOr<HelperDirs> ReadHelperDirs(const std::string& config_dir);

}  // namespace paseo::admin
