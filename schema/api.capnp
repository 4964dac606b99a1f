# paseo-sandbox public client API: what the Paseo daemon (or the CLI) speaks over
# /run/paseo-sandbox/supervisor.sock. Capability style: the bootstrap Supervisor is bound to
# the connecting peer's SO_PEERCRED identity, and every object reached from it re-checks that
# the peer may use the deployment it belongs to. Nothing here can name a host path, a runsc
# flag, raw OCI, a hook or a capability.
#
# Errors a client can cause come back as RPC exceptions whose description starts with a stable
# reason token followed by ": " (for example "permission-denied: ...", "invalid-argument: ...",
# "not-found: ...", "failed-precondition: ...", "internal: ..."). A call whose parameters capnp
# cannot read as their type is refused before anything of it runs, as
# "invalid-argument: malformed request: <what> at <field path>", <what> one of a fixed set
# (common/message_check.h); "internal" is only ever a failure of the service's own.
@0xdd6fab7fcd1b4481;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("paseo::api");

# ---------------------------------------------------------------- specs

enum AccessMode {
  readOnly @0;
  readWrite @1;
}

struct WorkspaceMount {
  # One workspace to show inside the sandbox.
  path @0 :Text;
  # The workspace path as the client sees it: absolute and normalized (no empty, "." or ".."
  # component, no trailing "/"; anything else is refused). For a host deployment this is the host
  # path; for a Docker deployment it is the path inside the client's container. The privhelper
  # maps it through the deployment's registered roots; it is never used as a host path directly.
  destination @1 :Text;
  # Absolute path inside the sandbox. Empty means "/workspace".
  mode @2 :AccessMode;
  empty @3 :Bool;
  # Instead of a client's directory: a new empty directory made for this sandbox alone (on the
  # host, in the sandbox's own bundle, owned by its run-as user), read-write, and removed with
  # the sandbox. `path` must then be empty and `mode` readWrite. What it holds is not kept
  # (SandboxPaths.kept): a git source's clone (docs/paseo.md) lives here.
}

struct Label {
  key @0 :Text;
  value @1 :Text;
}

struct SandboxSpec {
  deploymentId @0 :Text;
  # Which registered deployment this sandbox belongs to; the caller must be allowed to use it.
  profile @1 :Text;
  # Launch profile name; empty selects the deployment's first allowed profile.
  workspaces @2 :List(WorkspaceMount);
  labels @3 :List(Label);
  # Free-form labels kept with the sandbox (at most 32, keys and values at most 256 bytes).
  credentials @4 :List(Text);
  # Names of credential directories to mount (for example "claude"). Each must be registered
  # for the deployment and placed by the launch profile; mounted read-only unless the profile
  # says otherwise. The client never learns or sends their host paths.
  key @5 :Text;
  # A name the client chooses for the sandbox (at most 256 bytes of UTF-8, no NUL; empty:
  # none), unique within the deployment; findSandbox looks it up. Creating with a key that an
  # existing sandbox of the deployment has returns that sandbox (created = false; the rest of
  # the spec is not compared) if the same uid created it, and fails with already-exists
  # otherwise. Concurrent creates with one key yield one sandbox. A key is free again once its
  # sandbox is deleted.
}

struct ProcessSpec {
  argv @0 :List(Text);
  # Program and arguments, run inside the sandbox. Must not be empty.
  env @1 :List(Text);
  # "KEY=VALUE" entries. PATH defaults to a standard value when absent. Names beginning with
  # PASEO_SHIM_ are the supervisor's (its in-sandbox shim's settings) and refused.
  cwd @2 :Text;
  # Working directory inside the sandbox; empty means the first workspace's destination, or "/".
  tty @3 :Bool;
  # Run on a pseudo-terminal: one output stream (`pty`, the terminal's output with its line
  # discipline applied, stderr included), writeInput types at the terminal (Ctrl-C signals
  # its foreground process group unless the program made it raw), resize() sets its size,
  # and closeInput() types the terminal's EOF character. Otherwise stdin, stdout and stderr
  # are separate pipes.
  rows @4 :UInt16 = 24;
  cols @5 :UInt16 = 80;
  # Initial terminal size (tty only).
  key @6 :Text;
  # A name the client chooses for the process (at most 256 bytes of UTF-8, no NUL; empty:
  # none), unique among the sandbox's processes: starting a second process with a key the
  # sandbox still has (or remembers as released, see Sandbox.findProcess) fails with
  # already-exists and starts nothing. Sandbox.findProcess looks it up.
  output @7 :OutputMode;
  # What happens when the process writes faster than its output is read (see OutputMode).
  workspaceCwd @8 :Text;
  # A working directory relative to the first workspace (for example "packages/app"), used
  # instead of cwd, which must then be empty. It is resolved beneath the workspace and must
  # stay there: no absolute path, no ".." that leaves it, no symlink whose target is absolute
  # or leads out of it; it must be a directory. Checked against the workspace itself when the
  # process starts; invalid-argument otherwise, and nothing starts. "." (or "./") is the
  # workspace itself; empty and "." components are ignored; a sandbox without workspaces
  # refuses any workspaceCwd.
  exactEnv @9 :Bool;
  # The process's environment is exactly `env`: no default PATH (or TERM for a tty) is added,
  # and the HOME that runsc gives every process without one is removed again (such a process
  # starts through the in-sandbox shim, which unsets it and execs the program in place).
  # Nothing else is added either: the profile's tool directories are not put on its PATH. A
  # program named without a "/" is looked up, as for every process, in the tool directories,
  # then env's PATH, or the default PATH when env has none; a name with a "/" is taken from the
  # working directory. Paseo's runtime contract asks for exactly this.
  reportUnkept @10 :Bool;
  # Once the program has ended, its stderr (or a tty's stream) gets a short advisory report of
  # the paths it created or changed outside the sandbox's kept directories (SandboxPaths.kept),
  # which go with the sandbox, written by the in-sandbox shim (at most 32 paths, bounded in
  # time; docs/running.md, "What is kept"). The program then runs as the shim's child: signals
  # are passed on and its exit status is the process's. Advisory, never a boundary.
}

enum OutputMode {
  dropOldest @0;
  # Each stream keeps the newest outputBufferBytes (the profile's); a reader that falls
  # further behind is told how many bytes it lost (OutputSink.gap). The process never waits.
  lossless @1;
  # Like a pipe: once a stream has outputBufferBytes that no subscriber has read yet, the
  # process's writes to it wait until one reads on. "Read" is the furthest offset any
  # subscriber of the stream has been sent and acknowledged (OutputSink.write returned), so
  # one reader that keeps up is enough, and a reader that resubscribes from its own last
  # offset after a reconnect (or a broker restart) misses nothing. Nothing is ever dropped.
}

enum Stream {
  stdout @0;
  stderr @1;
  pty @2;
  # The single output stream of a tty process.
}

struct ExitStatus {
  # How a process ended.
  union {
    running @0 :Void;
    # Not ended yet (only in ProcessInfo).
    exitCode @1 :Int32;
    # Ended by exit(code).
    signal @2 :Int32;
    # Killed by this signal number.
    unknown @3 :Void;
    # Ended, but the supervisor could not learn how (for example the program could not be
    # started at all; runsc's message is then on the process's stderr).
    oomKilled @4 :Void;
    # The sandbox exceeded its profile's memory limit and the host's OOM killer stopped it:
    # every process that was running in it ends this way, and the sandbox is gone.
  }
}

struct SandboxInfo {
  id @0 :Text;
  deploymentId @1 :Text;
  profile @2 :Text;
  state @3 :Text;
  # "running"; "paused" (Sandbox.pause: its processes are frozen, nothing new starts, resume
  # continues them); "deleting"; "running-unattached": left running by a previous service
  # instance and adopted after a restart (its earlier processes' output is gone; new processes
  # can be started; it can be inspected and deleted); "oom-killed": it exceeded its memory
  # limit and the host stopped it; or "stopped": it stopped by itself -- its gVisor kernel or
  # file server exited (killed, crashed), or a restarted service found it stopped. A stopped
  # or oom-killed sandbox's processes have ended, its output stays readable, starting a
  # process fails with failed-precondition, and only delete is useful. stateReason says why.
  createdAtUnixMs @4 :Int64;
  labels @5 :List(Label);
  processCount @6 :UInt32;
  ownerUid @7 :UInt32;
  # The uid of the client that created it.
  stateReason @8 :Text;
  # Why it is "stopped" or "oom-killed", for people (e.g. "its gVisor kernel (runsc-sandbox)
  # exited (killed by signal 9)"); empty in the other states.
  key @9 :Text;
  # The key it was created with (SandboxSpec.key); empty if none.
  network @10 :NetworkInfo;
  spawner @11 :Text;
  # How its processes start (filled in by Sandbox.inspect only; empty elsewhere): "running" (a
  # spawner inside the sandbox forks them), "starting", "not started", "off" (every process is
  # a `runsc exec`), or "down: <why>" (the spawner died or misbehaved; its processes were
  # reported ended and new ones are `runsc exec`s).
  paths @12 :SandboxPaths;
  # Where its programs are found and which of its writes are kept.
}

struct SandboxPaths {
  # What a process in the sandbox should know about its filesystem (docs/running.md, "What is
  # kept"). The same set is inside the sandbox, in /.paseo/kept (one path per line) and, for a
  # process without exactEnv, in $PASEO_SANDBOX_KEPT (':'-separated).
  toolDirectories @0 :List(Text);
  # The profile's tool directories, in order: a program named without a "/" is looked up here
  # first (ProcessSpec).
  kept @1 :List(Text);
  # Where writes outlive the sandbox: its read-write workspaces and credential directories
  # (host directories), by destination. Everything else that is writable -- the home, /tmp --
  # is the sandbox's own and goes with it; the root is read-only.
  home @2 :Text;
  # The home every process gets as $HOME unless its env sets one (empty: none).
}

struct NetworkInfo {
  mode @0 :Text;
  # "none" (loopback only) or "sandbox" (its profile's egress policy; docs/running.md).
  address @1 :Text;
  # The sandbox's IPv4 address on its link ("10.88.0.6"); empty for "none".
  inboundPorts @2 :List(UInt16);
  # Ports Sandbox.connect may reach.
  allowNames @3 :List(AllowedName);
  # Its profile's network.allowNames: the names (and their ports) it may resolve and reach, so a
  # client can say why a name it needs is out of reach before trying.
}

struct AllowedName {
  name @0 :Text;
  # "api.example.com", or "*.example.com" (any name strictly below example.com).
  ports @1 :List(UInt16);
}

struct ProcessInfo {
  id @0 :Text;
  sandboxId @1 :Text;
  argv @2 :List(Text);
  status @3 :ExitStatus;
  stdoutBytes @4 :UInt64;
  # Total bytes the process has written to stdout so far (the next byte's offset).
  stderrBytes @5 :UInt64;
  tty @6 :Bool;
  # A tty process: its output is the `pty` stream (counted in stdoutBytes).
  key @7 :Text;
  # The key it was started with (ProcessSpec.key); empty if none.
  output @8 :OutputMode;
}

struct SandboxStats {
  # What one sandbox uses now (Supervisor.stats), like a line of `docker stats`. Counters are
  # cumulative: a rate is the difference of two samples over the difference of their
  # sampledAtNs (CPU cores = delta cpuNs / delta sampledAtNs).
  sandboxId @0 :Text;
  deploymentId @1 :Text;
  state @2 :Text;
  # As SandboxInfo.state.
  sampledAtNs @3 :UInt64;
  # When the figures were read, on the service host's monotonic clock (only differences mean
  # anything).
  measured @4 :Bool;
  # False when its cgroups could not be read (it is stopped, oom-killed or being deleted): the
  # cgroup figures (cpuNs to hostTasksLimit) are then 0.
  cpuNs @5 :UInt64;
  # CPU time used by its host tasks (its gVisor kernel and file server: everything it runs),
  # in nanoseconds.
  memoryBytes @6 :UInt64;
  # Memory charged to it now, less the file cache the kernel reclaims first (the working set).
  memoryLimitBytes @7 :UInt64;
  # Its profile's memory limit; 0: none.
  hostTasks @8 :UInt32;
  # Host threads its cgroup holds now (what its profile's maxHostTasks bounds).
  hostTasksLimit @9 :UInt32;
  # 0: none.
  processes @10 :UInt32;
  # Its processes that run now.
  outputBytes @11 :UInt64;
  # Bytes its processes have written to stdout and stderr (a tty's stream counted once): those
  # the service holds, and those released since the broker last started.
  outputBufferedBytes @12 :UInt64;
  # Bytes of that output the service keeps now for replay (Process.subscribe), at most
  # outputBufferBytes per stream.
  networked @13 :Bool;
  # Network mode "sandbox": the two counters below are its link's.
  networkInBytes @14 :UInt64;
  # Bytes that reached the sandbox over its link (answers, downloads, inbound connections).
  networkOutBytes @15 :UInt64;
  # Bytes it sent over its link.
}

# ---------------------------------------------------------------- interfaces

interface Socket {
  # Carries one connected stream socket (SCM_RIGHTS over the client's Unix socket; a client
  # must accept file descriptors on its connection). The receiver takes the fd and drops this.
}

interface Supervisor {
  # The bootstrap capability, one per connection, bound to the peer's uid and gids.

  createSandbox @0 (spec :SandboxSpec) -> (sandbox :Sandbox, info :SandboxInfo, created :Bool);
  # Creates and starts a gVisor sandbox over the given workspaces. Fails with
  # permission-denied if the caller may not use the deployment, invalid-argument for a bad
  # spec or a workspace outside the deployment's roots. `created` is false when spec.key named
  # an existing sandbox, which is returned instead (see SandboxSpec.key).

  getSandbox @1 (id :Text) -> (sandbox :Sandbox);
  # Looks up a sandbox by id (for reconnecting). not-found if absent or not visible to the caller.

  listSandboxes @2 () -> (sandboxes :List(SandboxInfo));
  # Every sandbox of every deployment the caller may use.

  info @3 () -> (version :Text, peerUid :UInt32, deployments :List(Text));
  # Service version, the caller's uid as the service sees it, and the deployments it may use.

  findSandbox @4 (deploymentId :Text, key :Text) -> (sandbox :Sandbox, info :SandboxInfo);
  # The sandbox of this deployment created with this key (SandboxSpec.key), surviving restarts
  # of the broker and of the whole service. not-found if there is none, it is still being
  # created, or the caller may not use the deployment.

  stats @5 (ids :List(Text)) -> (stats :List(SandboxStats));
  # What the named sandboxes use now, in the order asked (at most 1024 ids); with no ids, every
  # sandbox listSandboxes shows. not-found for an id that is absent or not visible to the caller
  # (as getSandbox); a sandbox deleted while its figures were read is left out.
}

interface Sandbox {
  startProcess @0 (spec :ProcessSpec) -> (process :Process, info :ProcessInfo);
  # Starts a process inside the sandbox: with pipes for stdin, stdout and stderr, or on a
  # terminal (spec.tty).

  getProcess @1 (id :Text) -> (process :Process);
  # Looks up a process of this sandbox by id. not-found if absent.

  listProcesses @2 () -> (processes :List(ProcessInfo));
  # Every process of this sandbox that runs or has ended and not been released yet.

  inspect @3 () -> (info :SandboxInfo);
  # The sandbox's current state.

  delete @4 (force :Bool) -> ();
  # Stops the sandbox and frees everything it held. Without force, fails with
  # failed-precondition while processes still run. A paused sandbox is deleted as well.

  pause @5 () -> ();
  # Freezes every process of the sandbox (runsc pause); its state becomes "paused". Starting
  # a process fails with failed-precondition until resume; output already written stays
  # readable, signals are delivered on resume. Pausing a paused sandbox does nothing;
  # failed-precondition in any state other than running, running-unattached or paused.

  resume @6 () -> ();
  # Continues a paused sandbox (runsc resume): its state is what it was before pause.
  # Resuming a sandbox that is not paused does nothing (failed-precondition if it is stopped,
  # oom-killed or being deleted).

  findProcess @7 (key :Text) -> (process :Process, info :ProcessInfo, released :Bool);
  # The process of this sandbox started with this key (ProcessSpec.key). If that process has
  # ended and been released (Process.release), `released` is true, `process` is null and
  # `info` holds only its id, key and how it ended: the sandbox remembers the keys of its
  # last 1024 released processes. not-found if the key is unknown.

  connect @8 (port :UInt16) -> (socket :Socket);
  # A connection into this sandbox's `port`, handed to this client only: a Unix stream socket
  # (its fd travels with the answer; nothing listens on the host) that the broker relays to a
  # TCP connection it had made from the host side. Half-closes pass through; the relay ends
  # when either side closes or errs, when the sandbox is deleted, or when the broker restarts.
  # At most 64 at once per sandbox (then resource-exhausted). Only ports the profile's
  # network.inboundPorts lists (else permission-denied); a sandbox with network "none" has
  # nothing to connect to (failed-precondition); nothing listening: unavailable.
}

interface Process {
  info @0 () -> (info :ProcessInfo);
  # The process's current state and output counters.

  writeInput @1 (data :Data) -> stream;
  # Appends bytes to the process's stdin (flow-controlled).

  closeInput @2 () -> ();
  # Closes stdin: the process reads end-of-file after what was written.

  signal @3 (signal :Int32) -> ();
  # Sends a signal (1..64) to the process. Right after startProcess answered, the signal waits
  # (up to 10 s) until the process can take it, so it is never lost; failed-precondition once
  # the process has ended.

  wait @4 () -> (status :ExitStatus);
  # Resolves when the process has ended.

  subscribe @5 (stream :Stream, fromOffset :UInt64, sink :OutputSink) -> (subscription :Subscription);
  # Replays the stream from byte offset fromOffset, then follows live output, then calls
  # sink.end(). If fromOffset is older than the oldest byte kept, sink.gap() comes first.
  # Dropping the returned Subscription stops delivery.

  resize @6 (rows :UInt16, cols :UInt16) -> ();
  # Sets a tty process's terminal size (its foreground process group gets SIGWINCH), in order
  # with the input written before it. failed-precondition for a pipe process.

  release @7 () -> ();
  # Forgets an ended process: its record, output logs and everything the service held for it
  # go (its key is remembered, see Sandbox.findProcess). failed-precondition while it runs.
  # The service also releases ended processes by itself: once every stream has been read to
  # its end (OutputSink.end returned) and a minute has passed or the sandbox has more than 64
  # such processes, or an hour after the end when nobody reads, or when the sandbox has more
  # than 1024 ended processes (oldest first). Nothing counts ended processes against a limit.
}

interface OutputSink {
  # Implemented by the client; receives one stream's bytes in order.

  write @0 (offset :UInt64, data :Data) -> stream;
  # data[0] is the stream's byte number `offset` (counted from 0 at process start).

  gap @1 (lostBytes :UInt64) -> ();
  # lostBytes bytes before the next write were no longer kept and cannot be replayed.

  end @2 (status :ExitStatus, endOffset :UInt64) -> ();
  # The stream is complete: endOffset is its total length; status is how the process ended.
}

interface Subscription {
  # Handle for a subscribe() call; dropping it cancels the subscription.
}
