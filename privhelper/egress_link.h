// The privhelper's end of the egress proxy (decision 58): starts paseo-sandbox-egress as its own
// user, with no capabilities, in the host's network namespace, on a fresh socketpair carrying
// schema/egress.capnp's Control; restarts it when it ends (1 s, doubling to 30 s); and serves
// each sandbox that has allowNames rules with a listening socket on its link's host end
// (kEgressPort) that the privhelper makes and keeps, so a restarted proxy gets every sandbox back
// and connections made meanwhile wait in the socket's backlog.
//
//   EgressLink egress(events, *io.lowLevelProvider, timer, options);
//   RETURN_IF_ERROR(egress.Start());
//   ASSIGN_OR_RETURN(auto ca, egress.Add("sb-1", link.host_addr, link.sandbox_addr, names, secrets));
//   ca.then([](std::string pem) { /* the sandbox's CA, "" without secrets */ });
//   egress.Remove("sb-1");
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>
#include <kj/timer.h>

#include "absl/status/status.h"
#include "privhelper/network/dns_resolver.h"
#include "schema/egress.capnp.h"

namespace paseo {

// The port on each link's host end that the firewall redirects a sandbox's name-checked TCP to:
// below 1024, so no unprivileged host user can bind it first (CAP_NET_BIND_SERVICE, which the
// privhelper has for port 53).
inline constexpr uint16_t kEgressPort = 1001;

// A secret of one sandbox, as the proxy gets it (decision 59).
struct EgressSecret {
  std::string name;
  std::vector<std::string> hosts;
  std::string header;
  std::string placeholder;
  std::string value;  // wiped when this is destroyed (a failed create's too)
  EgressSecret() = default;
  EgressSecret(EgressSecret&& other) noexcept = default;
  EgressSecret& operator=(EgressSecret&& other) noexcept = default;
  EgressSecret(const EgressSecret&) = delete;
  EgressSecret& operator=(const EgressSecret&) = delete;
  ~EgressSecret();
};

class EgressLink {
 public:
  struct Options {
    int exec_fd = -1;          // the proxy binary, opened root-owned (OpenRootOwnedExecutable)
    std::string path;          // its path, for argv[0] and logs
    uid_t uid = 0;             // its user (helper.json egressUser)
    gid_t gid = 0;
    int host_net_fd = -1;      // the host's network namespace
    int host_mounts_fd = -1;   // the host's mount namespace
    std::vector<std::string> upstreams;  // "a.b.c.d[:port]", the forwarder's
    std::string pool;                    // the sandboxes' pool, never dialled
    uint16_t port = kEgressPort;
    std::string trusted_ca;  // helper.json network.egressTrustedCa ("" for none)
  };

  EgressLink(kj::UnixEventPort& events, kj::LowLevelAsyncIoProvider& io, kj::Timer& timer,
             Options options);
  // Closes the control socket: the proxy ends when it sees that (it runs as another user, and
  // the privhelper keeps no CAP_KILL to signal it).
  ~EgressLink();

  // Starts the proxy; an error if it cannot be started (then names cannot be served).
  absl::Status Start();
  // Serves a sandbox: makes its listener on `host_addr`:port (in the host's namespace) and
  // tells the proxy (now, or when it is back). An error if the socket cannot be made, or if
  // there are secrets and the proxy is not running. The promise: with secrets, the proxy's
  // answer, the certificate of the CA it made for them (a rejection if it refused); without,
  // "" at once.
  absl::StatusOr<kj::Promise<std::string>> Add(const std::string& id, uint32_t host_addr,
                                               uint32_t sandbox_addr,
                                               std::vector<network::AllowedName> names,
                                               std::vector<EgressSecret> secrets = {});
  // Called when a restarted proxy made a new CA for a sandbox with secrets (the old key died
  // with the old proxy).
  void SetOnNewCa(std::function<void(const std::string& id, const std::string& ca_pem)> f) {
    on_new_ca_ = std::move(f);
  }
  // Stops serving it: the proxy is told, and the kept listener is closed.
  void Remove(const std::string& id);

 private:
  struct Served {
    uint32_t sandbox_addr = 0;
    std::vector<network::AllowedName> names;
    std::vector<EgressSecret> secrets;
    kj::AutoCloseFd listener;
  };
  struct Running {
    pid_t pid = -1;
    kj::Own<kj::AsyncCapabilityStream> stream;
    kj::Own<capnp::TwoPartyVatNetwork> network;
    kj::Own<capnp::RpcSystem<capnp::rpc::twoparty::VatId>> rpc;
    egress::rpc::Control::Client control = nullptr;
  };
  struct ErrorHandler : kj::TaskSet::ErrorHandler {
    void taskFailed(kj::Exception&& e) override;
  };

  absl::Status Spawn();
  kj::Promise<void> Supervise(kj::Promise<int> exit);
  kj::Promise<std::string> Send(const std::string& id, const Served& served);

  kj::UnixEventPort& events_;
  kj::LowLevelAsyncIoProvider& io_;
  kj::Timer& timer_;
  Options options_;
  int dev_null_ = -1;
  std::map<std::string, Served> served_;
  kj::Own<Running> running_;
  kj::Duration backoff_ = 1 * kj::SECONDS;
  std::function<void(const std::string&, const std::string&)> on_new_ca_;
  ErrorHandler errors_;
  kj::TaskSet tasks_;  // last: destroyed first
};

}  // namespace paseo
