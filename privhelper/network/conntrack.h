// The kernel's connection tracking of the calling thread's network namespace, through
// ctnetlink (libnetfilter_conntrack; never a `conntrack` subprocess). A removed sandbox's
// entries are deleted so a later sandbox given the same /30 cannot continue its flows (the
// firewall accepts established ones without looking at the policy again).
//
//   InNetns(host_ns_fd, [&] { return FlushConntrack(InCidr(block)).status(); });
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/status/statusor.h"
#include "privhelper/network/sandbox_network.h"

namespace paseo::network {

// Whether an address (host byte order) is one of a flow's.
using AddressMatch = std::function<bool(uint32_t addr)>;

// Every address of `cidr`.
AddressMatch InCidr(const Cidr& cidr);

// Deletes every IPv4 entry with a matching address on either side of it (original source or
// destination, reply source or destination); returns how many went. Entries that vanish
// meanwhile are not an error.
absl::StatusOr<size_t> FlushConntrack(const AddressMatch& match);
// How many IPv4 entries have a matching address (tests, diagnostics).
absl::StatusOr<size_t> CountConntrack(const AddressMatch& match);

}  // namespace paseo::network
