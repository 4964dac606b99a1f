// Sandbox.connect's relay: the client gets one end of a Unix stream socket pair, and the broker
// copies bytes between the other end and the TCP connection the privhelper made into the
// sandbox (docs/decisions.md, "Sandbox.connect hands out a relayed Unix socket").
//
// The TCP socket itself is never handed out: it lives in the host's network namespace, and a
// client holding it could disconnect it (connect with AF_UNSPEC) and connect it again anywhere
// the host can reach -- the host's loopback services included, which a client in a container
// cannot otherwise name. A Unix stream socket can only ever be this one connection.
//
// Each direction is copied as it comes (64 KiB at a time) and a half close passes through
// (shutdown(SHUT_WR) on one side ends the other side's writes), so request/response protocols
// that close their sending half work. An error on either side ends both. Relays of a sandbox
// end when it is deleted; at most kMaxPerSandbox run per sandbox at once.
//
//   PortRelays relays(low_level_provider);
//   ASSIGN_OR_RETURN(kj::AutoCloseFd client_end, relays.Start(sandbox_id, std::move(tcp)));
//   ...
//   relays.EndSandbox(sandbox_id);  // on delete
#pragma once

#include <map>
#include <string>

#include <kj/async-io.h>
#include <kj/io.h>

#include "absl/status/statusor.h"

namespace paseo {

class PortRelays {
 public:
  static constexpr size_t kMaxPerSandbox = 64;
  static constexpr size_t kChunk = 64 * 1024;

  explicit PortRelays(kj::LowLevelAsyncIoProvider& low);
  ~PortRelays();

  // Relays `connection` (connected, any stream socket) to a new socket pair; the caller gets
  // the other end. resource-exhausted past kMaxPerSandbox for this sandbox.
  absl::StatusOr<kj::AutoCloseFd> Start(const std::string& sandbox_id,
                                        kj::AutoCloseFd connection);
  // Ends every relay of the sandbox at once (both of its sockets closed).
  void EndSandbox(const std::string& sandbox_id);
  size_t Open(const std::string& sandbox_id) const;

 private:
  struct PerSandbox;
  class ErrorHandler : public kj::TaskSet::ErrorHandler {
   public:
    void taskFailed(kj::Exception&& exception) override;
  };

  kj::LowLevelAsyncIoProvider& low_;
  std::map<std::string, kj::Own<PerSandbox>> sandboxes_;
  ErrorHandler errors_;
  kj::TaskSet tasks_;
};

}  // namespace paseo
