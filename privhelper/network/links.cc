// See links.h.
#include "privhelper/network/links.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <net/if.h>
#include <netlink/cache.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/link/veth.h>
#include <netlink/route/route.h>
#include <unistd.h>

#include <memory>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status.h"
#include "privhelper/network/netns.h"

namespace paseo::network {
namespace {

struct SockDeleter {
  void operator()(nl_sock* s) const { nl_socket_free(s); }
};
using Sock = std::unique_ptr<nl_sock, SockDeleter>;

absl::Status NlStatus(int err, absl::string_view what) {
  if (err >= 0) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", nl_geterror(err)));
}

// A route netlink socket of the calling thread's network namespace.
absl::StatusOr<Sock> Connect() {
  Sock sock(nl_socket_alloc());
  if (!sock) return absl::ResourceExhaustedError("nl_socket_alloc");
  int err = nl_connect(sock.get(), NETLINK_ROUTE);
  if (err < 0) return NlStatus(err, "netlink connect");
  return sock;
}

nl_addr* Ipv4Addr(uint32_t addr, int prefix) {
  uint32_t be = htonl(addr);
  nl_addr* a = nl_addr_build(AF_INET, &be, sizeof(be));
  if (a != nullptr) nl_addr_set_prefixlen(a, prefix);
  return a;
}

// Sets IFF_UP on the link called `name`; returns its index.
absl::StatusOr<int> BringUp(nl_sock* sock, const std::string& name) {
  rtnl_link* link = nullptr;
  RETURN_IF_ERROR(NlStatus(rtnl_link_get_kernel(sock, 0, name.c_str(), &link), "get " + name));
  absl::Cleanup put_link = [link] { rtnl_link_put(link); };
  rtnl_link* change = rtnl_link_alloc();
  absl::Cleanup put_change = [change] { rtnl_link_put(change); };
  rtnl_link_set_flags(change, IFF_UP);
  RETURN_IF_ERROR(NlStatus(rtnl_link_change(sock, link, change, 0), "up " + name));
  return rtnl_link_get_ifindex(link);
}

absl::Status AddAddress(nl_sock* sock, int ifindex, uint32_t addr, int prefix) {
  rtnl_addr* a = rtnl_addr_alloc();
  absl::Cleanup put = [a] { rtnl_addr_put(a); };
  nl_addr* local = Ipv4Addr(addr, prefix);
  if (local == nullptr) return absl::ResourceExhaustedError("nl_addr_build");
  rtnl_addr_set_ifindex(a, ifindex);
  rtnl_addr_set_family(a, AF_INET);
  int err = rtnl_addr_set_local(a, local);
  nl_addr_put(local);
  RETURN_IF_ERROR(NlStatus(err, "address"));
  return NlStatus(rtnl_addr_add(sock, a, 0), absl::StrCat("add address ", FormatIpv4(addr)));
}

absl::Status AddDefaultRoute(nl_sock* sock, int ifindex, uint32_t gateway) {
  rtnl_route* route = rtnl_route_alloc();
  absl::Cleanup put = [route] { rtnl_route_put(route); };
  rtnl_route_set_family(route, AF_INET);
  nl_addr* dst = Ipv4Addr(0, 0);
  nl_addr* gw = Ipv4Addr(gateway, 32);
  if (dst == nullptr || gw == nullptr) return absl::ResourceExhaustedError("nl_addr_build");
  rtnl_route_set_dst(route, dst);
  nl_addr_put(dst);
  rtnl_nexthop* nh = rtnl_route_nh_alloc();
  rtnl_route_nh_set_ifindex(nh, ifindex);
  rtnl_route_nh_set_gateway(nh, gw);
  nl_addr_put(gw);
  rtnl_route_add_nexthop(route, nh);  // the route owns it now
  return NlStatus(rtnl_route_add(sock, route, NLM_F_CREATE | NLM_F_EXCL), "default route");
}

// The host side: the pair (peer straight into the sandbox's namespace), address, up.
absl::Status CreateHostEnd(const SandboxLink& link, int sandbox_ns_fd) {
  ASSIGN_OR_RETURN(Sock sock, Connect());
  rtnl_link* veth = rtnl_link_veth_alloc();
  if (veth == nullptr) return absl::ResourceExhaustedError("rtnl_link_veth_alloc");
  absl::Cleanup release = [veth] { rtnl_link_veth_release(veth); };
  rtnl_link_set_name(veth, link.host_ifname.c_str());
  rtnl_link* peer = rtnl_link_veth_get_peer(veth);
  rtnl_link_set_name(peer, kSandboxIfname);
  rtnl_link_set_ns_fd(peer, sandbox_ns_fd);
  rtnl_link_put(peer);
  RETURN_IF_ERROR(NlStatus(rtnl_link_add(sock.get(), veth, NLM_F_CREATE | NLM_F_EXCL),
                           "create veth " + link.host_ifname));
  // Before it is up, so it never gets an IPv6 link-local address.
  (void)WriteNetSysctl(absl::StrCat("net/ipv6/conf/", link.host_ifname, "/disable_ipv6"), "1");
  ASSIGN_OR_RETURN(int index, BringUp(sock.get(), link.host_ifname));
  return AddAddress(sock.get(), index, link.host_addr, 30);
}

// Inside the sandbox's namespace: eth0's address, eth0 and lo up, the default route.
absl::Status ConfigureSandboxEnd(const SandboxLink& link) {
  ASSIGN_OR_RETURN(Sock sock, Connect());
  (void)WriteNetSysctl("net/ipv6/conf/all/disable_ipv6", "1");
  (void)WriteNetSysctl("net/ipv6/conf/default/disable_ipv6", "1");
  RETURN_IF_ERROR(BringUp(sock.get(), "lo").status());
  ASSIGN_OR_RETURN(int index, BringUp(sock.get(), kSandboxIfname));
  RETURN_IF_ERROR(AddAddress(sock.get(), index, link.sandbox_addr, 30));
  return AddDefaultRoute(sock.get(), index, link.host_addr);
}

}  // namespace

absl::Status CreateLink(int host_ns_fd, const SandboxLink& link) {
  int sandbox_ns = open(link.netns_path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (sandbox_ns < 0) return ErrnoStatus("open", link.netns_path);
  absl::Cleanup close_ns = [sandbox_ns] { close(sandbox_ns); };
  absl::Status created =
      InNetns(host_ns_fd, [&] { return CreateHostEnd(link, sandbox_ns); });
  if (created.ok()) created = InNetns(sandbox_ns, [&] { return ConfigureSandboxEnd(link); });
  if (!created.ok()) (void)DeleteLink(host_ns_fd, link.host_ifname);
  return created;
}

absl::Status DeleteLink(int host_ns_fd, const std::string& host_ifname) {
  return InNetns(host_ns_fd, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Sock sock, Connect());
    rtnl_link* link = rtnl_link_alloc();
    absl::Cleanup put = [link] { rtnl_link_put(link); };
    rtnl_link_set_name(link, host_ifname.c_str());
    int err = rtnl_link_delete(sock.get(), link);
    if (err == -NLE_NODEV || err == -NLE_OBJ_NOTFOUND) return absl::OkStatus();
    return NlStatus(err, "delete " + host_ifname);
  });
}

absl::StatusOr<std::vector<std::string>> ListLinks(int host_ns_fd, const std::string& prefix) {
  std::vector<std::string> names;
  RETURN_IF_ERROR(InNetns(host_ns_fd, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Sock sock, Connect());
    nl_cache* cache = nullptr;
    RETURN_IF_ERROR(NlStatus(rtnl_link_alloc_cache(sock.get(), AF_UNSPEC, &cache), "links"));
    for (nl_object* o = nl_cache_get_first(cache); o != nullptr; o = nl_cache_get_next(o)) {
      const char* name = rtnl_link_get_name(reinterpret_cast<rtnl_link*>(o));
      if (name != nullptr && absl::StartsWith(name, prefix)) names.emplace_back(name);
    }
    nl_cache_free(cache);
    return absl::OkStatus();
  }));
  return names;
}

absl::StatusOr<std::map<std::string, LinkCounters>> ReadLinkCounters(int host_ns_fd,
                                                                      const std::string& prefix) {
  std::map<std::string, LinkCounters> counters;
  RETURN_IF_ERROR(InNetns(host_ns_fd, [&]() -> absl::Status {
    ASSIGN_OR_RETURN(Sock sock, Connect());
    nl_cache* cache = nullptr;
    RETURN_IF_ERROR(NlStatus(rtnl_link_alloc_cache(sock.get(), AF_UNSPEC, &cache), "links"));
    for (nl_object* o = nl_cache_get_first(cache); o != nullptr; o = nl_cache_get_next(o)) {
      auto* link = reinterpret_cast<rtnl_link*>(o);
      const char* name = rtnl_link_get_name(link);
      if (name == nullptr || !absl::StartsWith(name, prefix)) continue;
      counters[name] = {rtnl_link_get_stat(link, RTNL_LINK_RX_BYTES),
                        rtnl_link_get_stat(link, RTNL_LINK_TX_BYTES)};
    }
    nl_cache_free(cache);
    return absl::OkStatus();
  }));
  return counters;
}

}  // namespace paseo::network
