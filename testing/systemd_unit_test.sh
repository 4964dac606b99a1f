#!/usr/bin/env bash
# systemd-analyze verify accepts the units (the service with ExecStart pointed at the built
# privhelper, since verify checks that the executable exists; the socket it requires beside it).
set -euo pipefail
unit_src="$1"
privhelper="$(realpath "$2")"
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
out=$(systemd-analyze verify "$tmp/paseo-sandbox.socket" "$tmp/paseo-sandbox.service" 2>&1) ||
  { echo "$out"; exit 1; }
# verify prints warnings without failing for some problems: treat any mention of our units as one.
if echo "$out" | grep -q "paseo-sandbox\.\(service\|socket\)"; then echo "$out"; exit 1; fi
echo "systemd-analyze verify: OK"
