#!/usr/bin/env bash
# installer/install into a throwaway root (--root): lists every file before the install, after
# it and after the uninstall; checks what is installed and how (modes, the runsc pin, the
# manifest covers every file), that a second run changes nothing, that an upgrade replaces
# binaries and keeps the operator's config, and that --uninstall leaves exactly what was there
# before (config only with --keep-config; users and group only those it created).
#   testing/installer_test.sh INSTALLER PRIVHELPER BROKER SHIM CLIENT RUNTIME
set -euo pipefail
installer=$(realpath -s "$1")
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/installer_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/bin
mkdir -p "$bin"
shift
for b in "$@"; do cp "$b" "$bin/"; done

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# A root with a users database of its own (useradd --root writes there) and one ordinary user.
D=$tmp/root
mkdir -p "$D/etc" "$D/home/alice"
printf 'root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n' > "$D/etc/passwd"
printf 'root:x:0:\nalice:x:1000:\n' > "$D/etc/group"
printf 'root:*:19000:0:99999:7:::\nalice:*:19000:0:99999:7:::\n' > "$D/etc/shadow"
printf 'root:*::\nalice:!::\n' > "$D/etc/gshadow"
chmod 0640 "$D/etc/shadow" "$D/etc/gshadow"
# The backups and lock shadow's tools leave are part of any real /etc; make them exist before.
for f in passwd group shadow gshadow; do cp -p "$D/etc/$f" "$D/etc/$f-"; done
: > "$D/etc/.pwd.lock"

# Every path under the root: type, mode, owner, size, and the content hash of regular files
# (the shadow tools' backups change content by design and are compared by name only).
snapshot() {
  (cd "$D" && find . -mindepth 1 -printf '%p %y %m %U:%G %s %l\n' | LC_ALL=C sort) |
    sed -E 's#^(\./etc/[a-z]+-|\./etc/\.pwd\.lock) .*#\1#'
  (cd "$D" && find . -type f ! -name '*-' ! -name .pwd.lock -print0 | xargs -0r sha256sum | LC_ALL=C sort -k2)
}
# With inode and mtime: a run that rewrote a file with the same bytes shows here. (Not the
# mtime of directories: the rootfs build stages in a temporary directory it then removes.)
snapshot_exact() {
  (cd "$D" && find . -mindepth 1 ! -type d -printf '%p %i %T@ %m %U:%G %s\n' -o -printf '%p %i %m %U:%G\n' |
     LC_ALL=C sort)
}
run() { "$installer" --root "$D" --bin-dir "$bin" "$@"; }

before=$(snapshot)

# --- install -----------------------------------------------------------------------------
out=$(run --user alice 2>&1) || { echo "$out"; fail "install failed"; }
echo "$out"
L=/usr/libexec/paseo-sandbox
for f in $L/paseo-sandbox-privhelper $L/paseo-sandbox-broker $L/paseo-sandbox-shim $L/runsc \
         /usr/bin/paseo-sandbox /usr/bin/paseo-sandbox-runtime /usr/sbin/paseo-sandbox-admin; do
  [ "$(stat -c '%F %a %U:%G' "$D$f")" = "regular file 755 root:root" ] || fail "$f: $(stat -c '%F %a %U:%G' "$D$f")"
done
cmp -s "$bin/paseo-sandbox-privhelper" "$D$L/paseo-sandbox-privhelper" || fail "privhelper differs from the build"
# shellcheck source=../installer/runsc-pin
. "$(dirname "$installer")/runsc-pin"
cmp -s "$RUNSC_DIR/runsc" "$D$L/runsc" || fail "the pinned runsc is not a copy of $RUNSC_DIR/runsc"
[ "$(sha256sum "$D$L/runsc" | cut -c1-64)" = "$(eval echo "\${RUNSC_SHA256_$(dpkg --print-architecture)}")" ] ||
  fail "the installed runsc is not the tree's pin (installer/runsc-pin)"
[ "$(jq -r .runsc.platform "$D/etc/paseo-sandbox/helper.json")" = auto ] || fail "runsc.platform is not auto"
for f in /etc/paseo-sandbox/helper.json /etc/paseo-sandbox/README /etc/systemd/system/paseo-sandbox.service \
         /etc/systemd/system/paseo-sandbox.socket \
         /etc/paseo-sandbox/deployments/alice.json /usr/share/doc/paseo-sandbox/running.md; do
  [ "$(stat -c '%F %a %U:%G' "$D$f")" = "regular file 644 root:root" ] || fail "$f: $(stat -c '%F %a %U:%G' "$D$f")"
done
helper=$D/etc/paseo-sandbox/helper.json
[ "$(jq -r .runsc.path "$helper")" = "$L/runsc" ] || fail "runsc.path"
[ "$(jq -r .runsc.sha256 "$helper")" = "$(sha256sum "$D$L/runsc" | cut -c1-64)" ] || fail "runsc.sha256 is not the pinned copy's"
version=$(jq -r .rootfsVersion "$helper")
[ -f "$D/var/lib/paseo-sandbox/rootfs/$version/rootfs/bin/busybox" ] || fail "rootfs $version not built"
"$D$L/paseo-sandbox-privhelper" --config-dir "$D/etc/paseo-sandbox" --check-config | grep -q "configuration OK" ||
  fail "the installed privhelper refuses the installed config"
[ "$(jq -c '{allowedUids, workspaceRoots, runAs}' "$D/etc/paseo-sandbox/deployments/alice.json")" = \
  '{"allowedUids":[1000],"workspaceRoots":[{"hostPath":"/home/alice"}],"runAs":{"uid":1000,"gid":1000}}' ] ||
  fail "alice's deployment: $(cat "$D/etc/paseo-sandbox/deployments/alice.json")"
grep -q '^paseo-sandbox:x:[0-9]*:alice$' "$D/etc/group" || fail "group paseo-sandbox with member alice: $(cat "$D/etc/group")"
grep -q '^paseo-sandbox:x:[0-9]*:[0-9]*::/nonexistent:/usr/sbin/nologin$' "$D/etc/passwd" || fail "user paseo-sandbox"
[ "$(readlink "$D/etc/systemd/system/multi-user.target.wants/paseo-sandbox.service")" = \
  /etc/systemd/system/paseo-sandbox.service ] || fail "the unit is not enabled"
[ "$(readlink "$D/etc/systemd/system/sockets.target.wants/paseo-sandbox.socket")" = \
  /etc/systemd/system/paseo-sandbox.socket ] || fail "the socket unit is not enabled"
grep -q "not starting anything" <<<"$out" || fail "did not say it started nothing under --root"
# The manifest names every file the install added outside the state directory, and every
# directory it made (uninstall works from it alone).
manifest=$D/var/lib/paseo-sandbox/install-manifest
added=$(diff <(echo "$before" | awk '/^\.\// && $2 != "" {print $1, $2}') \
             <(snapshot | awk '/^\.\// && $2 != "" {print $1, $2}') | sed -n 's/^> //p' || true)
while read -r path type; do
  p=${path#.}
  case "$p" in /var/lib/paseo-sandbox/*|/etc/paseo-sandbox/deployments/*) continue ;; esac
  case "$type" in
    f) grep -qxF "file	$p" "$manifest" || fail "$p was installed but is not in the manifest" ;;
    d) grep -qxF "dir	$p" "$manifest" || grep -qxF "wants-dir	$p" "$manifest" ||
         grep -qxF "socket-wants-dir	$p" "$manifest" ||
         fail "directory $p was made but is not in the manifest" ;;
  esac
done <<<"$added"
pass "install: binaries, pinned runsc, rootfs, config, user and group, unit, manifest"

# --- idempotency -------------------------------------------------------------------------
exact=$(snapshot_exact)
out=$(run --user alice 2>&1) || { echo "$out"; fail "second install failed"; }
grep -q "nothing to do" <<<"$out" || { echo "$out"; fail "a second run did not say it had nothing to do"; }
[ "$(snapshot_exact)" = "$exact" ] || { diff <(echo "$exact") <(snapshot_exact) || true; fail "a second run changed files"; }
pass "a second run changes nothing and says so"

# --- upgrade -----------------------------------------------------------------------------
# A new build of the CLI and a new runsc, while helper.json is still the installer's: both are
# replaced and the pin follows.
printf 'x' >> "$bin/paseo-sandbox"
cp "$RUNSC_DIR/runsc" "$tmp/runsc-new"; printf 'x' >> "$tmp/runsc-new"
out=$(run --runsc "$tmp/runsc-new" 2>&1) || { echo "$out"; fail "upgrade failed"; }
cmp -s "$bin/paseo-sandbox" "$D/usr/bin/paseo-sandbox" || fail "upgrade did not replace the CLI"
cmp -s "$tmp/runsc-new" "$D$L/runsc" || fail "upgrade did not replace the pinned runsc"
[ "$(jq -r .runsc.sha256 "$helper")" = "$(sha256sum "$tmp/runsc-new" | cut -c1-64)" ] || fail "the pin did not follow"
# The operator edits helper.json and adds a deployment and a profile: an upgrade keeps them,
# and keeps the runsc copy their pin names.
jq '.onRestart = "keep"' "$helper" > "$tmp/h" && cat "$tmp/h" > "$helper"
printf '{"id": "extra", "allowedGids": [1000], "workspaceRoots": [{"hostPath": "/home/alice"}], "runAs": {"uid": 1000, "gid": 1000}}\n' \
  > "$D/etc/paseo-sandbox/deployments/extra.json"
printf '{"name": "big", "tmpfsBytes": 134217728}\n' > "$D/etc/paseo-sandbox/profiles/big.json"
config_before=$(cd "$D/etc/paseo-sandbox" && find . -type f -print0 | xargs -0 sha256sum | LC_ALL=C sort -k2)
printf 'y' >> "$bin/paseo-sandbox-broker"
out=$(run 2>&1) || { echo "$out"; fail "upgrade over an edited config failed"; }
grep -q "kept /etc/paseo-sandbox/helper.json" <<<"$out" || { echo "$out"; fail "did not say it kept helper.json"; }
cmp -s "$bin/paseo-sandbox-broker" "$D$L/paseo-sandbox-broker" || fail "upgrade did not replace the broker"
cmp -s "$tmp/runsc-new" "$D$L/runsc" || fail "upgrade replaced the runsc the operator's pin names"
[ "$(cd "$D/etc/paseo-sandbox" && find . -type f -print0 | xargs -0 sha256sum | LC_ALL=C sort -k2)" = "$config_before" ] ||
  fail "upgrade changed the config"
pass "upgrade replaces binaries, keeps the operator's config and its runsc pin"

# --- uninstall --keep-config -----------------------------------------------------------------
# A file the installer did not put there survives, with its directory.
echo mine > "$D$L/operator-notes"
out=$(run --uninstall --keep-config 2>&1) || { echo "$out"; fail "uninstall --keep-config failed"; }
[ -f "$D$L/operator-notes" ] || fail "uninstall removed a file it did not install"
rm "$D$L/operator-notes"; rmdir "$D$L" "$D/usr/libexec" "$D/usr"
[ "$(cd "$D/etc/paseo-sandbox" && find . -type f -print0 | xargs -0 sha256sum | LC_ALL=C sort -k2)" = "$config_before" ] ||
  fail "--keep-config did not keep the config"
after=$(snapshot | grep -v '^\./etc/paseo-sandbox' | grep -v ' \./etc/paseo-sandbox/')
[ "$after" = "$before" ] || { diff <(echo "$before") <(echo "$after") || true; fail "uninstall --keep-config left more than the config"; }
pass "uninstall --keep-config leaves the config and nothing else"

# --- reinstall over the kept config, then a full uninstall ----------------------------------
out=$(run --user alice 2>&1) || { echo "$out"; fail "reinstall failed"; }
grep -q "kept /etc/paseo-sandbox/helper.json" <<<"$out" || { echo "$out"; fail "reinstall rewrote the kept helper.json"; }
grep -q '^paseo-sandbox:x:[0-9]*:alice$' "$D/etc/group" || fail "reinstall: group and membership"
out=$(run --uninstall 2>&1) || { echo "$out"; fail "uninstall failed"; }
echo "$out"
after=$(snapshot)
[ "$after" = "$before" ] || { diff <(echo "$before") <(echo "$after") || true; fail "uninstall left something behind"; }
out=$(run --uninstall 2>&1) || fail "a second uninstall failed"
grep -q "nothing to uninstall" <<<"$out" || fail "a second uninstall did not say there was nothing to do"
pass "uninstall leaves exactly what was there before (files, passwd, group, shadow, gshadow)"

# --- --metrics: the timer writing node_exporter's textfile, kept by later runs, removed ------
before=$(snapshot)
T=/var/lib/prometheus/node-exporter
U=/etc/systemd/system
if out=$(run --metrics=relative/dir 2>&1); then fail "--metrics took a relative directory"; fi
grep -q "an absolute directory" <<<"$out" || { echo "$out"; fail "did not say why --metrics=relative/dir was refused"; }
out=$(run --user alice --metrics 2>&1) || { echo "$out"; fail "install --metrics failed"; }
for f in $U/paseo-sandbox-metrics.service $U/paseo-sandbox-metrics.timer; do
  [ "$(stat -c '%F %a %U:%G' "$D$f")" = "regular file 644 root:root" ] || fail "$f: $(stat -c '%F %a %U:%G' "$D$f" 2>&1)"
  grep -qxF "file	$f" "$D/var/lib/paseo-sandbox/install-manifest" || fail "$f is not in the manifest"
done
grep -qx "ReadWritePaths=$T" "$D$U/paseo-sandbox-metrics.service" && grep -q "^ExecStart=.* --textfile-dir $T$" "$D$U/paseo-sandbox-metrics.service" || fail "the metrics service does not name $T"
[ "$(readlink "$D$U/timers.target.wants/paseo-sandbox-metrics.timer")" = $U/paseo-sandbox-metrics.timer ] ||
  fail "the metrics timer is not enabled"
[ -d "$D$T" ] || fail "$T was not made"
echo 'paseo_sandbox_up 1' > "$D$T/paseo_sandbox.prom"
echo 'node_other 1' > "$D$T/other.prom"
out=$(run --user alice 2>&1) || { echo "$out"; fail "a run without --metrics failed"; }
grep -q "nothing to do" <<<"$out" || { echo "$out"; fail "a run without --metrics changed the metrics install"; }
out=$(run --user alice --metrics=/srv/metrics 2>&1) || { echo "$out"; fail "install --metrics=/srv/metrics failed"; }
grep -qx "ReadWritePaths=/srv/metrics" "$D$U/paseo-sandbox-metrics.service" && ! grep -q /var/lib/prometheus "$D$U/paseo-sandbox-metrics.service" || fail "the directory did not follow --metrics=DIR"
[ ! -e "$D$T/paseo_sandbox.prom" ] || fail "the old directory's paseo_sandbox.prom was left behind"
echo 'paseo_sandbox_up 1' > "$D/srv/metrics/paseo_sandbox.prom"
out=$(run --user alice --no-metrics 2>&1) || { echo "$out"; fail "install --no-metrics failed"; }
for f in $U/paseo-sandbox-metrics.service $U/paseo-sandbox-metrics.timer $U/timers.target.wants/paseo-sandbox-metrics.timer \
         /srv/metrics/paseo_sandbox.prom; do
  [ ! -e "$D$f" ] && [ ! -L "$D$f" ] || fail "--no-metrics left $f"
done
! grep -q "metrics" "$D/var/lib/paseo-sandbox/install-manifest" || fail "--no-metrics left metrics in the manifest"
[ -f "$D$T/other.prom" ] || fail "another collector's file was removed"
out=$(run --user alice --metrics 2>&1) || { echo "$out"; fail "install --metrics again failed"; }
echo 'paseo_sandbox_up 1' > "$D$T/paseo_sandbox.prom"
out=$(run --uninstall 2>&1) || { echo "$out"; fail "uninstall with metrics failed"; }
[ ! -e "$D$T/paseo_sandbox.prom" ] || fail "uninstall left $T/paseo_sandbox.prom"
[ -f "$D$T/other.prom" ] || fail "uninstall removed another collector's file"
# node_exporter's directory (another collector's file in it) kept /var/lib from going.
rm -f "$D$T/other.prom"; rmdir "$D$T" "$D/var/lib/prometheus" "$D/var/lib" "$D/var" "$D/srv/metrics" "$D/srv" 2>/dev/null || true
[ "$(snapshot)" = "$before" ] || { diff <(echo "$before") <(snapshot) || true; fail "uninstall after --metrics left something behind"; }
pass "--metrics installs and enables the timer for DIR, later runs keep it, --no-metrics and --uninstall remove it and the file"
# --- users and group that existed before are not the installer's to remove ---------------
printf 'paseo-sandbox:x:990:\n' >> "$D/etc/group"
printf 'paseo-sandbox:x:990:990::/nonexistent:/usr/sbin/nologin\n' >> "$D/etc/passwd"
before=$(snapshot)
run --no-start >/dev/null 2>&1 || fail "install with an existing user failed"
grep -q '^user	' "$D/var/lib/paseo-sandbox/install-manifest" && fail "recorded a user it did not create"
run --uninstall >/dev/null 2>&1 || fail "uninstall failed"
[ "$(snapshot)" = "$before" ] || fail "uninstall removed a user or group it had not created"
pass "an existing user and group are kept"
# --- an install that stops half-way can still be undone -----------------------------------
sed -i '/^paseo-sandbox:/d' "$D/etc/passwd" "$D/etc/group"
before=$(snapshot)
mv "$bin/paseo-sandbox-broker" "$tmp/broker.away"
if out=$(run 2>&1); then fail "an install without the broker succeeded"; fi
grep -q "missing .*paseo-sandbox-broker" <<<"$out" || { echo "$out"; fail "did not name the missing binary"; }
grep -q '^paseo-sandbox:' "$D/etc/group" || fail "expected the group to be made before the binaries were checked"
run --uninstall >/dev/null 2>&1 || fail "uninstall after a failed install"
[ "$(snapshot)" = "$before" ] || { diff <(echo "$before") <(snapshot) || true; fail "a failed install left something uninstall did not remove"; }
mv "$tmp/broker.away" "$bin/paseo-sandbox-broker"
pass "a failed install is listed in the manifest and undone by --uninstall"
# --- a manifest naming paths outside the installer's own is refused (review of issue 15) ---
run >/dev/null 2>&1 || fail "reinstall before the tampered-manifest case"
echo "keep me" > "$tmp/sentinel"
printf 'file\t/../sentinel\n' >> "$D/var/lib/paseo-sandbox/install-manifest"
if out=$(run --uninstall 2>&1); then fail "uninstall went on with a manifest naming /../sentinel"; fi
grep -q "not a path this installer makes" <<<"$out" || { echo "$out"; fail "did not say why it refused"; }
[ -f "$tmp/sentinel" ] || fail "the tampered manifest made uninstall remove a file outside the root"
[ -f "$D/usr/libexec/paseo-sandbox/paseo-sandbox-privhelper" ] || fail "a refused uninstall removed files"
sed -i '/\/\.\.\/sentinel/d' "$D/var/lib/paseo-sandbox/install-manifest"
run --uninstall >/dev/null 2>&1 || fail "uninstall after the manifest was restored"
pass "a manifest entry outside the installer's paths is refused before anything is removed"
# --- a --root someone else can write is refused -----------------------------------------------
mkdir -m 0777 "$tmp/open-root"
if out=$("$installer" --root "$tmp/open-root" --bin-dir "$bin" 2>&1); then fail "installed into a world-writable root"; fi
grep -q "must be owned by root and writable by no one else" <<<"$out" || { echo "$out"; fail "did not say why"; }
pass "a --root writable by others is refused"
echo "installer_test: all passed"
