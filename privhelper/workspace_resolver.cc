// See workspace_resolver.h.
#include "absl/strings/string_view.h"
#include "privhelper/workspace_resolver.h"

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
namespace {

int Openat2(int dirfd, const char* path, uint64_t flags, uint64_t resolve) {
  struct open_how how = {};
  how.flags = flags;
  how.resolve = resolve;
  return static_cast<int>(syscall(SYS_openat2, dirfd, path, &how, sizeof(how)));
}

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

}  // namespace

absl::StatusOr<ResolvedWorkspace> ResolveWorkspace(const config::Deployment::Reader& deployment,
                                                   absl::string_view client_path) {
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
    // The registered root must itself be reached without any symlink: a root swapped for a
    // symlink after registration would otherwise move the whole deployment elsewhere.
    int root_fd = Openat2(AT_FDCWD, std::string(host_root).c_str(),
                          O_PATH | O_DIRECTORY | O_CLOEXEC,
                          RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
    if (root_fd < 0) {
      int err = errno;
      return absl::FailedPreconditionError(absl::StrCat(
          "workspace root ", host_root, " of deployment ", deployment.getId().cStr(),
          " cannot be opened safely: ", std::strerror(err)));
    }
    kj::AutoCloseFd root_owned(root_fd);
    struct stat root_st;
    if (fstat(root_fd, &root_st) != 0) return ErrnoStatus("fstat", host_root);
    ws.root_owner_uid = root_st.st_uid;
    ws.root_owner_gid = root_st.st_gid;

    if (rest.empty()) {
      ws.fd = std::move(root_owned);
      return ws;
    }
    int fd = Openat2(root_fd, std::string(rest).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
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
    ws.fd = kj::AutoCloseFd(fd);
    // RESOLVE_NO_XDEV already refuses mount crossings; the mount id check states the invariant
    // the bind relies on in one place.
    ASSIGN_OR_RETURN(uint64_t root_mnt, MountId(root_fd, host_root));
    ASSIGN_OR_RETURN(uint64_t ws_mnt, MountId(fd, client_path));
    if (root_mnt != ws_mnt) return Refuse(client_path, "is on a different mount than its root");
    return ws;
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "workspace \"", client_path, "\" is not beneath any workspace root of deployment ",
      deployment.getId().cStr()));
}

absl::StatusOr<ResolvedWorkspace> ResolveCredential(const std::string& name,
                                                    const std::string& host_path) {
  int fd = Openat2(AT_FDCWD, host_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC,
                   RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
  if (fd < 0) {
    int err = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        "credential ", name, " (", host_path, ") cannot be opened safely: ", std::strerror(err)));
  }
  ResolvedWorkspace ws;
  ws.fd = kj::AutoCloseFd(fd);
  ws.host_root = host_path;
  return ws;
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

absl::Status UnstageBind(const std::string& staging) {
  if (umount2(staging.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0 && errno != EINVAL &&
      errno != ENOENT)
    return ErrnoStatus("umount", staging);
  if (rmdir(staging.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("rmdir", staging);
  return absl::OkStatus();
}

}  // namespace paseo
