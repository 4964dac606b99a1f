#!/usr/bin/env bash
# installer/install end to end, into the real FHS paths but inside a private mount namespace:
# /etc, /usr/bin, /usr/sbin, /usr/libexec and /usr/share/doc are overlays whose upper layer is a
# tmpfs, /var/lib, /run and /home are empty tmpfs mounts, so the host's files and users are
# never touched. It installs, starts the installed privhelper directly (no systemd here), runs a
# sandbox through the installed socket as a throwaway user the installer put in the group (and
# checks a user outside the group is refused), runs paseo-sandbox-admin, uninstalls, and
# compares listings of files, users and groups, mounts and cgroups from before and after.
#   testing/installer_e2e_test.sh INSTALLER PRIVHELPER BROKER SHIM CLIENT RUNTIME
# Every step that waits on the service is bounded, and a failure prints the privhelper's log.
# For debugging, PASEO_E2E_HOLD=FILE (--test_env) makes a failure write the test's pid to FILE
# and wait 20 minutes, so its mount namespace can be entered (nsenter -m -t PID) and looked at.
set -euo pipefail
PATH=$PATH:/usr/sbin:/sbin   # useradd, userdel (Bazel's test PATH has no sbin)
if [ -z "${PASEO_INSTALL_E2E_INNER:-}" ]; then
  exec unshare --mount --propagation private env PASEO_INSTALL_E2E_INNER=1 "$0" "$@"
fi
installer=$(realpath -s "$1")
shift
fail() {
  echo "FAIL: $*" >&2
  if [ -n "${PASEO_E2E_HOLD:-}" ]; then echo "$$" > "$PASEO_E2E_HOLD"; sleep 1200; fi
  if [ -r /var/lib/paseo-sandbox/privhelper.log ]; then
    echo "--- the privhelper's log, its last 80 lines" >&2
    tail -n 80 /var/lib/paseo-sandbox/privhelper.log >&2
  fi
  exit 1
}
pass() { echo "ok: $*"; }

scratch=$(mktemp -d "${TEST_TMPDIR:-/tmp}/installer_e2e.XXXXXX")
mount -t tmpfs -o mode=0700 tmpfs "$scratch"
mkdir "$scratch/bin"
for b in "$@"; do cp "$b" "$scratch/bin/"; done
n=0
for d in /etc /usr/bin /usr/sbin /usr/libexec /usr/share/doc; do
  n=$((n + 1))
  mkdir -p "$scratch/ovl/$n/upper" "$scratch/ovl/$n/work"
  mount -t overlay overlay -o "lowerdir=$d,upperdir=$scratch/ovl/$n/upper,workdir=$scratch/ovl/$n/work" "$d"
done
for d in /var/lib /run /home; do mount -t tmpfs -o mode=0755 tmpfs "$d"; done

# The installed service uses the default cgroup parent; nothing else may hold it meanwhile. An
# empty one is what a run killed before its uninstall left (a service whose sandboxes run has
# them beneath it): removed, as the uninstaller would have.
cgroup_parents() { ls -d /sys/fs/cgroup/paseo-sandbox /sys/fs/cgroup/*/paseo-sandbox 2>/dev/null || true; }
for cg in $(cgroup_parents); do
  if find "$cg" -mindepth 1 -type d | grep -q .; then
    fail "$cg holds sandboxes: another paseo-sandbox service runs on this machine"
  fi
  rmdir "$cg" || fail "$cg exists and cannot be removed: another paseo-sandbox service runs on this machine"
done
# (exactly the installed directories: other services on the machine -- the harness's, whose
# sandboxes mount e.g. <run>/paseo-sandbox-shim, and their paseo-it-* cgroups -- are not ours)
state_mounts() { cat /proc/[0-9]*/mountinfo 2>/dev/null | grep -E -e '/var/lib/paseo-sandbox(/| |$)' -e '/run/paseo-sandbox(/| |$)' | sort -u || true; }
listing() {
  echo "== files"
  find /etc /usr/bin /usr/sbin /usr/libexec /usr/share/doc /var/lib /run /home -xdev \
    ! -path /etc/.pwd.lock ! -name 'passwd-' ! -name 'group-' ! -name 'shadow-' ! -name 'gshadow-' \
    ! -name 'subuid-' ! -name 'subgid-' \( -type d -printf '%p %y %m %U:%G\n' -o -printf '%p %y %m %U:%G %s\n' \) \
    2>/dev/null | LC_ALL=C sort
  # (the shadow tools' backups are made by useradd and userdel on any system; a directory's
  # size is its filesystem's: an overlay's copied-up directory reports the tmpfs's)
  sha256sum /etc/passwd /etc/group /etc/shadow /etc/gshadow /etc/subuid /etc/subgid 2>/dev/null || true
  echo "== users and groups"
  getent passwd | LC_ALL=C sort
  getent group | LC_ALL=C sort
  echo "== mounts (this namespace, and any namespace's under the state or run directory)"
  awk '{print $5, $9}' /proc/self/mountinfo | LC_ALL=C sort
  state_mounts
  echo "== cgroups"
  find /sys/fs/cgroup -maxdepth 3 -type d \( -name 'paseo-sandbox*' -o -name 'sb-*' \) ! -path '*/paseo-it-*' 2>/dev/null | LC_ALL=C sort
}
before=$(listing)

# A throwaway user the installer will put in the group, and one it will not.
user=paseo-e2e-$$
outsider=paseo-e2e-out-$$
useradd -M -l -U -d "/home/$user" -s /bin/sh "$user"
useradd -M -l -U -d "/home/$outsider" -s /bin/sh "$outsider"
install -d -m 0755 -o "$user" -g "$user" "/home/$user"
helper_pid=""
cleanup() {
  if [ -n "$helper_pid" ] && kill -0 "$helper_pid" 2>/dev/null; then
    kill -TERM "$helper_pid"
    for _ in $(seq 600); do kill -0 "$helper_pid" 2>/dev/null || break; sleep 0.1; done
  fi
  # (a failed run leaves no cgroup parent for the next: the clean stop emptied it)
  for cg in $(cgroup_parents); do rmdir "$cg" 2>/dev/null || true; done
}
trap cleanup EXIT

# --- install -------------------------------------------------------------------------------
out=$("$installer" --bin-dir "$scratch/bin" --user "$user" 2>&1) || { echo "$out"; fail "install failed"; }
echo "$out"
grep -q "systemd is not running here" <<<"$out" || fail "the installer did not say it skipped systemd"
grep -q "added $user to group paseo-sandbox" <<<"$out" || fail "the user was not added to the group"
id -nG "$user" | grep -qw paseo-sandbox || fail "$user is not in group paseo-sandbox"
# Without systemd the installer starts the privhelper itself (in a session of its own, its log
# in the state directory): the installed service, serving the installed socket.
grep -q "started the privhelper (pid" <<<"$out" || fail "the installer did not start the service"
helper_pid=$(cat /run/paseo-sandbox/privhelper.pid)
[ "$(readlink "/proc/$helper_pid/exe")" = /usr/libexec/paseo-sandbox/paseo-sandbox-privhelper ] ||
  fail "the pid file does not name the installed privhelper"
[ -S /run/paseo-sandbox/supervisor.sock ] || { cat /var/lib/paseo-sandbox/privhelper.log; fail "no socket"; }
# Run again: nothing to do, and the running service is left alone.
again=$("$installer" --bin-dir "$scratch/bin" --user "$user" 2>&1) || { echo "$again"; fail "second install failed"; }
grep -q "nothing to do" <<<"$again" || { echo "$again"; fail "a second install changed something"; }
[ "$(cat /run/paseo-sandbox/privhelper.pid)" = "$helper_pid" ] || fail "a second install restarted the service"
[ "$(stat -c '%a %U:%G' /run/paseo-sandbox/supervisor.sock)" = "660 root:paseo-sandbox" ] || fail "socket mode/owner"

# Runs a command as a user; as_within, for a step that must end, fails a hang with the log
# instead of running into Bazel's timeout (124: timed out; 0 seconds: no bound).
as_within() {
  local seconds=$1 who=$2
  shift 2
  timeout --kill-after=5 "$seconds" setpriv --reuid="$who" --regid="$who" --init-groups env HOME="/home/$who" "$@"
}
as() { as_within 0 "$@"; }
out=$(cd "/home/$user" && as "$user" /usr/bin/paseo-sandbox run --workspace "/home/$user:/workspace:rw" -- \
        sh -c 'dmesg | head -1; echo "from gVisor" > /workspace/hello.txt; id -u' 2>&1) ||
  { echo "$out"; cat /var/lib/paseo-sandbox/privhelper.log; fail "a sandbox did not run for a user in the group"; }
echo "$out"
grep -q gVisor <<<"$out" || fail "the sandbox's kernel is not gVisor"
grep -qx "$(id -u "$user")" <<<"$out" || fail "the agent did not run as $user"
[ "$(stat -c %U "/home/$user/hello.txt")" = "$user" ] && [ "$(cat "/home/$user/hello.txt")" = "from gVisor" ] ||
  fail "the workspace write did not arrive on the host as $user"
pass "a sandbox runs through the installed socket as a user in the group"
if out=$(as "$outsider" /usr/bin/paseo-sandbox info 2>&1); then
  echo "$out"; fail "a user outside the group reached the service"
fi
pass "a user outside the group is refused at the socket ($(head -1 <<<"$out"))"

out=$(/usr/sbin/paseo-sandbox-admin gc 2>&1) || { echo "$out"; fail "paseo-sandbox-admin gc"; }
grep -q "$helper_pid" <<<"$out" || fail "gc did not reach privhelper $helper_pid: $out"
# The installed system checks out: doctor all green (a real sandbox on the chosen platform, the
# installed socket, the user's group membership, the installed rootfs).
out=$(/usr/sbin/paseo-sandbox-admin doctor --user "$user" 2>&1) || { echo "$out"; fail "paseo-sandbox-admin doctor is not all green"; }
echo "$out"
if grep -q FAIL <<<"$out"; then fail "doctor printed a FAIL"; fi
for check in kernel config runsc platform cgroup service socket "user $user" rootfs disk; do
  grep -q "^ok   $check: " <<<"$out" || fail "doctor did not pass its $check check"
done
pass "paseo-sandbox-admin doctor is all green on the installed system"
pass "paseo-sandbox-admin gc reaches the running privhelper"

# --- an upgrade with onRestart keep: agents' processes run on --------------------------------
# Ten processes in three sandboxes, each waiting for a file; an upgrade that changes the
# privhelper and broker binaries (onRestart keep: the old privhelper is SIGKILLed, its broker
# with it, and the new one reattaches every sandbox's spawner); then each process finishes with
# its own exit code and its output once.
jq '.onRestart = "keep"' /etc/paseo-sandbox/helper.json > "$scratch/helper.json"
cat "$scratch/helper.json" > /etc/paseo-sandbox/helper.json
sbs=()
for i in 0 1 2; do
  install -d -m 0755 -o "$user" -g "$user" "/home/$user/ws$i"
  id=$(as "$user" /usr/bin/paseo-sandbox create --workspace "/home/$user/ws$i:/workspace:rw" 2>"$scratch/create.err") ||
    { cat "$scratch/create.err"; fail "create sandbox $i"; }
  sbs+=("$id")
done
followers=()
for n in $(seq 0 9); do
  as "$user" /usr/bin/paseo-sandbox exec "${sbs[$((n % 3))]}" -- sh -c \
    "echo started-$n; while [ ! -e /workspace/go ]; do sleep 0.1; done; echo $n > /workspace/done-$n; exit $n" \
    > "$scratch/follow-$n" 2>&1 &
  followers+=($!)
done
for n in $(seq 0 9); do
  for _ in $(seq 1200); do grep -q "^started-$n\$" "$scratch/follow-$n" && break; sleep 0.1; done
  grep -q "^started-$n\$" "$scratch/follow-$n" || { cat "$scratch/follow-$n"; fail "process $n did not start"; }
done
mkdir "$scratch/bin2"
for b in "$scratch"/bin/*; do cp "$b" "$scratch/bin2/"; done
# A new build of the daemons (a byte appended: an ELF file still runs).
printf '\n' >> "$scratch/bin2/paseo-sandbox-privhelper"
printf '\n' >> "$scratch/bin2/paseo-sandbox-broker"
old_pid=$helper_pid
out=$("$installer" --bin-dir "$scratch/bin2" --user "$user" 2>&1) || { echo "$out"; fail "the upgrade failed"; }
echo "$out"
grep -q "stopped the privhelper (pid $old_pid) for the upgrade (onRestart keep)" <<<"$out" ||
  fail "the upgrade did not restart the service with keep"
helper_pid=$(cat /run/paseo-sandbox/privhelper.pid)
[ "$helper_pid" != "$old_pid" ] || fail "the privhelper was not replaced"
# Their connections went with the broker: each follower ends within seconds.
for pid in "${followers[@]}"; do
  for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && { kill -KILL "$pid"; fail "a follower's exec did not end with the old broker"; }
  wait "$pid" || true
done
for i in 0 1 2; do touch "/home/$user/ws$i/go"; done
ps_json=$(as_within 60 "$user" /usr/bin/paseo-sandbox --json ps) || fail "ps after the upgrade"
for n in $(seq 0 9); do
  sb=${sbs[$((n % 3))]}
  proc=$(jq -r --arg m "echo started-$n;" '.. | objects | select(has("argv")) | select((.argv | join(" ")) | contains($m)) | .id' <<<"$ps_json" | head -1)
  [ -n "$proc" ] || { echo "$ps_json"; fail "process $n is not listed after the upgrade"; }
  code=0
  waited=$(as_within 120 "$user" /usr/bin/paseo-sandbox wait "$sb" "$proc" 2>&1) || code=$?
  [ "$code" -eq "$n" ] || { echo "$waited"; as_within 30 "$user" /usr/bin/paseo-sandbox ps || true; fail "process $n ended with $code, not its own $n"; }
  [ "$(cat "/home/$user/ws$((n % 3))/done-$n")" = "$n" ] || fail "process $n did not finish its work"
  logged=$(as_within 60 "$user" /usr/bin/paseo-sandbox logs "$sb" "$proc") || fail "logs of process $n"
  [ "$logged" = "started-$n" ] || fail "process $n's output is not there exactly once: $logged"
done
for sb in "${sbs[@]}"; do as_within 120 "$user" /usr/bin/paseo-sandbox rm "$sb" >/dev/null || fail "rm $sb"; done
pass "ten processes in three sandboxes ran on through an upgrade with onRestart keep"

# --- uninstall (stops the privhelper through its pid file) ---------------------------------
out=$(timeout --kill-after=5 300 "$installer" --uninstall 2>&1) || { echo "$out"; fail "uninstall failed (124: it did not end within 300 s)"; }
echo "$out"
# (a zombie nobody reaped yet counts as gone: it is not our child)
if [ -r "/proc/$helper_pid/stat" ] && ! grep -qE '^[0-9]+ \(.*\) Z' "/proc/$helper_pid/stat"; then
  fail "the privhelper still runs after the uninstall"
fi
helper_pid=""
grep -q "removed cgroup" <<<"$out" || fail "the uninstaller did not remove the cgroup parent"
rm -rf "/home/${user:?}"
userdel "$user"
userdel "$outsider"
after=$(listing)
[ "$after" = "$before" ] || { diff <(echo "$before") <(echo "$after") || true; fail "uninstall left something behind"; }
pass "after uninstall: files, users and groups, mounts and cgroups are as before"
echo "installer_e2e_test: all passed"
