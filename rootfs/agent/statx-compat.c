// Preloaded into every dynamically linked program of the agent rootfs (/etc/ld.so.preload).
// runsc 20221219, Debian 12's gVisor, refuses statx(2) with AT_NO_AUTOMOUNT (EINVAL, measured),
// and coreutils 9 passes that flag on every stat: `ls -l`, `stat`, `cp -a` failed on every path.
// gVisor has no automount points, so the flag changes nothing there: clear it and make the call.
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

int statx(int dirfd, const char* path, int flags, unsigned int mask, struct statx* buf) {
  return (int)syscall(SYS_statx, dirfd, path, flags & ~AT_NO_AUTOMOUNT, mask, buf);
}
