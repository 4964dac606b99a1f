# The operator's view of the service: what `paseo-sandbox-admin metrics` reads. Served by the
# broker on <runDir>/operator.sock, a socket the privhelper makes root:root 0600 and that only
# peers of uid 0 may use (any other is dropped); it is never socket-activated nor meant to be
# bind-mounted into a container (docker/README.md mounts supervisor.sock alone). Unlike the
# public API it sees every deployment's sandboxes, so it names no workspace, label or key.
@0xc881e3adc1993845;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("paseo::operator_api");

using Api = import "/schema/api.capnp";

struct ReasonCount {
  reason @0 :Text;
  # A reason token of the public API ("permission-denied", "invalid-argument", ...), or
  # "cancelled" for a call whose connection went away before its answer.
  count @1 :UInt64;
}

struct ServiceMetrics {
  version @0 :Text;
  sampledAtNs @1 :UInt64;
  # As Api.SandboxStats.sampledAtNs.

  # All sandboxes together, against the service's bounds (helper.json's service section).
  cpuNs @2 :UInt64;
  memoryBytes @3 :UInt64;
  memoryLimitBytes @4 :UInt64;
  hostTasks @5 :UInt32;
  hostTasksLimit @6 :UInt32;
  cpuMillisLimit @7 :UInt32;

  # The service's health.
  privhelperStartedAtUnixMs @8 :Int64;
  brokerStartedAtUnixMs @9 :Int64;
  brokerRestarts @10 :UInt32;
  # Brokers the privhelper restarted after one ended by itself (a crash, a kill).
  brokerReloads @11 :UInt32;
  # Brokers it restarted for a config reload.
  auditRecords @12 :UInt64;
  # Calls and refused connections this broker has audited since it started.
  auditLines @13 :UInt64;
  # Lines it wrote for them (a coalesced second of refusals is one line).
  notOk @14 :List(ReasonCount);
  # Audited calls and connections that were refused, failed or cancelled, by reason, since this
  # broker started.
  connections @15 :UInt32;
  # Client connections open now.
  parkedCalls @16 :UInt32;
  # Client calls waiting now (each holds a place in its connection's and uid's bound).
}

interface Operator {
  metrics @0 () -> (sandboxes :List(Api.SandboxStats), service :ServiceMetrics);
  # Every sandbox (of every deployment, in any state but creating) and the service.
}
