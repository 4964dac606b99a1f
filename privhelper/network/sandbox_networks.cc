// See sandbox_networks.h.
#include "privhelper/network/sandbox_networks.h"

#include <cstdlib>

#include <arpa/inet.h>

#include <sstream>

#include <fstream>

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <thread>

#include <kj/debug.h>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/dir_entries.h"
#include "common/ids.h"
#include "common/status.h"
#include "privhelper/network/conntrack.h"
#include "privhelper/network/links.h"
#include "privhelper/network/netns.h"

namespace paseo::network {

std::vector<CidrAllow> CidrAllowsOf(config::NetworkPolicy::Reader policy) {
  std::vector<CidrAllow> out;
  for (auto rule : policy.getAllowCidrs()) {
    auto cidr = ParseCidr(rule.getCidr().cStr());
    if (!cidr) continue;  // refused by config validation
    CidrAllow allow{*cidr, {}};
    for (uint16_t p : rule.getPorts()) allow.ports.push_back(p);
    out.push_back(std::move(allow));
  }
  return out;
}

absl::StatusOr<bool> ProbeRunscNeedsProcSysNetHidden() {
  absl::StatusOr<bool> visible = absl::InternalError("probe did not run");
  std::thread t([&] {
    if (unshare(CLONE_NEWNET) != 0) {
      visible = ErrnoStatus("unshare", "CLONE_NEWNET");
      return;
    }
    visible = access("/proc/sys/net/core/rmem_default", F_OK) == 0;
  });
  t.join();
  return visible;
}

SandboxNetworks::SandboxNetworks(int host_ns_fd, std::string run_dir, Cidr pool,
                                 std::string uplink)
    : host_ns_fd_(host_ns_fd),
      run_dir_(std::move(run_dir)),
      pool_(pool),
      firewall_(host_ns_fd, pool, std::move(uplink)) {}

SandboxNetworks::~SandboxNetworks() { close(host_ns_fd_); }

std::string RouteOverlappingPool(const std::string& proc_net_route, const Cidr& pool) {
  std::istringstream lines(proc_net_route);
  std::string line;
  std::getline(lines, line);  // the header
  while (std::getline(lines, line)) {
    std::istringstream fields(line);
    std::string iface, dest, gateway, flags, refcnt, use, metric, mask;
    if (!(fields >> iface >> dest >> gateway >> flags >> refcnt >> use >> metric >> mask)) continue;
    if (absl::StartsWith(iface, kHostIfnamePrefix)) continue;
    // The kernel prints the network-order words as native hex.
    uint32_t d = ntohl(static_cast<uint32_t>(std::strtoul(dest.c_str(), nullptr, 16)));
    uint32_t m = ntohl(static_cast<uint32_t>(std::strtoul(mask.c_str(), nullptr, 16)));
    if (m == 0) continue;  // a default route
    int prefix = __builtin_popcount(m);
    Cidr route{d & m, prefix};
    if (route.Overlaps(pool)) return absl::StrCat(route.ToString(), " via ", iface);
  }
  return "";
}

absl::Status SandboxNetworks::Start() {
  std::string dir = NetnsDir();
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", dir);
  std::string routes;
  RETURN_IF_ERROR(InNetns(host_ns_fd_, [&routes] {
    std::ifstream in("/proc/thread-self/net/route");
    std::stringstream text;
    text << in.rdbuf();
    routes = text.str();
    return in ? absl::OkStatus() : absl::InternalError("cannot read /proc/thread-self/net/route");
  }));
  std::string overlap = RouteOverlappingPool(routes, pool_.cidr());
  if (!overlap.empty())
    return absl::FailedPreconditionError(
        absl::StrCat("network.pool ", pool_.cidr().ToString(), " overlaps the host's route ",
                     overlap, "; choose another pool"));
  RETURN_IF_ERROR(
      InNetns(host_ns_fd_, [] { return WriteNetSysctl("net/ipv4/ip_forward", "1"); }));
  ASSIGN_OR_RETURN(hide_proc_sys_net_, ProbeRunscNeedsProcSysNetHidden());
  return firewall_.Reset();
}

void SandboxNetworks::Stop() {
  absl::Status st = firewall_.RemoveTable();
  if (!st.ok()) KJ_LOG(ERROR, "cannot remove the sandbox firewall table", st.ToString());
}

SandboxLink SandboxNetworks::LinkOf(const std::string& sandbox_id, uint32_t block) const {
  SandboxLink link;
  link.sandbox_id = sandbox_id;
  link.netns_path = absl::StrCat(NetnsDir(), "/", sandbox_id);
  link.host_ifname = HostIfname(sandbox_id);
  link.host_addr = AddressPool::HostEnd(block);
  link.sandbox_addr = AddressPool::SandboxAddress(block);
  return link;
}

absl::StatusOr<SandboxLink> SandboxNetworks::Create(const std::string& sandbox_id,
                                                    config::NetworkPolicy::Reader policy) {
  ASSIGN_OR_RETURN(uint32_t block, pool_.Allocate());
  absl::Cleanup free_block = [this, block] { pool_.Free(block); };
  SandboxLink link = LinkOf(sandbox_id, block);
  RETURN_IF_ERROR(CreateNetns(link.netns_path));
  absl::Cleanup unpin = [&link] { (void)RemoveNetns(link.netns_path); };
  RETURN_IF_ERROR(CreateLink(host_ns_fd_, link));
  absl::Cleanup unlink = [this, &link] { (void)DeleteLink(host_ns_fd_, link.host_ifname); };
  RETURN_IF_ERROR(firewall_.AddSandbox(FirewallOf(link, policy)));
  std::move(unlink).Cancel();
  std::move(unpin).Cancel();
  std::move(free_block).Cancel();
  return link;
}

absl::Status SandboxNetworks::Adopt(const SandboxLink& link, pid_t sentry_pid,
                                    config::NetworkPolicy::Reader policy) {
  RETURN_IF_ERROR(pool_.Reserve(BlockOf(link)));
  if (sentry_pid > 0) RETURN_IF_ERROR(PinNetnsOf(sentry_pid, link.netns_path));
  return firewall_.AddSandbox(FirewallOf(link, policy));
}

FirewallSandbox SandboxNetworks::FirewallOf(const SandboxLink& link,
                                            config::NetworkPolicy::Reader policy) const {
  FirewallSandbox fw;
  fw.sandbox_id = link.sandbox_id;
  fw.host_ifname = link.host_ifname;
  fw.host_addr = link.host_addr;
  fw.sandbox_addr = link.sandbox_addr;
  fw.dns = serves_dns_;
  fw.allow = CidrAllowsOf(policy);
  if (egress_port_ != 0 && policy.getAllowNames().size() > 0) {
    std::vector<std::vector<uint16_t>> rule_ports;
    for (auto rule : policy.getAllowNames()) {
      std::vector<uint16_t> ports;
      for (uint16_t p : rule.getPorts()) ports.push_back(p);
      rule_ports.push_back(std::move(ports));
    }
    fw.egress_port = egress_port_;
    EgressPortsOf(rule_ports, &fw.egress_ports, &fw.egress_all_ports);
  }
  return fw;
}

void SandboxNetworks::Remove(const SandboxLink& link) {
  // The firewall first: from here the sandbox passes nothing, whatever is left. Its conntrack
  // entries after the link: a sandbox later given this block must not continue its flows.
  Cidr block{BlockOf(link), AddressPool::kBlockPrefix};
  for (absl::Status st : {firewall_.RemoveSandbox(SandboxTag(link.sandbox_id)),
                          DeleteLink(host_ns_fd_, link.host_ifname),
                          RemoveNetns(link.netns_path), FlushConntrackOf(InCidr(block))}) {
    if (!st.ok()) KJ_LOG(ERROR, "removing a sandbox's network", link.sandbox_id, st.ToString());
  }
  pool_.Free(BlockOf(link));
}

absl::Status SandboxNetworks::FlushConntrackOf(const AddressMatch& match) {
  return InNetns(host_ns_fd_, [&match] { return FlushConntrack(match).status(); });
}

void SandboxNetworks::CollectUnowned(const std::set<std::string>& owned) {
  std::set<std::string> tags;
  for (const auto& id : owned) tags.insert(SandboxTag(id));
  for (const auto& name : DirEntries(NetnsDir())) {
    if (owned.count(name)) continue;
    KJ_LOG(WARNING, "removing a stale network namespace pin", name);
    (void)RemoveNetns(absl::StrCat(NetnsDir(), "/", name));
  }
  auto links = ListLinks(host_ns_fd_, kHostIfnamePrefix);
  if (links.ok()) {
    for (const auto& name : *links) {
      if (tags.count(name.substr(sizeof(kHostIfnamePrefix) - 1))) continue;
      KJ_LOG(WARNING, "removing a stale sandbox link", name);
      (void)DeleteLink(host_ns_fd_, name);
    }
  }
  auto chains = firewall_.SandboxTags();
  if (chains.ok()) {
    for (const auto& tag : *chains) {
      if (tags.count(tag)) continue;
      KJ_LOG(WARNING, "removing a stale sandbox firewall chain", tag);
      (void)firewall_.RemoveSandbox(tag);
    }
  }
  // Conntrack entries of every block no sandbox holds (owned ones have reserved theirs): what
  // a crash between removing a sandbox and flushing them left.
  Cidr pool = pool_.cidr();
  absl::Status flushed = FlushConntrackOf([this, pool](uint32_t addr) {
    return pool.Contains(addr) && !pool_.Taken(addr & Cidr{0, AddressPool::kBlockPrefix}.Mask());
  });
  if (!flushed.ok()) KJ_LOG(ERROR, "cannot flush stale sandbox conntrack entries", flushed.ToString());
}

}  // namespace paseo::network
