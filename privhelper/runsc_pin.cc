// Opening and hashing the pinned runsc (and the other root-owned executables the privhelper
// runs), shared by the privhelper and `paseo-sandbox-admin doctor`.
#include "privhelper/runsc_pin.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/str_cat.h"
#include "common/status.h"

namespace paseo {

absl::StatusOr<std::string> Sha256OfFd(int fd, const std::string& what) {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr);
  char buf[1 << 16];
  off_t off = 0;
  ssize_t n;
  while ((n = pread(fd, buf, sizeof(buf), off)) > 0) {
    EVP_DigestUpdate(ctx, buf, static_cast<size_t>(n));
    off += n;
  }
  int err = errno;
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx, md, &len);
  EVP_MD_CTX_free(ctx);
  if (n < 0) return ErrnoStatus("read", what, err);
  std::string hex;
  for (unsigned i = 0; i < len; ++i) absl::StrAppend(&hex, absl::Hex(md[i], absl::kZeroPad2));
  return hex;
}

absl::StatusOr<int> OpenRootOwnedExecutable(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", path);
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != 0 || (st.st_mode & 022)) {
    close(fd);
    return absl::FailedPreconditionError(
        path + ": must be a regular file owned by root and not group/other writable");
  }
  return fd;
}

absl::StatusOr<int> OpenPinnedRunsc(const config::RunscPin::Reader& pin) {
  ASSIGN_OR_RETURN(int fd, OpenRootOwnedExecutable(pin.getPath().cStr()));
  auto digest = Sha256OfFd(fd, pin.getPath().cStr());
  if (!digest.ok() || *digest != pin.getSha256().cStr()) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        pin.getPath().cStr(), ": sha256 ", digest.ok() ? *digest : "unreadable",
        " does not match the pinned ", pin.getSha256().cStr()));
  }
  return fd;
}

}  // namespace paseo
