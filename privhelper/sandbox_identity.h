// Each sandbox's /etc/passwd and /etc/group name its run-as uid and gid, with the sandbox's home
// as that user's home. Agents look themselves up (ssh refuses a uid it cannot find, git and
// Python ask getpwuid for a name and a home), and the run-as uid is the deployment's, not one
// the rootfs was built for. The files are written into the sandbox's own overlay before runsc
// starts it: the shared, versioned rootfs is never changed.
//
//   RETURN_IF_ERROR(WriteSandboxIdentity(bundle_dir + "/rootfs", {4242, 4242, "/home/agent"}));
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paseo {

struct AgentIdentity {
  uid_t uid = 0;
  gid_t gid = 0;
  std::string home;  // no ':' or newline (config.cc ValidateHome)
  std::string shell = "/bin/sh";
};

// The user's name in every sandbox.
inline constexpr char kAgentName[] = "agent";

// `passwd` with every entry for `who.uid`, and every entry named "agent", replaced by one
// "agent:x:<uid>:<gid>:agent:<home>:<shell>" at the end. Other lines are kept as they are.
std::string PasswdWithAgent(absl::string_view passwd, const AgentIdentity& who);
// `group` with every entry for `gid`, and every entry named "agent", replaced by
// "agent:x:<gid>:" at the end.
std::string GroupWithAgent(absl::string_view group, gid_t gid);

// Rewrites etc/passwd and etc/group beneath `root` (the sandbox's merged overlay), resolving
// only inside it and following no symlink; the shell is /bin/bash if the rootfs has one, else
// /bin/sh. A rootfs without /etc is left alone; a missing passwd or group file is created.
// Files larger than 1 MiB, or not regular, are refused.
absl::Status WriteSandboxIdentity(const std::string& root, AgentIdentity who);

// Network mode "sandbox": the resolv.conf naming only `nameserver` (the sandbox's host end,
// where the supervisor's resolver answers).
std::string ResolvConfFor(const std::string& nameserver);
// Writes it as etc/resolv.conf beneath `root` (the sandbox's merged overlay), resolving only
// inside it and following no symlink. A rootfs without /etc is left alone.
absl::Status WriteSandboxResolvConf(const std::string& root, const std::string& nameserver);

// Where a sandbox with secrets finds its egress CA (decision 59): NODE_EXTRA_CA_CERTS names it.
inline constexpr char kSandboxEgressCaPath[] = "/etc/ssl/certs/paseo-sandbox-egress-ca.pem";

// Where the sandbox's system bundle is (Debian's ca-certificates).
inline constexpr char kSandboxCaBundlePath[] = "/etc/ssl/certs/ca-certificates.crt";

// Secrets: the system bundle a sandbox with secrets sees, `root`'s own (beneath `root`, the
// sandbox's rootfs, following no symlink; none if it has none) with the sandbox's egress CA
// appended. The privhelper serves it, and the CA alone, from the bundle dir as read-only binds
// over kSandboxCaBundlePath and kSandboxEgressCaPath, rewritten in place when the proxy
// restarts (gVisor revalidates bind mounts; a file of the rootfs it has read once it keeps).
absl::StatusOr<std::string> TrustBundleText(const std::string& root, const std::string& ca_pem);

}  // namespace paseo
