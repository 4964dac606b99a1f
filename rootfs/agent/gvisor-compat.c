// Preloaded into every dynamically linked program of the agent rootfs (/etc/ld.so.preload): two
// calls gVisor answers unlike Linux, each worked around only when the call fails that way, so
// the same rootfs is right on every runsc (docs/decisions.md, decision 49):
// - statx(2) with AT_NO_AUTOMOUNT: runsc 20221219 refuses the flag (EINVAL, measured), and
//   coreutils 9 passes it on every stat (`ls -l`, `stat`, `cp -a` failed on every path).
//   gVisor has no automount points, so the flag changes nothing there: on EINVAL the call is
//   made again without it. runsc 20240729 takes the flag; nothing is retried there.
// - lgetxattr(2) of a symlink: runsc 20240729 answers EBADF (measured: `ls -l` of any symlink
//   printed "Bad file descriptor" and exited 1, from libselinux asking for security.selinux).
//   A path-based call has no descriptor to be bad, so EBADF is always gVisor's; it becomes
//   EOPNOTSUPP, what runsc 20221219 and Linux answer where symlinks have no such attribute.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/xattr.h>
#include <unistd.h>

int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* buf) {
  long r = syscall(SYS_statx, dirfd, path, flags, mask, buf);
  if (r != 0 && errno == EINVAL && (flags & AT_NO_AUTOMOUNT) != 0)
    r = syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
  return (int)r;
}

ssize_t lgetxattr(const char* path, const char* name, void* value, size_t size) {
  long r = syscall(SYS_lgetxattr, path, name, value, size);
  if (r < 0 && errno == EBADF) errno = EOPNOTSUPP;
  return (ssize_t)r;
}
