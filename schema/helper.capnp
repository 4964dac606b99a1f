# The private broker <-> privhelper protocol, spoken over a socketpair the privhelper made.
# A closed set of typed requests: no host paths, no runsc argv, no raw OCI, no capabilities.
# The privhelper re-validates every request against its own root-owned config, so a
# compromised broker gets no more than an authorized client would.
@0xabd93f429ec2e95b;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("paseo::helper");

using Api = import "/schema/api.capnp";

struct DeploymentPolicy {
  # What the broker needs to authorize a client for one deployment.
  id @0 :Text;
  allowedUids @1 :List(UInt32);
  allowedGids @2 :List(UInt32);
  profiles @3 :List(Text);
  # Launch profiles the deployment may use; the first is the default.
  outputBufferBytes @4 :UInt64;
  # Bytes of output kept in memory per stream (from the default profile).
  profileBufferBytes @5 :List(UInt64);
  # outputBufferBytes of each profile in `profiles`, in the same order.
}

struct AuditPolicy {
  # Where and how the broker writes its audit log (config.capnp AuditConfig, checked and with
  # the path resolved by the privhelper, which also made the file's directory the broker's).
  toFile @0 :Bool;
  # false: lines on the broker's stderr.
  path @1 :Text;
  maxBytes @2 :UInt64;
  maxFiles @3 :UInt32;
  refusalsPerSecond @4 :UInt32;
}

struct BrokerPolicy {
  deployments @0 :List(DeploymentPolicy);
  audit @1 :AuditPolicy;
}

struct CreateSandboxRequest {
  sandboxId @0 :Text;
  # Chosen by the broker; validated as an id (it becomes a path component).
  deploymentId @1 :Text;
  profile @2 :Text;
  workspaces @3 :List(Api.WorkspaceMount);
  credentials @4 :List(Text);
  # Credential names; the privhelper maps them through its own config.
  peerUid @5 :UInt32;
  peerGids @6 :List(UInt32);
  # The requesting client as the broker saw it (SO_PEERCRED uid; SO_PEERCRED gid first, then
  # SO_PEERGROUPS). The privhelper refuses an identity the deployment does not allow, and gives
  # a workspace only if this identity could reach it itself (privhelper/peer_access.h).
}

struct StartProcessRequest {
  sandboxId @0 :Text;
  processId @1 :Text;
  argv @2 :List(Text);
  env @3 :List(Text);
  cwd @4 :Text;
  tty @5 :Bool;
  rows @6 :UInt16;
  cols @7 :UInt16;
  workspaceCwd @8 :Text;
  # Api.ProcessSpec.workspaceCwd: resolved by the privhelper beneath the sandbox's first
  # workspace (cwd is then empty).
  exactEnv @9 :Bool;
  # Api.ProcessSpec.exactEnv.
  reportUnkept @10 :Bool;
  # Api.ProcessSpec.reportUnkept: run through `shim exec --report-unkept`.
  dropOldest @11 :Bool;
  # Its output mode is Api.OutputMode.dropOldest: while no privhelper relays for it (a restart),
  # the in-sandbox spawner keeps its newest output and lets it run on; a lossless process waits.
}

interface Fd {
  # Carries one file descriptor (SCM_RIGHTS); the receiver dups it and drops the capability.
}

struct AdoptedSandbox {
  # A sandbox the privhelper holds, reported to a (re)starting broker.
  sandboxId @0 :Text;
  deploymentId @1 :Text;
  profile @2 :Text;
  createdAtUnixMs @3 :Int64;
  unattached @4 :Bool;
  # True if a previous privhelper started it (restart policy "keep") and its spawner could not be
  # reattached: its processes are gone. A reattached sandbox is not unattached.
  oomKilled @5 :Bool;
  # The host's OOM killer stopped it (a process of it ended oom-killed); only delete is useful.
  stopped @6 :Bool;
  # It stopped by itself: its gVisor kernel (runsc-sandbox, the sentry) or its file server
  # (runsc-gofer) exited, or a restarted privhelper found it stopped. Nothing new can start in
  # it; only delete is useful. Always true when oomKilled is.
  stopReason @7 :Text;
  # Why, for people (e.g. "its gVisor kernel (runsc-sandbox) exited (killed by signal 9)");
  # empty unless stopped.
  paused @8 :Bool;
  # Paused (pauseSandbox, or found paused by a restarted privhelper).
  network @9 :Api.NetworkInfo;
  # Its network as createSandbox reported it.
  paths @10 :Api.SandboxPaths;
  # Its paths as createSandbox reported them.
  lostReason @11 :Text;
  # Adopted from a previous privhelper: why a process the broker knew of in it is not in the
  # inventory (e.g. it was a `runsc exec`, or its spawner could not be reattached). Empty if
  # its spawner was reattached and nothing else ran in it.
}

struct KeptProcess {
  # A process whose stdio the privhelper kept, so a restarted broker can take it over.
  sandboxId @0 :Text;
  processId @1 :Text;
  argv @2 :List(Text);
  # Not filled in (the broker keeps argv in its own records); reserved.
  tty @3 :Bool;
  # Runs on a terminal: stdin takes tty frames (common/tty_frames.h), stdout is the pty stream.
}

struct SandboxUsage {
  # What one sandbox uses now, read from its cgroups and its link (Helper.sandboxUsage).
  sandboxId @0 :Text;
  measured @1 :Bool;
  # False if its cgroups could not be read (it is stopped, being deleted, or has none yet):
  # every figure below is then 0.
  cpuNs @2 :UInt64;
  # CPU time its host tasks (the gVisor kernel, file server and their threads) have used since
  # it started, in nanoseconds.
  memoryBytes @3 :UInt64;
  # Memory charged to it now, less the inactive file cache the kernel reclaims first (the
  # working set, as `docker stats` shows it).
  memoryLimitBytes @4 :UInt64;
  # Its memory limit (the profile's); 0: none.
  hostTasks @5 :UInt32;
  # Host tasks (threads) in its cgroup now.
  hostTasksLimit @6 :UInt32;
  # Its pids limit; 0: none.
  networked @7 :Bool;
  # It has a link (network mode "sandbox"): the two counters below are its.
  networkInBytes @8 :UInt64;
  # Bytes that reached the sandbox over its link (sent to it by the host end).
  networkOutBytes @9 :UInt64;
  # Bytes the sandbox sent over its link.
}

struct ServiceUsage {
  # All sandboxes together: the service's cgroup (helper.json's cgroupParent) and its bounds.
  cpuNs @0 :UInt64;
  memoryBytes @1 :UInt64;
  memoryLimitBytes @2 :UInt64;
  hostTasks @3 :UInt32;
  hostTasksLimit @4 :UInt32;
  cpuMillisLimit @5 :UInt32;
  # The service's CPU bound in thousandths of a core.
  brokerRestarts @6 :UInt32;
  # How often this privhelper restarted a broker that had ended by itself (crashed, killed).
  privhelperStartedAtUnixMs @7 :Int64;
  brokerReloads @8 :UInt32;
  # How often it restarted the broker for a config reload.
}

interface Helper {
  policy @0 () -> (policy :BrokerPolicy);
  # The deployments and who may use them, so the broker can authorize clients.

  createSandbox @1 (request :CreateSandboxRequest) -> (network :Api.NetworkInfo,
                                                      paths :Api.SandboxPaths);
  # Resolves the workspaces, writes the bundle, sets up the profile's network (its namespace,
  # link, addresses, firewall and resolver for mode "sandbox"), and creates and starts the
  # sandbox. Returns its network and paths as the broker shows them (SandboxInfo.network,
  # SandboxInfo.paths).

  startProcess @2 (request :StartProcessRequest) -> (stdin :Fd, stdout :Fd, stderr :Fd);
  # Starts a process in a running sandbox; returns the broker's ends of its stdio pipes. For a
  # tty process (run through the in-sandbox relay) stdin takes tty frames, stdout carries
  # everything the terminal shows, and stderr is at end-of-file.

  waitProcess @3 (sandboxId :Text, processId :Text) -> (status :Api.ExitStatus);
  # Resolves when the process has ended.

  signalProcess @4 (sandboxId :Text, processId :Text, signal :Int32) -> ();
  # Sends a signal to a running process.

  deleteSandbox @5 (sandboxId :Text) -> ();
  # Stops the sandbox: answers once nothing can run in it any more (its gVisor kernel has
  # exited), with its record marked deleting. Releasing the rest -- runsc's state, mounts,
  # cgroups, network, bundle -- goes on in the background (awaitGone). A second call while it is
  # being deleted answers as the first does; a call after its teardown failed (after retries;
  # the sandbox stays deleting) starts it again. not-found: nothing of it is held any more.

  inventory @6 () -> (sandboxes :List(AdoptedSandbox), processes :List(KeptProcess));
  # Everything a starting broker must know: every sandbox, and every process started through
  # this privhelper (a restarted broker rebuilds its registry from this).

  reattach @7 (sandboxId :Text, processId :Text, stdoutOffset :UInt64, stderrOffset :UInt64)
      -> (stdin :Fd, stdout :Fd, stderr :Fd, stdoutStart :UInt64, stderrStart :UInt64);
  # The broker's ends of a process's stdio (stdin is absent once closed). The offsets are where
  # the broker's logs of its streams end. For a process a reattached spawner continues (after a
  # privhelper restart), the pipes carry its output from stdoutStart and stderrStart: the
  # offsets asked for, or later if the spawner no longer had those bytes (a drop-oldest stream
  # whose newest bytes outran what it keeps: the broker records the gap). For any other process
  # they are copies of what the privhelper kept, continuing where the pipes are, and the starts
  # are the offsets asked for.

  closeInput @8 (sandboxId :Text, processId :Text) -> ();
  # The broker closed the process's stdin: the privhelper drops its copy too, so the process
  # sees end-of-file.

  waitSandbox @9 (sandboxId :Text) -> (reason :Text, oomKilled :Bool);
  # Resolves when the sandbox has stopped by itself (its sentry or gofer exited; at once if it
  # already has), with why and whether the host's OOM killer did it. Fails with not-found once
  # the sandbox is deleted. The broker keeps one such call open per sandbox.

  releaseProcess @10 (sandboxId :Text, processId :Text) -> ();
  # Forgets an ended process: its kept stdio, files and record. failed-precondition while it
  # runs; not-found if unknown.

  pauseSandbox @11 (sandboxId :Text) -> ();
  # runsc pause; nothing new starts in it until resumeSandbox. Idempotent.

  resumeSandbox @12 (sandboxId :Text) -> ();
  # runsc resume. Idempotent.

  connectPort @13 (sandboxId :Text, port :UInt16) -> (socket :Fd);
  # A TCP connection to the sandbox's address on `port`, made from inside the sandbox's network
  # namespace (the host end of its link); refused unless the sandbox's profile lists the port in
  # network.inboundPorts. The broker hands the fd to the client that asked (Api.Sandbox.connect).

  awaitGone @14 (sandboxId :Text) -> ();
  # Resolves once the privhelper holds nothing of the sandbox any more (a delete's background
  # teardown has ended); at once for an unknown id.
  spawnerState @15 (sandboxId :Text) -> (state :Text);
  # The sandbox's in-sandbox spawner (Api.SandboxInfo.spawner): "off", "not started",
  # "starting", "running", or "down: <why>" (its processes start through runsc exec).

  sandboxUsage @16 (sandboxIds :List(Text)) -> (sandboxes :List(SandboxUsage), service :ServiceUsage);
  # What each named sandbox uses now (at most 1024 ids; an id the privhelper does not hold is
  # left out of the answer), and what all sandboxes together use against the service's bounds.
}
