// The public API's servers (schema/api.capnp: Supervisor, Sandbox, Process, Subscription):
// each call is translated into a Broker operation for the connection's peer, and a refusal
// into an RPC exception with its reason token (common/rpc_errors.h) -- nothing else happens
// here. One Supervisor per connection, bound to that peer's identity.
#pragma once

#include "broker/authorization.h"
#include "broker/broker.h"
#include "broker/connection_limits.h"
#include "schema/api.capnp.h"

namespace paseo {

inline constexpr char kBrokerVersion[] = "paseo-sandbox 0.1.0";

// The bootstrap capability for a new connection from `peer`; `calls` bounds the calls it may
// have waiting at once.
api::Supervisor::Client NewSupervisor(Broker& broker, Peer peer,
                                      kj::Own<CallLimiter::Connection> calls);

}  // namespace paseo
