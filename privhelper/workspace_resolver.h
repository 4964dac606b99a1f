// WorkspaceResolver: turns (deployment, workspace path as the client sees it, the client) into
// an O_PATH fd of a directory that is provably beneath one of the deployment's registered roots
// and that the client could open itself, and stages it as a root-owned bind mount that runsc
// can be given instead of any user-controlled path.
//
//   ASSIGN_OR_RETURN(ResolvedWorkspace ws,
//                    ResolveWorkspace(deployment, "/home/u/proj", peer, /*read_only=*/true));
//   RETURN_IF_ERROR(StageBind(ws, bundle_dir + "/mounts/0", /*read_only=*/true));
#pragma once

#include <sys/types.h>

#include <string>
#include "absl/strings/string_view.h"

#include <kj/io.h>

#include "absl/status/statusor.h"
#include "privhelper/peer_access.h"
#include "schema/config.capnp.h"

namespace paseo {

// openat2(2) (glibc 2.36 has no wrapper): `flags` as for open, `resolve` RESOLVE_* bits.
// Returns the fd, or -1 with errno set.
int Openat2(int dirfd, const char* path, uint64_t flags, uint64_t resolve);

struct ResolvedWorkspace {
  kj::AutoCloseFd fd;    // O_PATH, directory, beneath the root
  std::string host_root;  // the registered root it is beneath (for messages only)
  std::string relative;   // path below the root ("" for the root itself)
};

// Maps the client's path through the deployment's roots (clientPath, or hostPath when the
// deployment has no client mapping), rejects any "..", "." or empty component, and walks the
// rest one component at a time, each opened from the previous one's fd with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS).
// The root itself is opened with RESOLVE_NO_SYMLINKS from "/", so a root replaced by a symlink
// after registration is refused too.
//
// The privhelper walks with CAP_DAC_OVERRIDE, so it checks the client's own permissions on the
// way (peer_access.h): search on the root and on every directory beneath it that the path goes
// through, each checked before the next component is opened from it, and on the workspace
// itself read and search (`read_only`) or read, write and search. A refusal is
// permission-denied naming the first directory denied, as the client sees it; it reveals
// nothing beneath a directory the client may not search. Directories above the registered root
// are not checked: registering the root is the operator's grant (a Docker volume's host path
// lies under a root-only directory, for example).
absl::StatusOr<ResolvedWorkspace> ResolveWorkspace(const config::Deployment::Reader& deployment,
                                                   absl::string_view client_path,
                                                   const PeerIdentity& peer, bool read_only);

// The owner of the deployment's first workspace root, opened as ResolveWorkspace opens roots:
// who agents run as when the deployment names no runAs. It grants no path to anyone.
struct RootOwner {
  uid_t uid = 0;
  gid_t gid = 0;
};
absl::StatusOr<RootOwner> FirstRootOwner(const config::Deployment::Reader& deployment);

// Opens a registered credential directory (an absolute host path from the root-owned config)
// with RESOLVE_NO_SYMLINKS from "/", so a credential dir swapped for a symlink is refused.
// The client's permissions on it are not checked: a credential is granted by the deployment
// that lists it (by name, never by a client's path), not by the filesystem; it is typically
// the run-as user's or root's and unreadable by the client.
absl::StatusOr<ResolvedWorkspace> ResolveCredential(const std::string& name,
                                                    const std::string& host_path);

// Opens a deployment's tool root (schema/config.capnp ToolRoot). A hostPath is opened like a
// credential (from "/", no symlink anywhere in it); a clientPath (a Docker deployment's
// container path) is mapped through the deployment's workspaceRoots and walked exactly as
// ResolveWorkspace walks a client's workspace path -- no "..", no symlink, no mount crossed --
// but without checking any client's permissions: the tool is the operator's grant to every
// sandbox of the deployment, like a credential. Refusals are failed-precondition naming the
// tool root: the host does not match the config, the request is not at fault.
absl::StatusOr<ResolvedWorkspace> ResolveTool(const config::Deployment::Reader& deployment,
                                              config::ToolRoot::Reader tool);

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

// Checks a process's workspace-relative working directory (common/request_checks.h
// CheckWorkspaceCwd's form; "" is the workspace itself) against the staged workspace
// `staging`, a root-owned path in the bundle: opened from an O_PATH fd of it with
// openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV), so ".." and relative
// symlinks are followed only while they stay inside, and an absolute symlink, one leading out,
// or a mount crossing is refused; it must then be a directory. The staging bind is
// non-recursive, so what is resolved here is what the sandbox sees at that path. Refusals are
// invalid-argument naming workspaceCwd. The sandbox's workload can change the tree after this
// check (docs/threat-model.md): that moves the working directory only within what it controls.
absl::Status CheckWorkspaceCwdBeneath(const std::string& staging, const std::string& relative);

// Detaches the staging mount (if mounted) and removes the directory.
absl::Status UnstageBind(const std::string& staging);

// An empty workspace (Api.WorkspaceMount.empty) is the directory <bundle>/mounts/empty-N.
inline constexpr char kEmptyWorkspacePrefix[] = "empty-";
// Removes an empty workspace's directory `dir` and all the sandbox wrote in it. Called once the
// sandbox is gone (nothing changes the tree meanwhile; its parent is the root-only bundle), and
// careful all the same: it never follows a symlink (every step is an fd opened O_NOFOLLOW from
// its parent), never leaves `dir`'s mount, and refuses a `dir` that is a mount point itself, so
// a client's staged workspace can never be what it removes. However deep the tree, it holds at
// most kMaxRemoveDepth directory fds: deeper subtrees are first moved up into `dir`.
inline constexpr int kMaxRemoveDepth = 64;
absl::Status RemoveEmptyWorkspace(const std::string& dir);

}  // namespace paseo
