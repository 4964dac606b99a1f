// WorkspaceResolver: turns (deployment, workspace path as the client sees it) into an O_PATH fd
// of a directory that is provably beneath one of the deployment's registered roots, and stages
// it as a root-owned bind mount that runsc can be given instead of any user-controlled path.
//
//   ASSIGN_OR_RETURN(ResolvedWorkspace ws, ResolveWorkspace(deployment, "/home/u/proj"));
//   RETURN_IF_ERROR(StageBind(ws, bundle_dir + "/mounts/0", /*read_only=*/true));
#pragma once

#include <sys/types.h>

#include <string>
#include "absl/strings/string_view.h"

#include <kj/io.h>

#include "absl/status/statusor.h"
#include "schema/config.capnp.h"

namespace paseo {

struct ResolvedWorkspace {
  kj::AutoCloseFd fd;    // O_PATH, directory, beneath the root
  std::string host_root;  // the registered root it is beneath (for messages only)
  std::string relative;   // path below the root ("" for the root itself)
  uid_t root_owner_uid = 0;
  gid_t root_owner_gid = 0;
};

// Maps the client's path through the deployment's roots (clientPath, or hostPath when the
// deployment has no client mapping), rejects any "..", "." or empty component, and resolves
// the rest with openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV |
// RESOLVE_NO_MAGICLINKS). The root itself is opened with RESOLVE_NO_SYMLINKS from "/", so a
// root replaced by a symlink after registration is refused too.
absl::StatusOr<ResolvedWorkspace> ResolveWorkspace(const config::Deployment::Reader& deployment,
                                                   absl::string_view client_path);

// Opens a registered credential directory (an absolute host path from the root-owned config)
// with RESOLVE_NO_SYMLINKS from "/", so a credential dir swapped for a symlink is refused.
absl::StatusOr<ResolvedWorkspace> ResolveCredential(const std::string& name,
                                                    const std::string& host_path);

// Creates `staging` (mode 0700, root-owned; it must not exist) and bind-mounts the resolved
// directory onto it, non-recursively, nosuid and nodev, read-only if asked. The bind goes
// through /proc/self/fd/N of the O_PATH fd, so no path is resolved again.
absl::Status StageBind(const ResolvedWorkspace& workspace, const std::string& staging,
                       bool read_only);

// Refuses a mount destination (a normalized absolute path inside the sandbox) if any existing
// component of it in the rootfs is a symlink or not a directory: runsc would follow the link
// inside the rootfs and mount somewhere else than the spec says. Missing trailing components
// are fine (gVisor creates mount points in its own overlay).
absl::Status CheckDestination(const std::string& rootfs, const std::string& destination);

// Detaches the staging mount (if mounted) and removes the directory.
absl::Status UnstageBind(const std::string& staging);

}  // namespace paseo
