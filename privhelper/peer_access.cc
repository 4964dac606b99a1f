// See peer_access.h.
#include "privhelper/peer_access.h"

#include <errno.h>
#include <sys/stat.h>
#include <sys/xattr.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status.h"

namespace paseo {
namespace {

// include/uapi/linux/posix_acl.h and posix_acl_xattr.h (no libacl: the format is kernel ABI).
constexpr uint32_t kAclXattrVersion = 2;
constexpr uint16_t kAclUserObj = 0x01;
constexpr uint16_t kAclUser = 0x02;
constexpr uint16_t kAclGroupObj = 0x04;
constexpr uint16_t kAclGroup = 0x08;
constexpr uint16_t kAclMask = 0x10;
constexpr uint16_t kAclOther = 0x20;

uint32_t Le32(const unsigned char* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
         static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24;
}
uint16_t Le16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | p[1] << 8); }

bool Grants(unsigned perm, int want) {
  return (perm & static_cast<unsigned>(want)) == static_cast<unsigned>(want);
}

}  // namespace

bool PeerIdentity::InGroup(gid_t gid) const {
  return std::find(gids.begin(), gids.end(), gid) != gids.end();
}

std::string PeerIdentity::Describe() const {
  if (gids.empty()) return absl::StrCat("uid ", uid, " (no gids)");
  return absl::StrCat("uid ", uid, " (gids ", absl::StrJoin(gids, ", "), ")");
}

absl::StatusOr<PosixAcl> ParsePosixAcl(absl::string_view xattr) {
  auto bad = [](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("unreadable POSIX ACL: ", why));
  };
  const auto* p = reinterpret_cast<const unsigned char*>(xattr.data());
  if (xattr.size() < 4 || (xattr.size() - 4) % 8 != 0) return bad("bad size");
  if (Le32(p) != kAclXattrVersion) return bad("unknown version");
  PosixAcl acl;
  int user_obj = 0, group_obj = 0, other = 0, mask = 0, named = 0;
  for (size_t off = 4; off < xattr.size(); off += 8) {
    AclEntry e{Le16(p + off), Le16(p + off + 2), Le32(p + off + 4)};
    if (e.perm & ~7u) return bad("unknown permission bits");
    switch (e.tag) {
      case kAclUserObj:
        ++user_obj;
        break;
      case kAclGroupObj:
        ++group_obj;
        break;
      case kAclOther:
        ++other;
        break;
      case kAclMask:
        ++mask;
        break;
      case kAclUser:
      case kAclGroup:
        ++named;
        break;
      default:
        return bad("unknown entry tag");
    }
    acl.push_back(e);
  }
  // What the kernel's posix_acl_valid() insists on.
  if (user_obj != 1 || group_obj != 1 || other != 1 || mask > 1 || (named > 0 && mask != 1))
    return bad("missing or repeated entries");
  return acl;
}

bool Permits(uid_t owner, gid_t group, mode_t mode, const PosixAcl* acl, const PeerIdentity& peer,
             int want) {
  // The owner class is exclusive: an owner denied by the owner bits is denied, whatever the
  // group or other bits say (fs/namei.c acl_permission_check).
  if (peer.uid == owner) return Grants((mode >> 6) & 7, want);
  // The kernel consults the ACL only when the group bits (the ACL's mask) are not 0.
  if (acl != nullptr && (mode & S_IRWXG) != 0) {
    unsigned mask = 7;
    for (const AclEntry& e : *acl) {
      if (e.tag == kAclMask) mask = e.perm;
    }
    for (const AclEntry& e : *acl) {
      if (e.tag == kAclUser && e.id == peer.uid) return Grants(e.perm & mask, want);
    }
    // fs/posix_acl.c posix_acl_permission: the first matching group entry that grants all of
    // `want` decides (through the mask, the same for all); matching entries that do not grant
    // it deny; with no matching group entry, the other entry decides.
    bool found = false;
    for (const AclEntry& e : *acl) {
      bool matches = (e.tag == kAclGroupObj && peer.InGroup(group)) ||
                     (e.tag == kAclGroup && peer.InGroup(e.id));
      if (!matches) continue;
      found = true;
      if (Grants(e.perm, want)) return Grants(e.perm & mask, want);
    }
    if (found) return false;
    for (const AclEntry& e : *acl) {
      if (e.tag == kAclOther) return Grants(e.perm, want);
    }
    return false;
  }
  if (peer.InGroup(group)) return Grants((mode >> 3) & 7, want);
  return Grants(mode & 7, want);
}

absl::StatusOr<bool> PeerMayAccess(int fd, const PeerIdentity& peer, int want) {
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoStatus("fstat", "a workspace directory");
  // fgetxattr refuses O_PATH fds; the path through /proc/self/fd names the same inode.
  std::string proc = absl::StrCat("/proc/self/fd/", fd);
  std::string value(256, '\0');
  for (;;) {
    ssize_t n = getxattr(proc.c_str(), "system.posix_acl_access", value.data(), value.size());
    if (n >= 0) {
      value.resize(static_cast<size_t>(n));
      break;
    }
    if (errno == ENODATA || errno == EOPNOTSUPP)
      return Permits(st.st_uid, st.st_gid, st.st_mode, nullptr, peer, want);
    if (errno != ERANGE || value.size() >= 65536)
      return ErrnoStatus("getxattr system.posix_acl_access", proc);
    value.resize(value.size() * 4);
  }
  ASSIGN_OR_RETURN(PosixAcl acl, ParsePosixAcl(value));
  return Permits(st.st_uid, st.st_gid, st.st_mode, &acl, peer, want);
}

}  // namespace paseo
