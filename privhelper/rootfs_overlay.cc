// See rootfs_overlay.h.
#include "privhelper/rootfs_overlay.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace paseo {
namespace {

// Removes everything inside the directory `dir_fd` (not the directory itself), never following
// a symlink and never descending into another filesystem (a mount point is left alone, and
// its removal then fails, which is reported).
absl::Status EmptyDirectory(int dir_fd, dev_t dev, const std::string& where) {
  int dup_fd = fcntl(dir_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) return ErrnoStatus("dup", where);
  DIR* d = fdopendir(dup_fd);
  if (d == nullptr) {
    close(dup_fd);
    return ErrnoStatus("fdopendir", where);
  }
  absl::Status result = absl::OkStatus();
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    struct stat st;
    if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      if (st.st_dev != dev) {
        result = absl::FailedPreconditionError(absl::StrCat(where, "/", name, " is a mount point"));
        continue;
      }
      // A directory we cannot open (overlayfs leaves work/work with mode 000) may still be
      // empty: try to remove it either way.
      int child = openat(dir_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      if (child >= 0) {
        absl::Status inner = EmptyDirectory(child, dev, where + "/" + name);
        close(child);
        if (!inner.ok()) result = inner;
      }
      if (unlinkat(dir_fd, name.c_str(), AT_REMOVEDIR) != 0 && result.ok())
        result = ErrnoStatus("rmdir", where + "/" + name);
    } else if (unlinkat(dir_fd, name.c_str(), 0) != 0 && result.ok()) {
      result = ErrnoStatus("unlink", where + "/" + name);
    }
  }
  closedir(d);
  return result;
}

absl::Status RemoveTree(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus("open", path);
  }
  struct stat st;
  absl::Status s = fstat(fd, &st) == 0 ? EmptyDirectory(fd, st.st_dev, path)
                                       : ErrnoStatus("fstat", path);
  close(fd);
  RETURN_IF_ERROR(s);
  if (rmdir(path.c_str()) != 0) return ErrnoStatus("rmdir", path);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> MountRootfsOverlay(const std::string& lower,
                                               const std::string& bundle_dir) {
  if (lower.find_first_of(",:\\") != std::string::npos)
    return absl::InvalidArgumentError(lower + ": rootfs path may not contain ',', ':' or '\\'");
  std::string upper = bundle_dir + "/upper";
  std::string work = bundle_dir + "/work";
  std::string merged = bundle_dir + "/rootfs";
  for (const auto& d : {upper, work, merged}) {
    if (mkdir(d.c_str(), 0700) != 0) return ErrnoStatus("mkdir", d);
  }
  // The upper layer's root must look like the lower's (mode 0755) so the sandbox sees a
  // normal "/"; it stays inside the 0700 bundle.
  if (chmod(upper.c_str(), 0755) != 0) return ErrnoStatus("chmod", upper);
  std::string options =
      absl::StrCat("lowerdir=", lower, ",upperdir=", upper, ",workdir=", work);
  if (mount("overlay", merged.c_str(), "overlay", MS_NOSUID | MS_NODEV, options.c_str()) != 0)
    return ErrnoStatus("mount overlay", merged);
  return merged;
}

absl::Status RemoveRootfsOverlay(const std::string& bundle_dir) {
  std::string merged = bundle_dir + "/rootfs";
  // Unmount only what is mounted (the overlay has its own device number), so cleanup after a
  // mount that never happened needs no privilege.
  struct stat merged_st, bundle_st;
  if (lstat(merged.c_str(), &merged_st) == 0 && stat(bundle_dir.c_str(), &bundle_st) == 0 &&
      merged_st.st_dev != bundle_st.st_dev &&
      umount2(merged.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0)
    return ErrnoStatus("umount", merged);
  if (rmdir(merged.c_str()) != 0 && errno != ENOENT) return ErrnoStatus("rmdir", merged);
  RETURN_IF_ERROR(RemoveTree(bundle_dir + "/upper"));
  // overlayfs leaves work/work with mode 000; root removes it regardless.
  return RemoveTree(bundle_dir + "/work");
}

}  // namespace paseo
