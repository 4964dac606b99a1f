// Every sandbox's network state for mode "sandbox", created after validation and removed on
// delete, failed create and garbage collection: a /30 of the pool (address_pool.h), a pinned
// namespace (netns.h), the veth pair (links.h) and the firewall chains (firewall.h). Host-side
// pieces live in the host's network namespace (the one the privhelper started in), which the
// privhelper itself has left for its control namespace: it keeps an fd of it and works there
// from short-lived threads.
//
//   SandboxNetworks networks(host_ns_fd, run_dir, pool, uplink);
//   RETURN_IF_ERROR(networks.Start());                   // before Reconcile
//   ASSIGN_OR_RETURN(SandboxLink link, networks.Create("sb-1", policy));
//   networks.Remove(link);
#pragma once

#include <sys/types.h>

#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "privhelper/network/address_pool.h"
#include "privhelper/network/conntrack.h"
#include "privhelper/network/firewall.h"
#include "privhelper/network/sandbox_network.h"
#include "schema/config.capnp.h"

namespace paseo::network {

// A profile's CIDR rules as firewall rules (config validation has checked them).
std::vector<CidrAllow> CidrAllowsOf(config::NetworkPolicy::Reader policy);

// True when this kernel shows /proc/sys/net/core/rmem_default in a namespace that is not the
// initial one: Debian's runsc 20221219 takes that file as the sign of the root network
// namespace and refuses --network=sandbox, so `runsc create` must run with a read-only tmpfs
// over /proc/sys/net (runsc.h). Probed once, in a scratch namespace.
absl::StatusOr<bool> ProbeRunscNeedsProcSysNetHidden();

// The first route of `proc_net_route` (the text of /proc/net/route) whose destination overlaps
// `pool`, as "203.0.113.0/24 via eth0"; empty if none. Default routes and the sandbox links'
// own routes (psb-*) do not count: the pool must not shadow a network the host reaches.
std::string RouteOverlappingPool(const std::string& proc_net_route, const Cidr& pool);

class SandboxNetworks {
 public:
  // Takes ownership of `host_ns_fd`.
  SandboxNetworks(int host_ns_fd, std::string run_dir, Cidr pool, std::string uplink);
  ~SandboxNetworks();
  SandboxNetworks(const SandboxNetworks&) = delete;
  SandboxNetworks& operator=(const SandboxNetworks&) = delete;

  // At start, before any sandbox is adopted: <runDir>/netns, net.ipv4.ip_forward=1 in the
  // host's namespace, an empty firewall table, the runsc probe.
  absl::Status Start();
  // At a clean shutdown with no sandbox left: removes the firewall table.
  void Stop();

  // Sets up a new sandbox's network; on failure nothing of it is left.
  absl::StatusOr<SandboxLink> Create(const std::string& sandbox_id,
                                     config::NetworkPolicy::Reader policy);
  // Takes an adopted sandbox's network back: its recorded block, its namespace (re-pinned from
  // its sentry `sentry_pid`), its firewall chains (the table was reset at start). Its link
  // survived the previous privhelper.
  absl::Status Adopt(const SandboxLink& link, pid_t sentry_pid,
                     config::NetworkPolicy::Reader policy);
  // Removes everything of the sandbox's network, its conntrack entries too; what is gone
  // already is skipped, what cannot be removed is logged.
  void Remove(const SandboxLink& link);
  // Removes namespace pins, psb-* links and firewall chains of no sandbox in `owned`, and the
  // conntrack entries of the pool's blocks no sandbox holds (adopted ones are reserved first).
  void CollectUnowned(const std::set<std::string>& owned);

  // The link a sandbox with `block` (the /30's network address) has.
  SandboxLink LinkOf(const std::string& sandbox_id, uint32_t block) const;
  static uint32_t BlockOf(const SandboxLink& link) { return link.host_addr - 1; }

  bool hide_proc_sys_net() const { return hide_proc_sys_net_; }
  // Whether a resolver serves the links' host ends (port 53 there is opened only then, for
  // sandboxes created or adopted afterwards): set once the resolver is up.
  void set_serves_dns(bool serves) { serves_dns_ = serves; }
  // Where the egress proxy listens on each link's host end (decision 58), once it runs: a
  // sandbox created or adopted afterwards with allowNames rules has its name-checked TCP
  // redirected there, and its resolved names open nothing in the firewall. 0: names open
  // their addresses (no proxy).
  void set_egress_port(uint16_t port) { egress_port_ = port; }
  uint16_t egress_port() const { return egress_port_; }
  Firewall& firewall() { return firewall_; }
  int host_ns_fd() const { return host_ns_fd_; }
  std::string NetnsDir() const { return run_dir_ + "/netns"; }

 private:
  // Deletes the host namespace's conntrack entries with a matching address (conntrack.h).
  absl::Status FlushConntrackOf(const AddressMatch& match);

  int host_ns_fd_;
  std::string run_dir_;
  AddressPool pool_;
  Firewall firewall_;
  bool hide_proc_sys_net_ = false;
  bool serves_dns_ = false;
  uint16_t egress_port_ = 0;
  // The firewall's view of a sandbox under `policy`.
  FirewallSandbox FirewallOf(const SandboxLink& link, config::NetworkPolicy::Reader policy) const;
};

}  // namespace paseo::network
