// See secret_file.h.
#include "privhelper/secret_file.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "privhelper/workspace_resolver.h"

namespace paseo {
namespace {

absl::Status Refused(const std::string& path, absl::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat("secret file ", path, ": ", why));
}

}  // namespace

absl::StatusOr<std::string> ReadSecretFile(const std::string& path, uid_t owner) {
  constexpr uint64_t kResolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  size_t slash = path.rfind('/');
  if (path.empty() || path[0] != '/' || slash == std::string::npos || slash + 1 == path.size())
    return Refused(path, "not an absolute file path");
  std::string parent = slash == 0 ? "/" : path.substr(0, slash);
  // Every directory above it: root's (or `owner`'s), writable by no one else unless sticky, so
  // no other user can rename a directory on the way and put another in its place.
  for (size_t at = 0; at < slash; at = path.find('/', at + 1)) {
    std::string above = at == 0 ? "/" : path.substr(0, at);
    struct stat up;
    int fd = Openat2(AT_FDCWD, above.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC, kResolve);
    bool ok = fd >= 0 && fstat(fd, &up) == 0 && (up.st_uid == 0 || up.st_uid == owner) &&
              ((up.st_mode & 022) == 0 || (up.st_mode & S_ISVTX) != 0);
    if (fd >= 0) close(fd);
    if (!ok)
      return Refused(path, absl::StrCat(above, " must be root's and writable by no one else (or sticky)"));
  }
  int dir = Openat2(AT_FDCWD, parent.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC, kResolve);
  if (dir < 0)
    return Refused(path, absl::StrCat("its directory cannot be opened without following a symlink (",
                                      strerror(errno), ")"));
  absl::Cleanup close_dir = [dir] { close(dir); };
  struct stat st;
  if (fstat(dir, &st) != 0 || st.st_uid != owner || (st.st_mode & 022) != 0)
    return Refused(path, absl::StrCat("its directory must be owned by uid ", owner, " and writable by no one else"));
  int fd = Openat2(dir, path.c_str() + slash + 1, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC,
                   kResolve | RESOLVE_BENEATH);
  if (fd < 0) return Refused(path, absl::StrCat("cannot be opened (", strerror(errno), ")"));
  absl::Cleanup close_fd = [fd] { close(fd); };
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return Refused(path, "not a regular file");
  if (st.st_uid != owner || (st.st_mode & 077) != 0)
    return Refused(path, absl::StrCat("must be owned by uid ", owner, " with no group or other permission (0600 or 0400)"));
  if (st.st_nlink != 1) return Refused(path, "must have exactly one link");
  if (st.st_size <= 0 || static_cast<size_t>(st.st_size) > kMaxSecretBytes + 2)
    return Refused(path, absl::StrCat("must hold 1 to ", kMaxSecretBytes, " bytes"));
  std::string value(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < value.size()) {
    ssize_t n = read(fd, value.data() + got, value.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  value.resize(got);
  if (!value.empty() && value.back() == '\n') value.pop_back();
  if (!value.empty() && value.back() == '\r') value.pop_back();
  bool printable = !value.empty() && value.size() <= kMaxSecretBytes;
  for (char c : value) printable &= c >= 0x20 && c <= 0x7e;
  if (!printable) {
    explicit_bzero(value.data(), value.size());
    return Refused(path, absl::StrCat("must be one line of printable ASCII, 1 to ", kMaxSecretBytes,
                                      " bytes"));
  }
  return value;
}

std::string NewPlaceholder(const std::string& name) {
  char random[16];
  size_t got = 0;
  while (got < sizeof(random)) {
    ssize_t n = getrandom(random + got, sizeof(random) - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  return absl::StrCat("paseo-secret-", name, "-", absl::BytesToHexString(absl::string_view(random, sizeof(random))));
}

}  // namespace paseo
