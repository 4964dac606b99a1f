// The C++ client library for the paseo-sandbox public API. Connects to the supervisor's Unix
// socket and hands out the bootstrap Supervisor capability.
//
//   auto io = kj::setupAsyncIo();
//   paseo::client::Connection conn(io, "/run/paseo-sandbox/supervisor.sock");
//   auto info = conn.supervisor().infoRequest().send().wait(io.waitScope);
#pragma once

#include <string>

#include <capnp/rpc-twoparty.h>
#include <kj/async-io.h>
#include <kj/io.h>

#include "schema/api.capnp.h"

namespace paseo::client {

inline constexpr char kDefaultSocket[] = "/run/paseo-sandbox/supervisor.sock";

// $PASEO_SANDBOX_SOCKET if set, else kDefaultSocket.
std::string DefaultSocketPath();
// $PASEO_SANDBOX_DEPLOYMENT if set and not empty, else "": the deployment a command uses when
// it names none (a Docker image sets it once for every client in the container).
std::string DefaultDeployment();

class Connection {
 public:
  // The connection accepts one fd per message from the service (Sandbox.connect's Socket).
  // Connects synchronously (throws kj::Exception with a readable message on failure).
  Connection(kj::AsyncIoContext& io, const std::string& socket_path);
  // Speaks the API on a socket the caller connected itself (e.g. without blocking); takes it.
  Connection(kj::AsyncIoContext& io, kj::AutoCloseFd connected);

  api::Supervisor::Client& supervisor() { return supervisor_; }
  kj::Promise<void> onDisconnect() { return client_->onDisconnect(); }

 private:
  kj::Own<kj::AsyncCapabilityStream> stream_;
  kj::Own<capnp::TwoPartyClient> client_;
  api::Supervisor::Client supervisor_;
};

// Sandbox.connect: a socket connected to `port` inside the sandbox, owned by the caller (the
// service passes its fd with the answer; the capability is dropped once it is taken). Fails with
// the service's reason -- permission-denied (port not in the profile's inboundPorts),
// failed-precondition (no network, paused, stopped), unavailable (nothing listening) -- or
// failed-precondition if no fd came with the answer (a connection that accepts no fds).
kj::Promise<kj::AutoCloseFd> Connect(api::Sandbox::Client sandbox, uint16_t port);

// The client-facing text of an RPC error: "<reason>: <message>" without kj's prefixes.
std::string ErrorText(const kj::Exception& e);

}  // namespace paseo::client
