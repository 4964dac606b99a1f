// Whether a client could open a directory itself: the kernel's permission check (owner bits,
// POSIX ACL, group bits, other bits) evaluated for the client's uid and groups instead of the
// privhelper's own credentials, whose CAP_DAC_OVERRIDE would let it through anything. It reads
// owner, mode and ACL through an fd the caller already holds, so the inode decided on is the
// inode then used; no path is looked up again.
//
//   PeerIdentity peer{2101, {2101, 27}};
//   ASSIGN_OR_RETURN(bool may, PeerMayAccess(dir_fd, peer, kMayExec));
//
// What it does not model (a refusal or a grant the kernel would decide otherwise): capabilities
// the client may hold (uid 0 gets no bypass: it is judged by the mode bits like any uid), LSMs
// (SELinux, AppArmor), NFSv4 or other non-POSIX ACLs, server-side checks of network and FUSE
// filesystems, idmapped mounts.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paseo {

// A client as SO_PEERCRED and SO_PEERGROUPS report it (uids and gids as the host sees them).
struct PeerIdentity {
  uid_t uid = static_cast<uid_t>(-1);
  std::vector<gid_t> gids;  // primary first, then supplementary

  bool InGroup(gid_t gid) const;
  // "uid 2101 (gids 2101, 27)", for refusals.
  std::string Describe() const;
};

// The kernel's MAY_EXEC / MAY_WRITE / MAY_READ (search permission, for a directory).
inline constexpr int kMayExec = 1;
inline constexpr int kMayWrite = 2;
inline constexpr int kMayRead = 4;

// One entry of a POSIX access ACL, as the kernel stores it in system.posix_acl_access.
struct AclEntry {
  uint16_t tag = 0;   // ACL_USER_OBJ 0x01, ACL_USER 0x02, ACL_GROUP_OBJ 0x04, ACL_GROUP 0x08,
                      // ACL_MASK 0x10, ACL_OTHER 0x20
  uint16_t perm = 0;  // rwx as 4/2/1
  uint32_t id = 0;    // uid or gid for ACL_USER / ACL_GROUP
};
using PosixAcl = std::vector<AclEntry>;

// Decodes a system.posix_acl_access value (version 2). Anything malformed -- a bad version or
// size, an unknown tag, a missing owner, group or other entry, named entries without a mask --
// is an error, so a directory whose ACL cannot be understood is refused, never judged by its
// mode bits alone.
absl::StatusOr<PosixAcl> ParsePosixAcl(absl::string_view xattr);

// The decision, as the kernel's generic_permission() makes it for an unprivileged process with
// `peer`'s fsuid and groups: the owner gets the owner bits (and only them); else, when an ACL
// is present and the group bits are not 0, a named-user entry, then the owning group and named
// groups (any matching entry granting all of `want`), each limited by the mask, then the ACL's
// other entry; else the group bits if the peer is in the owning group, else the other bits.
// `acl` is null when the inode has none.
bool Permits(uid_t owner, gid_t group, mode_t mode, const PosixAcl* acl, const PeerIdentity& peer,
             int want);

// Reads the owner, mode and access ACL of the inode `fd` refers to (an O_PATH fd is enough:
// the ACL is read through /proc/self/fd/N) and decides with Permits. An error (the ACL cannot
// be read or parsed) must be treated as a refusal.
absl::StatusOr<bool> PeerMayAccess(int fd, const PeerIdentity& peer, int want);

}  // namespace paseo
