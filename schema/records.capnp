# Records the daemons keep on disk about their own state, encoded with capnp's JsonCodec.
@0xcf4b7a13230971da;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("paseo::records");
using Api = import "/schema/api.capnp";

struct SandboxRecord {
  # Written by the privhelper into <stateDir>/bundles/<id>/sandbox.json when it creates a
  # sandbox, so a restarted privhelper knows what a surviving container is.
  id @0 :Text;
  deploymentId @1 :Text;
  profile @2 :Text;
  uid @3 :UInt32;
  gid @4 :UInt32;
  defaultCwd @5 :Text;
  createdAtUnixMs @6 :Int64;
  home @7 :Text;
  # The home mounted in it (config.capnp LaunchProfile.homePath); empty in records from before
  # homes existed.
  networkBlock @8 :Text;
  # Network mode "sandbox": the /30 of HelperNetwork.pool its link uses ("10.88.0.4/30"), so a
  # restarted privhelper reserves it again and rebuilds its firewall chains; empty for "none".
  deleting @9 :Bool;
  # Set (the record rewritten in place) before a delete is answered: a privhelper that starts
  # and finds it finishes the teardown, whatever its restart policy.
  kept @10 :List(Text);
  # Api.SandboxPaths.kept: its read-write workspace and credential destinations.
}

struct BrokerSandbox {
  # The broker's own record of a sandbox: what only the broker knows (who created it, its
  # labels) next to its output logs, in <broker state dir>/<sandbox-id>/record. Output offsets
  # are the log files' sizes, so they need no record.
  id @0 :Text;
  deploymentId @1 :Text;
  profile @2 :Text;
  ownerUid @3 :UInt32;
  createdAtUnixMs @4 :Int64;
  labels @5 :List(Label);
  processes @6 :List(BrokerProcess);
  # Processes not released yet (Process.release), in start order.
  key @7 :Text;
  # The key it was created with (api.capnp SandboxSpec.key); empty if none. A restarted broker
  # indexes it again, so findSandbox and keyed creates survive broker and service restarts.
  released @8 :List(ReleasedProcess);
  # Tombstones of the last released processes that had a key (Sandbox.findProcess), oldest
  # first, at most 1024.

  struct Label {
    key @0 :Text;
    value @1 :Text;
  }

  struct BrokerProcess {
    id @0 :Text;
    argv @1 :List(Text);
    key @2 :Text;
    # Api.ProcessSpec.key; empty if none.
    output @3 :Api.OutputMode;
    stdoutGaps @4 :List(UInt64);
    stderrGaps @5 :List(UInt64);
    # Ranges of the stream that were lost in a supervisor restart (a drop-oldest stream's
    # spawner kept only its newest bytes), as [from, to) pairs, oldest first.
  }

  struct ReleasedProcess {
    id @0 :Text;
    key @1 :Text;
    status @2 :Api.ExitStatus;
  }
}
