// Who may use which deployment: a pure decision on the peer's SO_PEERCRED uid and its gids
// (primary and supplementary, from SO_PEERGROUPS), never on its pid.
#pragma once

#include <sys/types.h>

#include <vector>

#include "schema/helper.capnp.h"

namespace paseo {

struct Peer {
  uid_t uid = static_cast<uid_t>(-1);
  std::vector<gid_t> gids;  // primary first
  pid_t pid = 0;            // at connect time; for the audit log only, never for a decision
};

// Reads SO_PEERCRED and SO_PEERGROUPS of a connected Unix socket. False if unavailable.
bool ReadPeer(int fd, Peer* peer);

bool MayUse(const Peer& peer, helper::DeploymentPolicy::Reader deployment);

}  // namespace paseo
