#!/usr/bin/env bash
# systemd-analyze verify accepts the units (the service with ExecStart pointed at the built
# privhelper, since verify checks that the executable exists; the socket it requires beside it),
# and the --metrics timer with its oneshot service (ExecStart pointed at the built admin).
set -euo pipefail
unit_src="$1"
privhelper="$(realpath "$2")"
admin="$(realpath "$3")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s|/usr/libexec/paseo-sandbox/paseo-sandbox-privhelper|$privhelper|" "$unit_src" \
  > "$tmp/paseo-sandbox.service"
cp "$(dirname "$unit_src")/paseo-sandbox.socket" "$tmp/paseo-sandbox.socket"
grep -q "^Requires=paseo-sandbox.socket$" "$tmp/paseo-sandbox.service"
grep -q "^ListenStream=/run/paseo-sandbox/supervisor.sock$" "$tmp/paseo-sandbox.socket"
grep -q "^SocketMode=0660$" "$tmp/paseo-sandbox.socket"
grep -q "^Type=notify$" "$tmp/paseo-sandbox.service"
grep -q "^Restart=on-failure$" "$tmp/paseo-sandbox.service"
grep -q '^ExecReload=/bin/kill -HUP \$MAINPID$' "$tmp/paseo-sandbox.service"
# The bounding set is the privhelper's serving set, no more and no fewer (capabilities.cc names
# each as "cap_...").
unit_caps=$(sed -n 's/^CapabilityBoundingSet=//p' "$tmp/paseo-sandbox.service" | tr ' ' '\n' |
            tr 'A-Z' 'a-z' | sort | paste -sd' ')
serving_caps=$(grep -o '{CAP_[A-Z_]*, "cap_[a-z_]*"' "$4" | cut -d'"' -f2 | sort | paste -sd' ')
[ -n "$serving_caps" ] && [ "$unit_caps" = "$serving_caps" ] ||
  { echo "CapabilityBoundingSet ($unit_caps) is not the serving set ($serving_caps)"; exit 1; }
grep -q "^NoNewPrivileges=yes$" "$tmp/paseo-sandbox.service"
# A stop keeps sandboxes under onRestart keep (decision 61): the privhelper's own stop signal,
# and systemd kills nothing else of the unit's.
grep -q "^KillSignal=SIGUSR2$" "$tmp/paseo-sandbox.service"
grep -q "^KillMode=process$" "$tmp/paseo-sandbox.service"
sed "s|/usr/sbin/paseo-sandbox-admin|$admin|" "$(dirname "$unit_src")/paseo-sandbox-metrics.service" \
  > "$tmp/paseo-sandbox-metrics.service"
cp "$(dirname "$unit_src")/paseo-sandbox-metrics.timer" "$tmp/paseo-sandbox-metrics.timer"
# The installer writes the --metrics directory in place of the default; the command and the one
# writable path both name it.
grep -q '^ExecStart=.* metrics --textfile-dir /var/lib/prometheus/node-exporter$' "$tmp/paseo-sandbox-metrics.service"
grep -q '^ReadWritePaths=/var/lib/prometheus/node-exporter$' "$tmp/paseo-sandbox-metrics.service"
grep -q "^CapabilityBoundingSet=$" "$tmp/paseo-sandbox-metrics.service"
grep -q "^Type=oneshot$" "$tmp/paseo-sandbox-metrics.service"
grep -q "^WantedBy=timers.target$" "$tmp/paseo-sandbox-metrics.timer"
out=$(systemd-analyze verify "$tmp/paseo-sandbox.socket" "$tmp/paseo-sandbox.service" \
        "$tmp/paseo-sandbox-metrics.timer" "$tmp/paseo-sandbox-metrics.service" 2>&1) ||
  { echo "$out"; exit 1; }
# verify prints warnings without failing for some problems: treat any mention of our units as one.
if echo "$out" | grep -q "paseo-sandbox\(-metrics\)\?\.\(service\|socket\|timer\)"; then echo "$out"; exit 1; fi
echo "systemd-analyze verify: OK"
# The hardening's score (docs/operations.md "The unit's hardening"): no worse than documented.
for pair in paseo-sandbox.service:7.8 paseo-sandbox-metrics.service:0.9; do
  u=${pair%%:*} most=${pair#*:}
  score=$(systemd-analyze security --offline=yes --no-pager "$tmp/$u" 2>&1 |
          sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
  [ -n "$score" ] || { systemd-analyze security --offline=yes --no-pager "$tmp/$u"; exit 1; }
  awk -v s="$score" -v m="$most" 'BEGIN { exit !(s <= m) }' ||
    { echo "systemd-analyze security $u: $score, worse than the documented $most"; exit 1; }
  echo "systemd-analyze security $u: $score"
done
