# Root-owned configuration of the privhelper, decoded from JSON with capnp's JsonCodec.
# Layout of the config directory:
#   helper.json            one HelperConfig
#   deployments/<x>.json   one Deployment each
#   profiles/<x>.json      one LaunchProfile each
# Unknown fields are errors; every error names the file and the field.
@0xe55dc4c2b280fa50;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("paseo::config");

struct RunscPin {
  path @0 :Text = "/usr/bin/runsc";
  sha256 @1 :Text;
  # Hex sha256 of the runsc binary; required. The privhelper refuses to start on a mismatch
  # and executes the very file it hashed (execveat on the open fd).
  platform @2 :Text = "auto";
  # gVisor platform: "auto" (systrap where the pinned runsc has it, else ptrace; never kvm),
  # "systrap", "ptrace" or "kvm". A platform the pinned runsc lacks refuses the start
  # (privhelper/runsc_platform.h).
}

struct HelperConfig {
  stateDir @0 :Text = "/var/lib/paseo-sandbox";
  # Bundles, rootfs versions and broker records live here.
  runDir @1 :Text = "/run/paseo-sandbox";
  # The client socket, runsc's root and the control netns pin live here.
  brokerUser @2 :Text = "paseo-sandbox";
  # Unprivileged system user the broker runs as.
  socketGroup @3 :Text = "paseo-sandbox";
  # Group that owns the client socket (mode 0660).
  brokerBinary @4 :Text;
  # Absolute path of the broker; empty means "paseo-sandbox-broker" beside the privhelper.
  runsc @5 :RunscPin;
  rootfsVersion @6 :Text;
  # Default rootfs version: a directory under <stateDir>/rootfs/ holding rootfs/ and manifest.json.
  cgroupParent @7 :Text = "/paseo-sandbox";
  # Every sandbox's cgroup is <cgroupParent>/<sandbox-id> in each hierarchy.
  onRestart @8 :RestartPolicy = kill;
  # What a starting privhelper does with sandboxes a previous instance left running.
  sandboxShim @9 :Text;
  # Absolute path of the static in-sandbox shim (the sandbox's init and the tty relay); empty
  # means "paseo-sandbox-shim" beside the privhelper. Root-owned; bind-mounted read-only at
  # /.paseo/shim in every sandbox.
  network @10 :HelperNetwork;
  # How sandboxes of a profile with network mode "sandbox" are connected (docs/running.md,
  # "Network").
  spawner @11 :Bool = true;
  # Start a sandbox's processes through a spawner inside it (the shim's spawner mode: a
  # fork/exec, about 7 ms) rather than a `runsc exec` each (about 30 ms); false: always runsc
  # exec. A sandbox whose spawner fails falls back to runsc exec (docs/decisions.md).
  audit @12 :AuditConfig;
  # Where the broker writes its audit log: one JSON line per client call and per refused
  # connection (docs/operations.md, "Audit log").
  serviceLimits @13 :ServiceLimits;
  # Bounds on all sandboxes together (the cgroupParent's cgroup); each 0 is derived from the
  # host (privhelper/resource_limits.h, docs/threat-model.md "Limits add up").
}

struct ServiceLimits {
  memoryBytes @0 :UInt64 = 0;
  # Memory of all sandboxes together. 0 = half the host's RAM (at least 512 MiB).
  cpuMillis @1 :UInt32 = 0;
  # CPU of all sandboxes together, in thousandths of a CPU. 0 = three quarters of the host's.
  maxHostTasks @2 :UInt32 = 0;
  # Host tasks (pids.max) of all sandboxes together. 0 = half of min(pid_max, threads-max).
}

enum AuditDestination {
  journal @0;
  # Lines on the broker's stderr, prefixed "paseo-sandbox-audit: " (the journal under systemd).
  file @1;
  # A size-bounded set of rotating files: path, path.1 ... path.<maxFiles-1>.
}

struct AuditConfig {
  destination @0 :AuditDestination = journal;
  path @1 :Text;
  # destination "file": the current file; empty = <stateDir>/audit/audit.log. Its directory is
  # the broker's: the privhelper creates it (0700, owned by brokerUser) and refuses to start if
  # it exists owned by anyone else.
  maxBytes @2 :UInt64 = 16777216;
  # destination "file": each file is at most this long (65536 .. 2^40); with maxFiles, the log
  # never holds more than maxBytes * maxFiles bytes.
  maxFiles @3 :UInt32 = 4;
  # destination "file": the current file plus maxFiles-1 older ones (1 .. 100).
  refusalsPerSecond @4 :UInt32 = 20;
  # Refused calls and connections of one uid written one by one per second (1 .. 1000000); the
  # rest of that second are counted and written as one "coalesced" line.
}

struct HelperNetwork {
  pool @0 :Text = "10.88.0.0/16";
  # IPv4 addresses for sandbox links, a prefix of /16../24: each sandbox takes a /30 of it (its
  # host end the block's first address, the sandbox the second). It must not overlap any network
  # the host routes to (checked at start).
  dnsUpstreams @1 :List(Text);
  # Resolvers the supervisor's DNS forwards allowed names to: "192.0.2.53" or "192.0.2.53:5353".
  # Empty = the IPv4 nameservers of the host's /etc/resolv.conf when the privhelper starts.
  uplink @2 :Text;
  # The host interface sandbox traffic leaves through (masqueraded to its address); empty = any
  # interface that is not a sandbox link.
  egressUser @3 :Text = "paseo-sandbox-egress";
  # Unprivileged system user the egress proxy runs as (decision 58): it checks the name of each
  # connection to an allowNames rule's port and dials that name itself.
  egressBinary @4 :Text;
  # Absolute path of the egress proxy; empty means "paseo-sandbox-egress" beside the privhelper.
  egressTrustedCa @5 :Text;
  # A PEM file of CA certificates the egress proxy trusts, besides the system's, when it
  # verifies a secret's host (an operator's own CA). Read by the proxy's user, so it must be
  # readable by egressUser. Empty: the system's store only.
}

enum RestartPolicy {
  kill @0;
  # Delete them (their processes' stdio died with the old service).
  keep @1;
  # Adopt them: listed as "running-unattached", inspectable, usable for new processes, deletable.
}

struct WorkspaceRoot {
  hostPath @0 :Text;
  # Absolute host directory; workspaces must resolve beneath it.
  clientPath @1 :Text;
  # The same directory as the client sees it (a Docker container's path); empty = hostPath.
}

struct RunAs {
  uid @0 :UInt32;
  gid @1 :UInt32;
}

struct Deployment {
  id @0 :Text;
  allowedUids @1 :List(UInt32);
  allowedGids @2 :List(UInt32);
  # A peer may use the deployment if its uid is listed, or its gid or a supplementary group is.
  workspaceRoots @3 :List(WorkspaceRoot);
  runAs @4 :RunAs;
  # uid:gid agents run as; absent means the owner of the first workspace root.
  profiles @5 :List(Text);
  # Launch profiles this deployment may use; the first is the default. Empty = ["default"].
  maxSandboxes @6 :UInt32 = 16;
  # At most this many sandboxes of the deployment exist at once (each costs ~45 MiB of host RAM).
  credentialRoots @7 :List(CredentialRoot);
  # Credential directories this deployment's sandboxes may mount (by name).
  toolRoots @8 :List(ToolRoot);
  # Read-only tool directories (for example where Paseo's helper is installed) that the
  # profiles' `tools` place in this deployment's sandboxes. Every tool a profile this
  # deployment may use places must be registered here (checked when the config loads).
  secrets @9 :List(SecretRegistration);
  # Secrets (API keys, tokens) this deployment's sandboxes may use without holding them
  # (decision 59). Every secret a profile this deployment may use asks for must be registered
  # here (checked when the config loads).
}

struct SecretRegistration {
  # A secret that stays outside the sandbox: its value lives in a root-owned file the privhelper
  # reads at each create and hands only to the egress proxy, which puts it into `header` on TLS
  # requests to `hosts`. The sandbox gets a random placeholder in `envVar` instead.
  name @0 :Text;
  # The handle profiles ask for it by; an id ([a-z0-9-]).
  path @1 :Text;
  # Normalized absolute path of a regular file owned by root, mode 0600 or 0400 (no group or
  # other bits), one link, in a root-owned directory no one else may write, no symlink on the
  # way. Its value is the file's content without one trailing newline: one line of printable
  # ASCII, 1..4096 bytes.
  hosts @2 :List(Text);
  # Lower-case DNS names (no wildcard), 1..16; each must be allowed by the allowNames of every
  # profile asking for the secret.
  header @3 :Text;
  # The lower-case request header the value goes in ("x-api-key", "authorization"): wherever the
  # placeholder appears in that header's value, and nowhere else.
  envVar @4 :Text;
  # The environment variable every process of the sandbox gets the placeholder in
  # ("ANTHROPIC_API_KEY"), unless the client's environment sets it.
}

struct SecretUse {
  name @0 :Text;
  # A SecretRegistration name.
  file @1 :Text;
  # Optional: an absolute path in the sandbox where a read-only file holding the placeholder
  # (and a newline) appears, for agents that read a key from a file.
}

struct LaunchProfile {
  name @0 :Text;
  rootfsVersion @1 :Text;
  # Empty means the HelperConfig's rootfsVersion.
  outputBufferBytes @2 :UInt64 = 8388608;
  # Output kept in broker memory per stream.
  memoryLimitBytes @3 :UInt64 = 0;
  # Memory limit of the whole sandbox (host memory cgroup; the sandbox sees it as MemTotal).
  # 0 = the default: a fifth of serviceLimits.memoryBytes, at least 256 MiB. Every sandbox
  # has all four bounds (this one, cpuMillis, maxProcesses, maxHostTasks); there is no
  # "unlimited" (privhelper/resource_limits.h, docs/threat-model.md).
  tmpfsBytes @4 :UInt64 = 67108864;
  # Size of the sandbox's /tmp.
  credentials @5 :List(CredentialMount);
  # Where each credential a sandbox of this profile may ask for is mounted.
  cpuMillis @6 :UInt32 = 0;
  # CPU the sandbox may use, in thousandths of a CPU (1000 = one CPU: a cfs quota of 100 ms
  # per 100 ms period on the host cgroup). 0 = half the host's CPUs, at most
  # serviceLimits.cpuMillis. No profile's bound may be above the service's.
  maxProcesses @7 :UInt32 = 0;
  # RLIMIT_NPROC of the agent: gVisor's sentry counts the agent's tasks (threads and processes)
  # in the sandbox and fails fork/clone beyond it with EAGAIN. 0 = 1/64 of min(pid_max,
  # threads-max), between 128 and 4096 (512 with pid_max 32768).
  maxHostTasks @8 :UInt32 = 0;
  # Host pids cgroup limit on the sandbox's host tasks (sentry and gofer threads and, under
  # ptrace, stub processes and threads, many per sandboxed task). Reaching it ends the sandbox:
  # the sentry cannot create a thread. 0 = a fifth of serviceLimits.maxHostTasks, at least
  # 1024 (3276 with pid_max 32768).
  tools @9 :List(ToolMount);
  # Tool directories mounted read-only in every sandbox of this profile, in this order at the
  # front of every process's PATH (before the client's PATH, or the default one).
  homePath @10 :Text = "/home/agent";
  # The agent's home inside the sandbox: a tmpfs of homeBytes owned by the run-as uid:gid
  # (mode 0700), $HOME of every process whose environment sets none, and the home of the
  # sandbox's /etc/passwd entry for that uid. Kept across pause/resume and restarts that keep
  # the sandbox; gone with it. Credentials and workspaces may be placed beneath it.
  homeBytes @11 :UInt64 = 268435456;
  # Size of the home tmpfs (sandbox memory: it counts against memoryLimitBytes as it fills).
  network @12 :NetworkPolicy;
  secrets @13 :List(SecretUse);
  # Secrets its sandboxes get placeholders for (decision 59). Needs network mode "sandbox" and
  # the egress proxy; each secret's hosts must be allowed by `network.allowNames`.
  # What the sandbox may reach (default: nothing but its own loopback).
}

enum NetworkMode {
  none @0;
  # runsc --network=none: loopback only, inside gVisor.
  sandbox @1;
  # gVisor's own network stack on a veth in a namespace the privhelper makes per sandbox: egress
  # only to what the policy allows (enforced by nftables on the host side), DNS only through the
  # supervisor's resolver, nothing inbound but connections a client asks for (Sandbox.connect).
}

struct NetworkPolicy {
  mode @0 :NetworkMode = none;
  allowCidrs @1 :List(CidrRule);
  # Destinations reachable by address.
  allowNames @2 :List(NameRule);
  # Names the supervisor's resolver answers; the IPv4 addresses it returns for one are reachable
  # on that rule's ports for the answer's TTL (at least 30 s, at most 1 day), from this sandbox
  # only. Other names get NXDOMAIN; IPv6 (AAAA) answers are always empty.
  inboundPorts @3 :List(UInt16);
  # Ports inside the sandbox a client of the sandbox may connect to through Sandbox.connect.
  # Nothing else reaches the sandbox; no host port is ever opened for it.
}

struct CidrRule {
  cidr @0 :Text;
  # "203.0.113.0/24" or "203.0.113.7" (IPv4 only).
  ports @1 :List(UInt16);
  # TCP and UDP destination ports; empty = every port.
}

struct NameRule {
  name @0 :Text;
  # "api.anthropic.com" (exactly that name) or "*.example.com" (any name below example.com, not
  # example.com itself). Lower case; compared case-insensitively.
  ports @1 :List(UInt16);
  # TCP and UDP destination ports; empty = every port.
}

struct CredentialRoot {
  # A credential directory a deployment may hand to its agents (for example ~/.claude).
  name @0 :Text;
  # The handle clients use; an id ([a-z0-9-]).
  hostPath @1 :Text;
  # Normalized absolute host directory with no symlink in it.
}

struct CredentialMount {
  name @0 :Text;
  destination @1 :Text;
  # Fixed absolute destination inside the sandbox.
  writable @2 :Bool = false;
  # Read-only unless set (some agents refresh tokens in place).
}

struct ToolRoot {
  # A directory of programs a deployment makes available, read-only, inside its sandboxes.
  # Resolved at every create like a workspace (privhelper/workspace_resolver.h ResolveTool):
  # no symlink anywhere in it, no mount crossed beneath a workspace root.
  name @0 :Text;
  # The name profiles place it by; an id ([a-z0-9-]).
  hostPath @1 :Text;
  # Normalized absolute host directory with no symlink in it. Exactly one of hostPath and
  # clientPath is set.
  clientPath @2 :Text;
  # For a Docker deployment: the directory as the client's container sees it, mapped through
  # the deployment's workspaceRoots exactly like a workspace path the client sends (it must
  # lie beneath one of their clientPaths).
}

struct ToolMount {
  name @0 :Text;
  # A ToolRoot name; every deployment that may use this profile must register it.
  destination @1 :Text;
  # Fixed absolute destination inside the sandbox; also what goes on PATH.
}
