// The public API's servers (schema/api.capnp: Supervisor, Sandbox, Process, Subscription):
// each call is translated into a Broker operation for the connection's peer, and a refusal
// into an RPC exception with its reason token (common/rpc_errors.h), and every call's outcome
// into one audit line (audit_log.h) -- nothing else happens here. One Supervisor per
// connection, bound to that peer's identity.
#pragma once

#include "broker/audit_log.h"
#include "broker/authorization.h"
#include "broker/broker.h"
#include "broker/connection_limits.h"
#include "schema/api.capnp.h"

namespace paseo {

inline constexpr char kBrokerVersion[] = "paseo-sandbox 0.1.0";

// The bootstrap capability for a new connection from `peer`; `calls` bounds the calls it may
// have waiting at once. Every call on it and on the capabilities it hands out leaves one line
// in `audit` when it ends (see AuditedDispatch in api_servers.cc); `audit` outlives them.
api::Supervisor::Client NewSupervisor(Broker& broker, AuditLog& audit, Peer peer,
                                      kj::Own<CallLimiter::Connection> calls);

}  // namespace paseo
