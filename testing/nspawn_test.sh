#!/usr/bin/env bash
# The installed service under a real systemd: a Debian bookworm tree booted with systemd as PID 1
# (systemd-nspawn --boot, its own network namespace), in which installer/install --user runs and
# the units are driven as an operator would: socket activation, systemctl reload adding a
# deployment, systemctl restart under onRestart "keep", upgrades restarting per onRestart, the
# metrics timer, journalctl's lines, systemd-analyze security, and --uninstall.
#   testing/nspawn_test.sh INSTALLER PRIVHELPER BROKER EGRESS SHIM CLIENT RUNTIME ADMIN
# The tree (mmdebstrap, ~1 min the first time) is cached by its package list under
# /var/cache/paseo-sandbox/nspawn/; each run boots a fresh copy of it and deletes it after.
# The container gets every capability and no seccomp filter of nspawn's (runsc inside needs
# what the service needs on a host), and its cgroup v1 controllers writable: nspawn mounts them
# read-only, and the service bounds its sandboxes there. It runs in cgroups of its own.
set -euo pipefail
# (no `producer | grep -q` below: under pipefail the producer's SIGPIPE, when grep exits at the
# first match, fails the pipeline; outputs are captured first)
PATH=$PATH:/usr/sbin:/sbin
installer=$(realpath -s "$1")
shift
[ $# -eq 7 ] || { echo "usage: $0 INSTALLER PRIVHELPER BROKER EGRESS SHIM CLIENT RUNTIME ADMIN" >&2; exit 2; }
repo=$(cd "$(dirname "$installer")/.." && pwd -P)

fail() { echo "FAIL: $*" >&2; dump; exit 1; }
pass() { echo "ok: $*"; }
for tool in systemd-nspawn mmdebstrap nsenter; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not found (installer/install-deps installs it)" >&2; exit 1; }
done

# 1. The tree: bookworm with systemd, what installer/install uses, and the libraries the
# binaries link (ldd's answer, checked inside below).
packages=(systemd systemd-sysv dbus passwd jq iproute2 procps busybox-static
          libcapnp-0.9.2 libabsl20220623 libcap2 libssl3 libsystemd0 libnl-route-3-200
          libnftables1 libnetfilter-conntrack3)
key=$(printf '%s\n' bookworm "${packages[@]}" "$(mmdebstrap --version)" | sha256sum | cut -c1-16)
cache=/var/cache/paseo-sandbox/nspawn
tree=$cache/bookworm-systemd-$key
if [ ! -d "$tree" ]; then
  echo "building the systemd tree $tree (mmdebstrap)"
  mkdir -p "$cache"
  rm -rf "$tree.tmp"
  mmdebstrap --mode=root --format=directory --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
    --aptopt='Acquire::Languages "none"' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    bookworm "$tree.tmp" "deb http://deb.debian.org/debian bookworm main" >"$cache/build.log" 2>&1 ||
    { tail -20 "$cache/build.log" >&2; rm -rf "$tree.tmp"; echo "FAIL: mmdebstrap failed" >&2; exit 1; }
  rm -f "$tree.tmp/etc/machine-id"
  mv "$tree.tmp" "$tree"
fi

scratch=$(mktemp -d /var/tmp/paseo-nspawn.XXXXXX)
root=$scratch/root
nspawn_pid=""
leader=""
cgroups=()
cleanup() {
  if [ -n "$nspawn_pid" ] && kill -0 "$nspawn_pid" 2>/dev/null; then
    kill -TERM "$nspawn_pid"   # nspawn asks the container's systemd to halt
    for _ in $(seq 60); do kill -0 "$nspawn_pid" 2>/dev/null || break; sleep 1; done
    kill -KILL "$nspawn_pid" 2>/dev/null || true
  fi
  # Our own cgroups, deepest first (what the container's systemd left below them), after
  # anything still in them (a container that would not halt) is killed.
  for cg in "${cgroups[@]+"${cgroups[@]}"}"; do
    [ -d "$cg" ] || continue
    echo $$ > "$(dirname "$cg")/cgroup.procs" 2>/dev/null || true
  done
  for _ in 1 2 3 4 5; do
    left=$(for cg in "${cgroups[@]+"${cgroups[@]}"}"; do
             [ ! -d "$cg" ] || find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null || true
           done | sort -u || true)
    [ -n "$left" ] || break
    echo "killing what the container left: $(echo $left)" >&2
    kill -KILL $left 2>/dev/null || true
    sleep 1
  done
  for cg in "${cgroups[@]+"${cgroups[@]}"}"; do
    [ ! -d "$cg" ] || find "$cg" -depth -mindepth 0 -type d -exec rmdir {} + 2>/dev/null || true
    [ ! -d "$cg" ] || echo "could not remove $cg" >&2
  done
  rm -rf "$scratch"
}
trap cleanup EXIT
dump() {
  [ -n "$leader" ] || return 0
  echo "--- journalctl -u paseo-sandbox, its last 60 lines" >&2
  inside journalctl --no-pager -u paseo-sandbox -n 60 >&2 || true
}
# A command inside the container: every namespace of its PID 1, a clean environment.
inside() {
  nsenter -t "$leader" -a -- /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 "$@"
}
as_user() { local u=$1; shift; inside runuser -u "$u" -- "$@"; }

cp -a "$tree" "$root"
mkdir -p "$root/src/bin"
for b in "$@"; do cp "$b" "$root/src/bin/"; done
# The repository's files the installer reads, dereferenced (runfiles are symlinks).
for d in installer rootfs docs; do cp -rL "$repo/$d" "$root/src/$d"; done
[ -x "$root/src/installer/install" ] || fail "the installer was not copied"
runsc_dir=/usr/local/lib/paseo-sandbox/runsc
[ -d "$runsc_dir" ] || fail "$runsc_dir: no pinned runsc (installer/install-deps)"

# 2. Cgroups of the container's own (nspawn gives it a cgroup namespace rooted at ours).
v1=0
if [ "$(stat -f -c %T /sys/fs/cgroup)" = cgroup2fs ]; then
  cgroups=(/sys/fs/cgroup/paseo-nspawn-$$)
else
  v1=1
  for c in /sys/fs/cgroup/*/; do
    c=${c%/}
    # (Debian's cpu and cpuacct are symlinks to cpu,cpuacct: each hierarchy once)
    [ ! -L "$c" ] && [ -f "$c/cgroup.procs" ] || continue
    cgroups+=("$c/paseo-nspawn-$$")
  done
fi
for cg in "${cgroups[@]}"; do
  mkdir "$cg"
  # (a new v1 cpuset has no CPUs or memory nodes, and takes no process until given its parent's)
  for f in cpuset.cpus cpuset.mems; do
    [ ! -f "$cg/$f" ] || cat "$(dirname "$cg")/$f" > "$cg/$f"
  done
  echo $$ > "$cg/cgroup.procs"
done

# 3. Boot.
booted=$(date +%s%N)
SYSTEMD_SECCOMP=0 systemd-nspawn --quiet --directory="$root" --boot --register=no --keep-unit --private-network \
  --capability=all --console=passive --bind-ro="$runsc_dir" \
  >"$scratch/nspawn.log" 2>&1 &
nspawn_pid=$!
for _ in $(seq 100); do
  leader=$(pgrep -P "$nspawn_pid" -x systemd || true)
  [ -n "$leader" ] && break
  sleep 0.1
done
[ -n "$leader" ] || { cat "$scratch/nspawn.log" >&2; fail "the container's systemd did not start"; }
# (systemctl needs the manager's socket, made a moment after PID 1 starts)
for _ in $(seq 100); do inside test -S /run/systemd/private && break; sleep 0.1; done
state=$(inside timeout 120 systemctl is-system-running --wait 2>&1 || true)
[ "$state" = running ] || { inside systemctl --failed --no-pager >&2 || true; fail "the container's systemd is $state, not running"; }
pass "booted systemd as PID 1 in $(( ($(date +%s%N) - booted) / 1000000 )) ms"
if [ "$v1" = 1 ]; then
  for c in $(inside sh -c 'for m in /sys/fs/cgroup/*; do [ ! -L "$m" ] && [ -f "$m/cgroup.procs" ] && echo "$m"; done'); do
    inside mount -o remount,bind,rw "$c"
  done
fi
missing=$(inside sh -c 'for b in /src/bin/*; do ldd "$b" 2>/dev/null | grep "not found"; done' || true)
[ -z "$missing" ] || fail "libraries missing in the tree: $missing"

inside useradd --create-home --uid 1000 alice
inside useradd --create-home --uid 1001 bob
inside useradd --create-home --uid 1002 carol

# 4. installer/install under systemd: the units are enabled and started.
out=$(inside /src/installer/install --bin-dir /src/bin --user alice 2>&1) || { echo "$out"; fail "install failed"; }
for line in "enabled paseo-sandbox.socket" "enabled paseo-sandbox.service" "started paseo-sandbox.socket and paseo-sandbox.service"; do
  grep -qF "install: $line" <<<"$out" || { echo "$out"; fail "the installer did not say: $line"; }
done
for u in paseo-sandbox.socket paseo-sandbox.service; do
  [ "$(inside systemctl is-enabled "$u")" = enabled ] || fail "$u is not enabled"
  [ "$(inside systemctl is-active "$u")" = active ] || fail "$u is not active"
done
pass "installer/install --user alice enabled and started the socket and the service"

# 5. Socket activation: with the service stopped the socket unit listens, and the first
# connection starts the service, which serves the socket systemd passed it.
inside systemctl stop paseo-sandbox.service
[ "$(inside systemctl is-active paseo-sandbox.service)" = inactive ] || fail "the service did not stop"
[ "$(inside systemctl is-active paseo-sandbox.socket)" = active ] || fail "the socket unit stopped with the service"
[ "$(inside stat -c %F /run/paseo-sandbox/supervisor.sock)" = socket ] || fail "no socket while the service is stopped"
since=$(inside date '+%Y-%m-%d %H:%M:%S')
info=$(as_user alice timeout 120 paseo-sandbox info 2>&1) || { echo "$info"; fail "the first connection was not served"; }
grep -q "deployments: alice" <<<"$info" || { echo "$info"; fail "info: $info"; }
[ "$(inside systemctl is-active paseo-sandbox.service)" = active ] || fail "the connection did not start the service"
journal=$(inside journalctl --no-pager -u paseo-sandbox --since "$since")
grep -q "serving the socket systemd passed" <<<"$journal" ||
  fail "the started service did not serve systemd's socket"
pass "the socket unit listened with the service stopped, and the first connection started it"

out=$(as_user alice timeout 120 paseo-sandbox run --workspace /home/alice:rw -- sh -c 'echo made-in-sandbox > /workspace/f; id -u' 2>&1) ||
  { echo "$out"; fail "a sandbox did not run"; }
[ "$out" = 1000 ] || fail "run printed: $out"
[ "$(inside cat /home/alice/f)" = made-in-sandbox ] || fail "the sandbox's file is not in the workspace"
[ "$(inside stat -c %u /home/alice/f)" = 1000 ] || fail "the sandbox's file is not alice's"
pass "a sandbox ran under the unit's hardening (gVisor inside the booted container)"
# The unit's seccomp-based options (SystemCallArchitectures=, LockPersonality=,
# RestrictRealtime=) are inherited by runsc and the host processes that run the agents' code:
# a sandbox on the platform runsc.platform auto did not choose too.
chosen=$(inside journalctl --no-pager -u paseo-sandbox | sed -n 's/.*runsc platform: \([a-z]*\) .*/\1/p' | tail -1)
case "$chosen" in systrap) other=ptrace ;; ptrace) other=systrap ;; *) fail "no runsc platform in the journal" ;; esac
inside sh -c "jq '.runsc.platform = \"$other\"' /etc/paseo-sandbox/helper.json > /tmp/h && cat /tmp/h > /etc/paseo-sandbox/helper.json"
inside systemctl restart paseo-sandbox.service
out=$(as_user alice timeout 120 paseo-sandbox run --workspace /home/alice:rw -- sh -c 'cat /workspace/f; id -u' 2>&1) ||
  { echo "$out"; fail "a sandbox did not run on $other"; }
[ "$out" = "made-in-sandbox"$'\n'"1000" ] || fail "run on $other printed: $out"
journal=$(inside journalctl --no-pager -u paseo-sandbox)
grep -q "runsc platform: $other" <<<"$journal" || fail "the service did not run on $other"
inside sh -c "jq '.runsc.platform = \"auto\"' /etc/paseo-sandbox/helper.json > /tmp/h && cat /tmp/h > /etc/paseo-sandbox/helper.json"
inside systemctl restart paseo-sandbox.service
pass "a sandbox ran on $other too (auto chose $chosen)"

# 6. systemctl reload adds a deployment: the same process, now serving bob.
pid_before=$(inside systemctl show -P MainPID paseo-sandbox.service)
if as_user bob timeout 60 paseo-sandbox info >/dev/null 2>&1; then fail "bob was served before any deployment named him"; fi
inside usermod -aG paseo-sandbox bob
inside sh -c 'jq ".id = \"bob\" | .allowedUids = [1001] | .workspaceRoots = [{hostPath: \"/home/bob\"}] | .runAs = {uid: 1001, gid: 1001}" \
  /etc/paseo-sandbox/deployments/alice.json > /etc/paseo-sandbox/deployments/bob.json'
inside systemctl reload paseo-sandbox.service
ok=0
for _ in $(seq 50); do
  if grep -q "deployments: bob" <<<"$(as_user bob timeout 60 paseo-sandbox info 2>/dev/null || true)"; then ok=1; break; fi
  sleep 0.2
done
[ "$ok" = 1 ] || fail "after systemctl reload bob is not served"
[ "$(inside systemctl show -P MainPID paseo-sandbox.service)" = "$pid_before" ] || fail "reload restarted the service"
pass "systemctl reload added a deployment without a restart"

# 7. systemctl restart under onRestart "keep" keeps sandboxes and their processes.
inside sh -c 'jq ".onRestart = \"keep\"" /etc/paseo-sandbox/helper.json > /tmp/h && cat /tmp/h > /etc/paseo-sandbox/helper.json'
inside systemctl restart paseo-sandbox.service
sb=$(as_user alice timeout 120 paseo-sandbox create --workspace /home/alice:rw) || fail "create failed"
as_user alice timeout 120 paseo-sandbox exec --key ticker "$sb" -- sh -c 'i=0; while :; do i=$((i+1)); echo $i > /workspace/tick; sleep 0.2; done' \
  >/dev/null 2>&1 &
ticker_client=$!
for _ in $(seq 100); do inside test -s /home/alice/tick && break; sleep 0.1; done
inside test -s /home/alice/tick || fail "the sandbox's process did not start"
ticking() {  # the process inside still runs: its counter moves
  local a b
  a=$(inside cat /home/alice/tick); sleep 1; b=$(inside cat /home/alice/tick)
  [ "$a" != "$b" ]
}
pid_before=$(inside systemctl show -P MainPID paseo-sandbox.service)
inside systemctl restart paseo-sandbox.service
kill "$ticker_client" 2>/dev/null || true
[ "$(inside systemctl show -P MainPID paseo-sandbox.service)" != "$pid_before" ] || fail "restart kept the old process"
ps_out=$(as_user alice timeout 60 paseo-sandbox ps 2>&1) || { echo "$ps_out"; fail "ps after the restart failed"; }
grep -q "$sb" <<<"$ps_out" || { echo "$ps_out"; fail "the sandbox did not survive systemctl restart under keep"; }
ticking || fail "the sandbox's process stopped across systemctl restart under keep"
pass "systemctl restart under onRestart keep kept the sandbox and its running process"

# 8. An upgrade (new binaries) restarts the service per onRestart: keep keeps the sandbox,
# kill (the default) ends it (helper.json is read at start: the stopping privhelper still keeps
# it, and the new one, under kill, deletes what it finds).
mkdir "$root/src/bin2"
cp "$root"/src/bin/* "$root/src/bin2/"
printf '\n' >> "$root/src/bin2/paseo-sandbox-privhelper"
pid_before=$(inside systemctl show -P MainPID paseo-sandbox.service)
out=$(inside /src/installer/install --bin-dir /src/bin2 --user alice --user bob 2>&1) || { echo "$out"; fail "the upgrade failed"; }
grep -q "restarted paseo-sandbox.service" <<<"$out" || { echo "$out"; fail "the upgrade did not restart the service"; }
[ "$(inside systemctl show -P MainPID paseo-sandbox.service)" != "$pid_before" ] || fail "the upgrade kept the old process"
ps_out=$(as_user alice timeout 60 paseo-sandbox ps 2>&1) || { echo "$ps_out"; fail "ps after the upgrade failed"; }
grep -q "$sb" <<<"$ps_out" || fail "the upgrade under keep lost the sandbox"
ticking || fail "the sandbox's process stopped across the upgrade under keep"
pass "an upgrade under keep restarted the service and kept the sandbox"
inside sh -c 'jq ".onRestart = \"kill\"" /etc/paseo-sandbox/helper.json > /tmp/h && cat /tmp/h > /etc/paseo-sandbox/helper.json'
printf '\n' >> "$root/src/bin2/paseo-sandbox-privhelper"
out=$(inside /src/installer/install --bin-dir /src/bin2 --user alice --user bob 2>&1) || { echo "$out"; fail "the second upgrade failed"; }
grep -q "restarted paseo-sandbox.service" <<<"$out" || { echo "$out"; fail "the second upgrade did not restart the service"; }
ps_out=$(as_user alice timeout 60 paseo-sandbox ps 2>&1) || { echo "$ps_out"; fail "ps after the upgrade under kill failed"; }
if grep -q "$sb" <<<"$ps_out"; then fail "the upgrade under kill kept the sandbox"; fi
[ -z "$(inside pgrep -f 'runsc.*boot')" ] || fail "a sandbox's runsc still runs after the upgrade under kill"
pass "an upgrade under kill restarted the service and ended the sandbox"

# 9. The journal has the privhelper's, the broker's and the audit lines.
journal=$(inside journalctl --no-pager -u paseo-sandbox)
for tag in "paseo-sandbox-privhelper: serving" "paseo-sandbox-broker: serving" \
           '"operation":"Supervisor.createSandbox","deployment":"alice","sandboxId":"sb-' \
           '"uid":1001,' ; do
  grep -qF "$tag" <<<"$journal" || fail "journalctl -u paseo-sandbox has no line with $tag"
done
grep -q 'paseo-sandbox-audit: {' <<<"$journal" || fail "no audit lines in the journal"
pass "journalctl -u paseo-sandbox shows the privhelper's, the broker's and the audit lines"

# 10. The metrics timer writes node_exporter's textfile under its hardened oneshot unit.
out=$(inside /src/installer/install --bin-dir /src/bin2 --user alice --user bob --metrics 2>&1) || { echo "$out"; fail "install --metrics failed"; }
[ "$(inside systemctl is-active paseo-sandbox-metrics.timer)" = active ] || { echo "$out"; fail "the metrics timer is not active"; }
prom=/var/lib/prometheus/node-exporter/paseo_sandbox.prom
for _ in $(seq 60); do inside test -s "$prom" && break; sleep 0.5; done
inside grep -qx "paseo_sandbox_up 1" "$prom" ||
  { inside systemctl status --no-pager paseo-sandbox-metrics.service >&2 || true; fail "the timer did not write $prom with paseo_sandbox_up 1"; }
pass "paseo-sandbox-metrics.timer wrote $prom (paseo_sandbox_up 1)"

# 11. systemd-analyze security of the installed units (the scores docs/operations.md gives).
for u in paseo-sandbox.service paseo-sandbox-metrics.service; do
  score=$(inside systemd-analyze security --no-pager "$u" | sed -n 's/.*Overall exposure level for [^:]*: //p')
  [ -n "$score" ] || fail "systemd-analyze security $u gave no score"
  echo "systemd-analyze security $u: $score"
done
security=$(inside systemd-analyze security --no-pager paseo-sandbox.service || true)
grep -q "✓ CapabilityBoundingSet=~CAP_SYS_MODULE" <<<"$security" ||
  fail "the service's bounding set holds CAP_SYS_MODULE"

out=$(inside /src/installer/install --bin-dir /src/bin2 --user alice --user bob --no-metrics 2>&1) || { echo "$out"; fail "install --no-metrics failed"; }
grep -qF "install: stopped paseo-sandbox-metrics.timer" <<<"$out" && grep -qF "install: disabled paseo-sandbox-metrics.timer" <<<"$out" ||
  { echo "$out"; fail "--no-metrics did not stop and disable the timer"; }
inside test ! -e /etc/systemd/system/paseo-sandbox-metrics.timer || fail "--no-metrics left the timer's unit file"
inside test ! -e "$prom" || fail "--no-metrics left $prom"
pass "--no-metrics stopped, disabled and removed the timer and its file"

# 12. --uninstall stops and disables everything and removes the units; under keep too, where
# its SIGTERM deletes the running sandbox the unit's own stop would keep.
inside sh -c 'jq ".onRestart = \"keep\"" /etc/paseo-sandbox/helper.json > /tmp/h && cat /tmp/h > /etc/paseo-sandbox/helper.json'
inside systemctl restart paseo-sandbox.service
sb=$(as_user alice timeout 120 paseo-sandbox create --workspace /home/alice:rw) || fail "create before uninstall failed"
[ -n "$(inside pgrep -f 'runsc.*boot')" ] || fail "no runsc sandbox runs before uninstall"
out=$(inside timeout 300 /src/installer/install --uninstall 2>&1) || { echo "$out"; fail "uninstall failed"; }
grep -qF "stopped paseo-sandbox.service (SIGTERM: its sandboxes were deleted)" <<<"$out" || { echo "$out"; fail "uninstall did not stop the service with SIGTERM"; }
for u in paseo-sandbox.socket paseo-sandbox.service paseo-sandbox-metrics.timer; do
  state=$(inside systemctl is-active "$u" 2>&1 || true)
  [ "$state" = inactive ] || fail "$u is $state after uninstall"
done
[ -z "$(inside systemctl list-unit-files --no-legend 'paseo-sandbox*')" ] || fail "unit files are left after uninstall"
inside test ! -e /run/paseo-sandbox/supervisor.sock || fail "the socket is left after uninstall"
[ -z "$(inside pgrep -f 'paseo-sandbox-|runsc')" ] || fail "processes are left after uninstall: $(inside pgrep -af 'paseo-sandbox-|runsc')"
inside test ! -e "$prom" || fail "$prom is left after uninstall"
pass "--uninstall stopped and disabled the units and removed them"
echo "nspawn_test: all passed in $(( ($(date +%s%N) - booted) / 1000000000 )) s after the boot"
