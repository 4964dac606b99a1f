// See authorization.h.
#include "broker/authorization.h"

#include <sys/socket.h>

#include <algorithm>

namespace paseo {

bool ReadPeer(int fd, Peer* peer) {
  ucred cred = {};
  socklen_t len = sizeof(cred);
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || len != sizeof(cred))
    return false;
  peer->uid = cred.uid;
  peer->gids = {cred.gid};
  peer->pid = cred.pid;
  std::vector<gid_t> groups(256);
  socklen_t glen = static_cast<socklen_t>(groups.size() * sizeof(gid_t));
  if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups.data(), &glen) == 0) {
    groups.resize(glen / sizeof(gid_t));
    for (gid_t g : groups) {
      if (std::find(peer->gids.begin(), peer->gids.end(), g) == peer->gids.end())
        peer->gids.push_back(g);
    }
  }
  return true;
}

bool MayUse(const Peer& peer, helper::DeploymentPolicy::Reader deployment) {
  for (uint32_t uid : deployment.getAllowedUids()) {
    if (uid == peer.uid) return true;
  }
  for (uint32_t gid : deployment.getAllowedGids()) {
    if (std::find(peer.gids.begin(), peer.gids.end(), gid) != peer.gids.end()) return true;
  }
  return false;
}

}  // namespace paseo
