// A sandbox's link, through libnl-route-3 (netlink; never an `ip` subprocess): a veth pair whose
// host end (SandboxLink.host_ifname, with the host address of the /30) lives in the host's
// network namespace and whose other end is created directly in the sandbox's namespace as eth0,
// with the sandbox's address, loopback up, and a default route via the host end. IPv6 is
// switched off on both ends (sandboxes get none; the firewall drops it as well).
//
//   RETURN_IF_ERROR(CreateLink(host_ns_fd, link));   // link.netns_path already pinned
//   DeleteLink(host_ns_fd, link.host_ifname);         // takes the peer with it
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "privhelper/network/sandbox_network.h"

namespace paseo::network {

// Creates and configures both ends. On failure the pair is deleted again.
absl::Status CreateLink(int host_ns_fd, const SandboxLink& link);
// Deletes the pair by its host end; one that does not exist is not an error.
absl::Status DeleteLink(int host_ns_fd, const std::string& host_ifname);
// The names of the host namespace's links that start with `prefix` ("psb-").
absl::StatusOr<std::vector<std::string>> ListLinks(int host_ns_fd, const std::string& prefix);

// A link's byte counters as the kernel keeps them (its host end's view: rx is what the sandbox
// sent, tx what reached it).
struct LinkCounters {
  uint64_t rx_bytes = 0;
  uint64_t tx_bytes = 0;
};
// The counters of the host namespace's links that start with `prefix`, by name: one netlink
// dump for all of them.
absl::StatusOr<std::map<std::string, LinkCounters>> ReadLinkCounters(int host_ns_fd,
                                                                      const std::string& prefix);

}  // namespace paseo::network
