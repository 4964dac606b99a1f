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
#include <functional>

#include "schema/api.capnp.h"
#include "schema/operator.capnp.h"

namespace paseo {

inline constexpr char kBrokerVersion[] = "paseo-sandbox 0.1.0";
// Supervisor.stats: at most this many ids in one call.
inline constexpr size_t kMaxStatsIds = 1024;

// The bootstrap capability for a new connection from `peer`; `calls` bounds the calls it may
// have waiting at once. Every call on it and on the capabilities it hands out leaves one line
// in `audit` when it ends (see AuditedDispatch in api_servers.cc); `audit` outlives them.
api::Supervisor::Client NewSupervisor(Broker& broker, AuditLog& audit, Peer peer,
                                      kj::Own<CallLimiter::Connection> calls);

// What the operator's metrics read of the client listener (main.cc).
struct OperatorCounters {
  int64_t started_at_unix_ms = 0;        // this broker's start
  std::function<size_t()> connections;   // client connections open now
  std::function<size_t()> parked_calls;  // client calls waiting now
};

// The bootstrap capability of a connection on the operator socket (schema/operator.capnp),
// for a peer main.cc has checked is uid 0. Its calls are not audited: they change nothing and
// name no client's sandbox.
operator_api::Operator::Client NewOperator(Broker& broker, const AuditLog& audit,
                                           OperatorCounters counters);

}  // namespace paseo
