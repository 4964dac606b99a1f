// See capabilities.h.
#include "privhelper/capabilities.h"

#include <linux/capability.h>
#include <grp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/keyctl.h>

#include <algorithm>

#include "common/status.h"

namespace paseo {

const std::vector<KeptCapability>& ServingCapabilities() {
  static const std::vector<KeptCapability> kList = {
      {CAP_SYS_ADMIN, "cap_sys_admin",
       "bind-mounting staged workspaces and the rootfs overlay; runsc's namespaces and mounts"},
      {CAP_DAC_OVERRIDE, "cap_dac_override",
       "mounting each sandbox's rootfs overlay; runsc creating its cgroups and serving workspaces"},
      {CAP_SETUID, "cap_setuid", "runsc create/exec switching to the sandbox's users"},
      {CAP_SETGID, "cap_setgid", "runsc create/exec switching to the sandbox's groups"},
      {CAP_SYS_CHROOT, "cap_sys_chroot",
       "runsc's gofer and sandbox pivoting into the rootfs; setns(2) into the host's mount "
       "namespace (a restarted broker's, and unpinning the control netns at shutdown)"},
      {CAP_SETPCAP, "cap_setpcap", "restarting a crashed broker with an empty bounding set"},
      {CAP_CHOWN, "cap_chown",
       "runsc's gofer giving files an agent creates in a workspace the agent's uid:gid"},
      {CAP_NET_ADMIN, "cap_net_admin",
       "network mode \"sandbox\": veth links, addresses, routes and the nftables firewall"},
      {CAP_NET_RAW, "cap_net_raw",
       "network mode \"sandbox\": runsc start opening the packet socket on the sandbox's eth0"},
      {CAP_NET_BIND_SERVICE, "cap_net_bind_service",
       "network mode \"sandbox\": the supervisor's resolver on port 53 of each link's host end"},
  };
  return kList;
}

absl::Status KeepOnlyCapabilities(const std::vector<cap_value_t>& keep) {
  auto kept = [&](int c) { return std::find(keep.begin(), keep.end(), c) != keep.end(); };
  for (int c = 0; c <= 63; ++c) {
    if (kept(c)) continue;
    if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) != 0 && errno != EINVAL)
      return ErrnoStatus("PR_CAPBSET_DROP", std::to_string(c));
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0)
    return ErrnoStatus("PR_CAP_AMBIENT_CLEAR_ALL", "");
  cap_t caps = cap_init();
  if (caps == nullptr) return ErrnoStatus("cap_init", "");
  if (!keep.empty() &&
      (cap_set_flag(caps, CAP_PERMITTED, static_cast<int>(keep.size()), keep.data(), CAP_SET) != 0 ||
       cap_set_flag(caps, CAP_EFFECTIVE, static_cast<int>(keep.size()), keep.data(), CAP_SET) != 0)) {
    cap_free(caps);
    return ErrnoStatus("cap_set_flag", "");
  }
  int rc = cap_set_proc(caps);
  cap_free(caps);
  if (rc != 0) return ErrnoStatus("cap_set_proc", "");
  return absl::OkStatus();
}

int BecomeUnprivileged(uid_t uid, gid_t gid) {
  // A fresh anonymous session keyring: possessing the privhelper's would grant its keys.
  if (syscall(SYS_keyctl, KEYCTL_JOIN_SESSION_KEYRING, nullptr) < 0) return errno;
  if (chdir("/") != 0) return errno;
  for (int cap = 0; cap <= 63; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) return errno;
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) return errno;
  if (setgroups(1, &gid) != 0) return errno;
  if (setresgid(gid, gid, gid) != 0) return errno;
  if (setresuid(uid, uid, uid) != 0) return errno;
  cap_t empty = cap_init();
  if (empty == nullptr) return ENOMEM;
  int rc = cap_set_proc(empty);
  cap_free(empty);
  if (rc != 0) return errno;
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
  return 0;
}

}  // namespace paseo
