// A TCP connection made from inside another network namespace (Sandbox.connect): a short-lived
// thread joins the namespace with setns(2), creates the socket there and starts a non-blocking
// connect; the socket keeps its namespace for life, so the thread can end at once and the rest
// of the connect is awaited on the event loop, bounded in time. The privhelper's own threads
// never change namespace (its runsc calls depend on staying in the control netns).
//
//   NetnsPortConnector connector(events, timer);
//   kj::Promise<kj::AutoCloseFd> socket = connector.Connect(link.netns_path, link.sandbox_addr, 8080);
#pragma once

#include <cstdint>
#include <string>

#include <kj/async-unix.h>
#include <kj/io.h>
#include <kj/timer.h>

#include "absl/status/statusor.h"

namespace paseo {

// What SandboxHost::ConnectPort needs; tests of the host logic play it with a fake.
class PortConnector {
 public:
  virtual ~PortConnector() = default;
  // Resolves to a connected TCP socket to `addr` (IPv4, host byte order) : `port`, made in the
  // network namespace whose file is `netns_path`. Rejects with unavailable ("nothing listening
  // on port N") when the connection is refused or not accepted in time; internal when the
  // namespace cannot be joined.
  virtual kj::Promise<kj::AutoCloseFd> Connect(const std::string& netns_path, uint32_t addr,
                                               uint16_t port) = 0;
};

// How long a connect may take before it counts as "nothing listening": a sandbox's own stack
// answers in microseconds; a listener whose backlog is full drops the SYN instead.
inline constexpr kj::Duration kConnectPatience = 3 * kj::SECONDS;

// Opens a TCP socket inside `netns_path` (from a thread that joins it) and starts connecting
// it, non-blocking. The returned socket is connected or connecting; a refusal known at once is
// unavailable. Needs CAP_SYS_ADMIN (setns).
// A non-zero `mark` is set on the socket (SO_MARK, CAP_NET_ADMIN): the firewall lets only
// marked connections from the host into sandbox links (firewall_rules.h kInboundMark).
absl::StatusOr<kj::AutoCloseFd> StartConnectInNetns(const std::string& netns_path, uint32_t addr,
                                                     uint16_t port, uint32_t mark = 0);

class NetnsPortConnector final : public PortConnector {
 public:
  NetnsPortConnector(kj::UnixEventPort& events, kj::Timer& timer,
                     kj::Duration patience = kConnectPatience, uint32_t mark = 0)
      : events_(events), timer_(timer), patience_(patience), mark_(mark) {}

  kj::Promise<kj::AutoCloseFd> Connect(const std::string& netns_path, uint32_t addr,
                                       uint16_t port) override;

 private:
  kj::UnixEventPort& events_;
  kj::Timer& timer_;
  kj::Duration patience_;
  uint32_t mark_;
};

}  // namespace paseo
