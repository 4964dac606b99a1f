// See workspace_resolver.h.
#include "absl/strings/string_view.h"
#include "privhelper/workspace_resolver.h"

#include <dirent.h>
#include <stdio.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"

namespace paseo {

int Openat2(int dirfd, const char* path, uint64_t flags, uint64_t resolve) {
  struct open_how how = {};
  how.flags = flags;
  how.resolve = resolve;
  return static_cast<int>(syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
}

namespace {

// If `path` equals `prefix` or continues it with '/', returns the rest without its leading '/'.
bool StripPathPrefix(absl::string_view path, absl::string_view prefix, absl::string_view* rest) {
  if (path.substr(0, prefix.size()) != prefix) return false;
  if (path.size() == prefix.size()) {
    *rest = "";
    return true;
  }
  if (prefix == "/") {
    *rest = path.substr(1);
    return true;
  }
  if (path[prefix.size()] != '/') return false;
  *rest = path.substr(prefix.size() + 1);
  return true;
}

absl::Status Refuse(absl::string_view client_path, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("workspace \"", client_path, "\": ", why));
}

absl::StatusOr<uint64_t> MountId(int fd, absl::string_view what) {
  struct statx stx = {};
  if (statx(fd, "", AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW, STATX_MNT_ID, &stx) != 0)
    return ErrnoStatus("statx", what);
  if (!(stx.stx_mask & STATX_MNT_ID)) return absl::InternalError("statx: no mount id");
  return stx.stx_mnt_id;
}

// The registered root, reached without any symlink: a root swapped for a symlink after
// registration would otherwise move the whole deployment elsewhere.
absl::StatusOr<kj::AutoCloseFd> OpenRoot(const config::Deployment::Reader& deployment,
                                         absl::string_view host_root) {
  int fd = Openat2(AT_FDCWD, std::string(host_root).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) {
    int err = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        "workspace root ", host_root, " of deployment ", deployment.getId().cStr(),
        " cannot be opened safely: ", std::strerror(err)));
  }
  return kj::AutoCloseFd(fd);
}

kj::AutoCloseFd Dup(const kj::AutoCloseFd& fd) {
  return kj::AutoCloseFd(fcntl(fd.get(), F_DUPFD_CLOEXEC, 0));
}

// Permission-denied unless `peer` may `want` on the directory `fd`, which the client calls
// `seen`. An ACL that cannot be read or understood refuses too.
absl::Status RequireAccess(int fd, const PeerIdentity& peer, int want,
                           absl::string_view client_path, absl::string_view seen) {
  absl::StatusOr<bool> may = PeerMayAccess(fd, peer, want);
  if (may.ok() && *may) return absl::OkStatus();
  absl::string_view what = want == kMayExec          ? "search"
                           : (want & kMayWrite) != 0 ? "open read-write"
                                                     : "open read-only";
  std::string message = absl::StrCat("workspace \"", client_path, "\": ", peer.Describe(),
                                     " may not ", what, " ", seen);
  if (!may.ok()) absl::StrAppend(&message, " (", may.status().message(), ")");
  return absl::PermissionDeniedError(message);
}

// ResolveWorkspace's walk. `peer` null: the path is the operator's grant (a tool root), so no
// client's permissions are checked on the way.
absl::StatusOr<ResolvedWorkspace> Resolve(const config::Deployment::Reader& deployment,
                                          absl::string_view client_path, const PeerIdentity* peer,
                                          bool read_only) {
  if (client_path.size() > 4095) return Refuse(client_path.substr(0, 64), "path is too long");
  if (client_path.find('\0') != absl::string_view::npos) return Refuse("?", "path contains NUL");
  if (client_path.empty() || client_path[0] != '/') return Refuse(client_path, "must be absolute");
  // One rule, the API's (common/request_checks.h IsNormalizedAbsolutePath): the path must be
  // normalized. A trailing "/" is refused like "//", not trimmed (the CLI normalizes what its
  // user types; docs/running.md).
  const absl::string_view trimmed = client_path;
  if (client_path.size() > 1 && client_path.back() == '/')
    return Refuse(client_path, "trailing \"/\" (the path must be normalized)");
  for (absl::string_view part : absl::StrSplit(trimmed.substr(1), '/')) {
    if (trimmed == "/") break;
    if (part.empty()) return Refuse(client_path, "empty path component (\"//\")");
    if (part == "." || part == "..") return Refuse(client_path, "\".\" and \"..\" are not allowed");
  }

  for (auto root : deployment.getWorkspaceRoots()) {
    absl::string_view host_root = root.getHostPath().cStr();
    absl::string_view mapped = root.getClientPath().size() > 0 ? root.getClientPath().cStr()
                                                              : host_root;
    absl::string_view rest;
    if (!StripPathPrefix(trimmed, mapped, &rest)) continue;

    ResolvedWorkspace ws;
    ws.host_root = std::string(host_root);
    ws.relative = std::string(rest);
    ASSIGN_OR_RETURN(kj::AutoCloseFd root_fd, OpenRoot(deployment, host_root));

    // Walk one component at a time so the client's own permissions can be checked on exactly
    // the directories walked: the privhelper's CAP_DAC_OVERRIDE would otherwise hand out a
    // 0700 directory of another user. Each directory is checked before anything is opened from
    // it, as the kernel would for the client, so a refusal says nothing about what lies below.
    std::string seen(mapped);  // what the client calls the current directory
    kj::AutoCloseFd dir = Dup(root_fd);
    if (dir.get() < 0) return ErrnoStatus("dup", host_root);
    for (absl::string_view part : absl::StrSplit(rest, '/', absl::SkipEmpty())) {
      if (peer != nullptr)
        RETURN_IF_ERROR(RequireAccess(dir.get(), *peer, kMayExec, client_path, seen));
      std::string name(part);
      int fd = Openat2(dir.get(), name.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                       RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_XDEV |
                           RESOLVE_NO_MAGICLINKS);
      if (fd < 0) {
        int err = errno;
        switch (err) {
          case ELOOP:
            return Refuse(client_path, "a path component is a symlink");
          case EXDEV:
            return Refuse(client_path, "crosses a mount point or leaves the workspace root");
          case ENOTDIR:
            return Refuse(client_path, "a path component is not a directory");
          case ENOENT:
            return absl::NotFoundError(
                absl::StrCat("workspace \"", client_path, "\": does not exist"));
          default:
            return Refuse(client_path, std::strerror(err));
        }
      }
      dir = kj::AutoCloseFd(fd);
      seen = seen == "/" ? absl::StrCat("/", part) : absl::StrCat(seen, "/", part);
    }
    if (peer != nullptr)
      RETURN_IF_ERROR(RequireAccess(dir.get(), *peer,
                                    read_only ? kMayRead | kMayExec
                                              : kMayRead | kMayWrite | kMayExec,
                                    client_path, seen));
    // RESOLVE_NO_XDEV already refuses mount crossings at every step; the mount id check states
    // the invariant the bind relies on in one place.
    ASSIGN_OR_RETURN(uint64_t root_mnt, MountId(root_fd.get(), host_root));
    ASSIGN_OR_RETURN(uint64_t ws_mnt, MountId(dir.get(), client_path));
    if (root_mnt != ws_mnt) return Refuse(client_path, "is on a different mount than its root");
    ws.fd = kj::mv(dir);
    return ws;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "workspace \"", client_path, "\" is not beneath any workspace root of deployment ",
      deployment.getId().cStr()));
}

// A directory the root-owned config names by its host path, reached from "/" without any
// symlink: swapped for one after registration, it is refused rather than followed.
absl::StatusOr<ResolvedWorkspace> OpenRegisteredDir(absl::string_view what,
                                                    const std::string& host_path) {
  int fd = Openat2(AT_FDCWD, host_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) {
    int err = errno;
    return absl::FailedPreconditionError(
        absl::StrCat(what, " (", host_path, ") cannot be opened safely: ", std::strerror(err)));
  }
  ResolvedWorkspace ws;
  ws.fd = kj::AutoCloseFd(fd);
  ws.host_root = host_path;
  return ws;
}

}  // namespace

absl::StatusOr<ResolvedWorkspace> ResolveWorkspace(const config::Deployment::Reader& deployment,
                                                   absl::string_view client_path,
                                                   const PeerIdentity& peer, bool read_only) {
  return Resolve(deployment, client_path, &peer, read_only);
}

absl::StatusOr<ResolvedWorkspace> ResolveTool(const config::Deployment::Reader& deployment,
                                              config::ToolRoot::Reader tool) {
  std::string what = absl::StrCat("tool root ", tool.getName().cStr(), " of deployment ",
                                  deployment.getId().cStr());
  if (tool.getHostPath().size() > 0) return OpenRegisteredDir(what, tool.getHostPath().cStr());
  // A Docker deployment's tool root, as its container sees it: mapped and walked like a
  // workspace path that client sent. Whatever stops it is the host's state, not a request's.
  absl::StatusOr<ResolvedWorkspace> ws =
      Resolve(deployment, tool.getClientPath().cStr(), nullptr, /*read_only=*/true);
  if (!ws.ok())
    return absl::FailedPreconditionError(absl::StrCat(what, ": ", ws.status().message()));
  return ws;
}

absl::StatusOr<RootOwner> FirstRootOwner(const config::Deployment::Reader& deployment) {
  if (deployment.getWorkspaceRoots().size() == 0)
    return absl::FailedPreconditionError(
        absl::StrCat("deployment ", deployment.getId().cStr(), " has no workspace root"));
  ASSIGN_OR_RETURN(kj::AutoCloseFd root_fd,
                   OpenRoot(deployment, deployment.getWorkspaceRoots()[0].getHostPath().cStr()));
  struct stat st;
  if (fstat(root_fd.get(), &st) != 0)
    return ErrnoStatus("fstat", deployment.getWorkspaceRoots()[0].getHostPath().cStr());
  return RootOwner{st.st_uid, st.st_gid};
}

absl::StatusOr<ResolvedWorkspace> ResolveCredential(const std::string& name,
                                                    const std::string& host_path) {
  return OpenRegisteredDir(absl::StrCat("credential ", name), host_path);
}

absl::Status StageBind(const ResolvedWorkspace& workspace, const std::string& staging,
                       bool read_only) {
  // The new bind must be at least as restrictive as the mount the workspace lives on: a
  // bind-remount replaces all per-mount flags, so a read-write request on a read-only mount
  // would otherwise silently make it writable.
  struct statvfs source;
  if (fstatvfs(workspace.fd.get(), &source) != 0) return ErrnoStatus("fstatvfs", staging);
  if ((source.f_flag & ST_RDONLY) && !read_only)
    return absl::FailedPreconditionError(absl::StrCat(
        "workspace ", workspace.host_root, "/", workspace.relative,
        " is on a read-only mount; ask for it read-only"));
  if (mkdir(staging.c_str(), 0700) != 0) return ErrnoStatus("mkdir", staging);
  std::string source_path = absl::StrCat("/proc/self/fd/", workspace.fd.get());
  // MS_BIND without MS_REC: submounts beneath the workspace are not carried along.
  if (mount(source_path.c_str(), staging.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    absl::Status s = ErrnoStatus("bind mount", staging);
    rmdir(staging.c_str());
    return s;
  }
  // Our umount later must not propagate anywhere (the privhelper runs in its own mount
  // namespace, this is belt and braces).
  if (mount(nullptr, staging.c_str(), nullptr, MS_PRIVATE, nullptr) != 0) {
    absl::Status s = ErrnoStatus("make private", staging);
    umount2(staging.c_str(), MNT_DETACH);
    rmdir(staging.c_str());
    return s;
  }
  // A bind ignores MS_RDONLY/MS_NOSUID/MS_NODEV on creation; they take effect only through a
  // second, remounting call on the new mount.
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (read_only ? MS_RDONLY : 0);
  if (source.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (source.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (source.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (source.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  if (mount(nullptr, staging.c_str(), nullptr, flags, nullptr) != 0) {
    absl::Status s = ErrnoStatus("remount", staging);
    umount2(staging.c_str(), MNT_DETACH);
    rmdir(staging.c_str());
    return s;
  }
  return absl::OkStatus();
}

absl::Status CheckDestination(const std::string& rootfs, const std::string& destination) {
  int root_fd = Openat2(AT_FDCWD, rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                        RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (root_fd < 0) return ErrnoStatus("open rootfs", rootfs);
  kj::AutoCloseFd owned(root_fd);
  std::string prefix;
  for (absl::string_view part : absl::StrSplit(absl::string_view(destination).substr(1), '/')) {
    prefix = prefix.empty() ? std::string(part) : absl::StrCat(prefix, "/", part);
    int fd = Openat2(root_fd, prefix.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                     RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (fd >= 0) {
      close(fd);
      continue;
    }
    if (errno == ENOENT) return absl::OkStatus();
    if (errno == ELOOP)
      return absl::InvalidArgumentError(absl::StrCat(
          "destination ", destination, ": /", prefix, " is a symlink in the sandbox's rootfs"));
    if (errno == ENOTDIR)
      return absl::InvalidArgumentError(absl::StrCat(
          "destination ", destination, ": /", prefix, " is not a directory in the rootfs"));
    return ErrnoStatus("resolve destination", destination);
  }
  return absl::OkStatus();
}

absl::Status CheckWorkspaceCwdBeneath(const std::string& staging, const std::string& relative) {
  int root_fd = Openat2(AT_FDCWD, staging.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                        RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (root_fd < 0) return ErrnoStatus("open staged workspace", staging);
  kj::AutoCloseFd root(root_fd);
  if (relative.empty()) return absl::OkStatus();
  // No RESOLVE_NO_SYMLINKS: a relative symlink that stays inside the workspace is fine (the
  // sandbox follows it the same way). RESOLVE_NO_XDEV: nothing beneath the non-recursive staging
  // bind is another mount, so a crossing means the tree is not what the sandbox sees.
  int fd = Openat2(root.get(), relative.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                   RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV);
  if (fd >= 0) {
    close(fd);
    return absl::OkStatus();
  }
  int err = errno;
  auto refuse = [&relative](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("workspaceCwd \"", relative, "\": ", why));
  };
  switch (err) {
    case EXDEV:
      return refuse(
          "leaves the workspace (through \"..\", a symlink leading out or to an absolute path, "
          "or a mount)");
    case ENOENT:
      return refuse("does not exist in the workspace");
    case ENOTDIR:
      return refuse("is not a directory");
    case ELOOP:
      return refuse("too many levels of symlinks");
    case EACCES:
      return refuse("cannot be searched");
    default:
      return refuse(std::strerror(err));
  }
}

absl::Status UnstageBind(const std::string& staging) {
  if (umount2(staging.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL &&
      errno != ENOENT)
    return ErrnoStatus("umount", staging);
  if (rmdir(staging.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("rmdir", staging);
  return absl::OkStatus();
}

namespace {

// The names in the directory `fd` (read through a duplicate, rewound first).
absl::StatusOr<std::vector<std::string>> Names(int fd, const std::string& what) {
  int dup_fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return ErrnoStatus("dup", what);
  DIR* d = fdopendir(dup_fd);
  if (d == nullptr) {
    close(dup_fd);
    return ErrnoStatus("fdopendir", what);
  }
  rewinddir(d);
  std::vector<std::string> names;
  while (dirent* e = readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(std::move(n));
  }
  closedir(d);
  return names;
}

// Removes what the directory `fd` holds; subdirectories at kMaxRemoveDepth are moved up into
// `top` instead (named by *moved) and *again is set, for another pass.
absl::Status RemoveContents(int top, int fd, uint64_t mnt, int depth, const std::string& what,
                            uint64_t* moved, bool* again) {
  // Root's first: the sandbox's user may have made it sticky (mode 1777), and then only the
  // directory's or an entry's owner may remove entries (the privhelper has no CAP_FOWNER, only
  // CAP_CHOWN). Nothing else changes the tree now.
  // (EPERM: not root, as in the unit tests; the privhelper always holds CAP_CHOWN.)
  if (fchown(fd, 0, 0) != 0 && errno != EPERM) return ErrnoStatus("chown", what);
  ASSIGN_OR_RETURN(std::vector<std::string> names, Names(fd, what));
  for (const auto& n : names) {
    struct stat st;
    if (fstatat(fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus("fstatat", absl::StrCat(what, "/", n));
    }
    if (!S_ISDIR(st.st_mode)) {
      if (unlinkat(fd, n.c_str(), 0) != 0 && errno != ENOENT)
        return ErrnoStatus("unlink", absl::StrCat(what, "/", n));
      continue;
    }
    if (depth + 1 >= kMaxRemoveDepth) {
      // A name of the sandbox's may already be there: never replace one, try the next.
      for (;;) {
        std::string up = absl::StrCat(".paseo-deep-", (*moved)++);
        if (renameat2(fd, n.c_str(), top, up.c_str(), RENAME_NOREPLACE) == 0) break;
        if (errno != EEXIST || *moved > (uint64_t{1} << 40))
          return ErrnoStatus("rename", absl::StrCat(what, "/", n));
      }
      *again = true;
      continue;
    }
    int child = openat(fd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (child < 0) return ErrnoStatus("open", absl::StrCat(what, "/", n));
    kj::AutoCloseFd owned(child);
    ASSIGN_OR_RETURN(uint64_t child_mnt, MountId(child, n));
    if (child_mnt != mnt)
      return absl::FailedPreconditionError(
          absl::StrCat(what, "/", n, " is a mount point: not removed"));
    RETURN_IF_ERROR(RemoveContents(top, child, mnt, depth + 1, absl::StrCat(what, "/", n),
                                   moved, again));
    if (unlinkat(fd, n.c_str(), AT_REMOVEDIR) != 0 && errno != ENOENT)
      return ErrnoStatus("rmdir", absl::StrCat(what, "/", n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status RemoveEmptyWorkspace(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? absl::OkStatus() : ErrnoStatus("open", dir);
  kj::AutoCloseFd top(fd);
  std::string parent_path = dir.substr(0, dir.rfind('/'));
  int parent = open(parent_path.empty() ? "/" : parent_path.c_str(),
                    O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (parent < 0) return ErrnoStatus("open", parent_path);
  kj::AutoCloseFd parent_fd(parent);
  ASSIGN_OR_RETURN(uint64_t mnt, MountId(top.get(), dir));
  ASSIGN_OR_RETURN(uint64_t parent_mnt, MountId(parent_fd.get(), parent_path));
  if (mnt != parent_mnt)
    return absl::FailedPreconditionError(absl::StrCat(dir, " is a mount point: not removed"));
  uint64_t moved = 0;
  for (bool again = true; again;) {
    again = false;
    RETURN_IF_ERROR(RemoveContents(top.get(), top.get(), mnt, 0, dir, &moved, &again));
  }
  if (rmdir(dir.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("rmdir", dir);
  return absl::OkStatus();
}

}  // namespace paseo
