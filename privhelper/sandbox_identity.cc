// See sandbox_identity.h.
#include "privhelper/sandbox_identity.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <unistd.h>

#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status.h"
#include "privhelper/workspace_resolver.h"

namespace paseo {
namespace {

constexpr size_t kMaxFileBytes = 1 << 20;
// Symlinks resolve inside the rootfs, never out of it (Debian's /bin is a link to usr/bin).
constexpr uint64_t kInRoot = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;

// `text` without the entries `drop` matches (by their ':'-separated fields), then `entry`.
template <typename Drop>
std::string ReplaceEntries(absl::string_view text, const std::string& entry, Drop drop) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ':');
    if (fields.size() >= 3 && drop(fields)) continue;
    absl::StrAppend(&out, line, "\n");
  }
  absl::StrAppend(&out, entry, "\n");
  return out;
}

absl::StatusOr<std::string> ReadEtcFile(int etc, const char* name) {
  int fd = openat(etc, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::string();
    return ErrnoStatus("open", absl::StrCat("/etc/", name));
  }
  absl::Cleanup close_fd = [fd] { close(fd); };
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus("fstat", absl::StrCat("/etc/", name));
  if (!S_ISREG(st.st_mode) || static_cast<size_t>(st.st_size) > kMaxFileBytes)
    return absl::FailedPreconditionError(
        absl::StrCat("the rootfs's /etc/", name, " is not a regular file of at most 1 MiB"));
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return ErrnoStatus("read", absl::StrCat("/etc/", name));
    got += static_cast<size_t>(n);
  }
  return text;
}

// Written beside and renamed over, so the file is never seen half-written.
absl::Status ReplaceEtcFile(int etc, const char* name, const std::string& text) {
  std::string temp = absl::StrCat(".", name, ".paseo-sandbox");
  unlinkat(etc, temp.c_str(), 0);
  int fd = openat(etc, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("create", absl::StrCat("/etc/", temp));
  bool ok = fchmod(fd, 0644) == 0 &&
            write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  int err = errno;
  close(fd);
  if (!ok || renameat(etc, temp.c_str(), etc, name) != 0) {
    if (ok) err = errno;
    unlinkat(etc, temp.c_str(), 0);
    return ErrnoStatus("write", absl::StrCat("/etc/", name), err);
  }
  return absl::OkStatus();
}

}  // namespace

std::string PasswdWithAgent(absl::string_view passwd, const AgentIdentity& who) {
  std::string uid = absl::StrCat(who.uid);
  return ReplaceEntries(
      passwd,
      absl::StrCat(kAgentName, ":x:", who.uid, ":", who.gid, ":", kAgentName, ":", who.home, ":",
                   who.shell),
      [&](const std::vector<absl::string_view>& f) { return f[0] == kAgentName || f[2] == uid; });
}

std::string GroupWithAgent(absl::string_view group, gid_t gid) {
  std::string id = absl::StrCat(gid);
  return ReplaceEntries(
      group, absl::StrCat(kAgentName, ":x:", gid, ":"),
      [&](const std::vector<absl::string_view>& f) { return f[0] == kAgentName || f[2] == id; });
}

// The sandbox's root and its etc/ (resolved beneath the root, following no symlink); `etc` is
// -1 when the rootfs has none. Both closed with the struct.
struct RootAndEtc {
  int root = -1;
  int etc = -1;
  ~RootAndEtc() {
    if (etc >= 0) close(etc);
    if (root >= 0) close(root);
  }
};

absl::Status OpenRootAndEtc(const std::string& root, RootAndEtc& out) {
  out.root = open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (out.root < 0) return ErrnoStatus("open", root);
  out.etc = Openat2(out.root, "etc", O_RDONLY | O_DIRECTORY | O_CLOEXEC, kInRoot);
  if (out.etc < 0 && errno != ENOENT) return ErrnoStatus("open", root + "/etc");
  return absl::OkStatus();
}

absl::Status WriteSandboxIdentity(const std::string& root, AgentIdentity who) {
  RootAndEtc dirs;
  RETURN_IF_ERROR(OpenRootAndEtc(root, dirs));
  if (dirs.etc < 0) return absl::OkStatus();
  int bash = Openat2(dirs.root, "bin/bash", O_PATH | O_CLOEXEC, kInRoot);
  if (bash >= 0) {
    who.shell = "/bin/bash";
    close(bash);
  }
  ASSIGN_OR_RETURN(std::string passwd, ReadEtcFile(dirs.etc, "passwd"));
  ASSIGN_OR_RETURN(std::string group, ReadEtcFile(dirs.etc, "group"));
  RETURN_IF_ERROR(ReplaceEtcFile(dirs.etc, "passwd", PasswdWithAgent(passwd, who)));
  return ReplaceEtcFile(dirs.etc, "group", GroupWithAgent(group, who.gid));
}

std::string ResolvConfFor(const std::string& nameserver) {
  // ndots:1 and no search list: a bare name is never tried against a host's domain.
  return absl::StrCat("# Written by paseo-sandbox: the supervisor's resolver on this sandbox's link.\n",
                      "nameserver ", nameserver, "\n", "options ndots:1\n");
}

absl::Status WriteSandboxResolvConf(const std::string& root, const std::string& nameserver) {
  RootAndEtc dirs;
  RETURN_IF_ERROR(OpenRootAndEtc(root, dirs));
  if (dirs.etc < 0) return absl::OkStatus();
  // Renamed over whatever is there (a symlink too: the link itself is replaced, in the overlay).
  return ReplaceEtcFile(dirs.etc, "resolv.conf", ResolvConfFor(nameserver));
}

absl::StatusOr<std::string> TrustBundleText(const std::string& root, const std::string& ca_pem) {
  RootAndEtc dirs;
  RETURN_IF_ERROR(OpenRootAndEtc(root, dirs));
  std::string bundle;
  int certs = dirs.etc < 0 ? -1
                           : Openat2(dirs.root, "etc/ssl/certs", O_RDONLY | O_DIRECTORY | O_CLOEXEC, kInRoot);
  if (certs >= 0) {
    absl::Cleanup close_certs = [certs] { close(certs); };
    ASSIGN_OR_RETURN(bundle, ReadEtcFile(certs, "ca-certificates.crt"));
  } else if (dirs.etc >= 0 && errno != ENOENT) {
    return ErrnoStatus("open", "/etc/ssl/certs");
  }
  if (!bundle.empty() && bundle.back() != '\n') bundle.push_back('\n');
  return absl::StrCat(bundle, "# paseo-sandbox egress CA\n", ca_pem);
}

}  // namespace paseo
