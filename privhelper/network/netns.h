// Network namespaces by file: a sandbox's namespace is pinned by a bind mount of its nsfs file
// on <runDir>/netns/<sandbox-id>, so it outlives the thread that made it and runsc can join it
// through the OCI spec's path. Work inside a namespace runs on a short-lived thread that
// setns(2)es into it (never `ip netns exec`, which remounts /sys and hides the cgroups runsc
// needs); the privhelper's own thread never leaves its control namespace.
//
//   RETURN_IF_ERROR(CreateNetns("/run/paseo-sandbox/netns/sb-1"));
//   RETURN_IF_ERROR(InNetnsFile(pin, [] { return BringUpLoopback(); }));
//   RemoveNetns(pin);
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/status.h"

namespace paseo::network {

// Runs `work` on a new thread that first joins the network namespace `ns_fd` (an open nsfs
// file), and returns its status. The calling thread's namespaces are untouched.
absl::Status InNetns(int ns_fd, const std::function<absl::Status()>& work);
// The same for a pinned namespace file.
absl::Status InNetnsFile(const std::string& pin, const std::function<absl::Status()>& work);

// Makes a new, empty network namespace and pins it at `pin` (which must not exist). On failure
// nothing is left.
absl::Status CreateNetns(const std::string& pin);
// Pins the network namespace of process `pid` at `pin` (an adopted sandbox's, whose pin was a
// mount in a previous privhelper's mount namespace). A pin that already is a netns is kept.
absl::Status PinNetnsOf(pid_t pid, const std::string& pin);
// Unpins and removes `pin`; a pin that is gone already is not an error.
absl::Status RemoveNetns(const std::string& pin);
// True if `path` is (a mount of) a network namespace file.
bool IsNetns(const std::string& path);

// Writes `value` to a sysctl under /proc/sys of the calling thread's network namespace
// ("net/ipv4/ip_forward").
absl::Status WriteNetSysctl(const std::string& name, const std::string& value);

}  // namespace paseo::network
