#!/bin/bash
# The bench's `workload` scenario (bench.cc, Workload): what a coding agent does, run the same
# way natively (chroot into the agent rootfs) and inside a sandbox (exec into a kept one).
#
#   workload.sh DIR
#
# Works in DIR (under /workspace, made here, removed at the end) with the inputs the bench
# prepared in /workspace/.inputs: src.git (a bare repository of this project), head (its HEAD
# commit), npm-project (testing/conformance's package.json and lockfile) and npm-cache (npm's
# cache, filled on the host, so `npm ci --offline` needs no network). Each step is timed in
# this shell ($EPOCHREALTIME: the work itself, not how the shell was started) and checks its
# own result; prints "STEP <name> <ms>" and "RESULT <name> <value>" lines (the bench compares
# RESULTs across sides), and exits non-zero at the first step that did not do its work.
set -euo pipefail
dir=$1
inputs=/workspace/.inputs
export HOME=$dir.home LC_ALL=C PATH=/usr/local/bin:/usr/bin:/bin
mkdir -p "$dir" "$HOME"
cd "$dir"
trap 'cd /; rm -rf "$dir" "$HOME"' EXIT

step() {  # NAME FUNCTION
  local start=$EPOCHREALTIME
  "$2" || { echo "FAILED $1"; exit 1; }
  local end=$EPOCHREALTIME
  echo "STEP $1 $(( (${end/./} - ${start/./}) / 1000 ))"
}

spawns() {
  local i
  for ((i = 0; i < 300; i++)); do /bin/true; done
}
git_clone() {
  git clone -q --no-local "$inputs/src.git" clone &&
    [ "$(git -C clone rev-parse HEAD)" = "$(cat "$inputs/head")" ]
}
git_status() {
  local s
  s=$(git -C clone status --porcelain) && [ -z "$s" ]
}
git_log_stat() {
  local n
  n=$(git -C clone log --stat --oneline | wc -l) && [ "$n" -gt 100 ] && echo "RESULT git_log_lines $n"
}
ripgrep() {
  local n
  n=$(rg -l 'namespace paseo' clone | wc -l) && [ "$n" -gt 20 ] && echo "RESULT rg_files $n"
}
node_files() {
  node -e '
    const fs = require("fs");
    fs.mkdirSync("files");
    for (let i = 0; i < 2000; i++) fs.writeFileSync(`files/f${i}.txt`, `content of file ${i}\n`);
    let bytes = 0;
    for (let i = 0; i < 2000; i++) bytes += fs.readFileSync(`files/f${i}.txt`).length;
    for (let i = 0; i < 2000; i++) fs.unlinkSync(`files/f${i}.txt`);
    fs.rmdirSync("files");
    if (bytes !== 40890) { console.error("read " + bytes + " bytes"); process.exit(1); }'
}
npm_ci() {
  cp -r "$inputs/npm-project" npmp && cd npmp &&
    npm ci --offline --cache "$inputs/npm-cache" --ignore-scripts --no-audit --no-fund \
      --loglevel=error > /dev/null &&
    # Every package of the lockfile is installed.
    node -e '
      const fs = require("fs");
      const lock = require("./package-lock.json");
      const want = Object.keys(lock.packages).filter((k) => k !== "");
      const missing = want.filter((k) => !fs.existsSync(k + "/package.json"));
      if (want.length === 0 || missing.length > 0) { console.error("missing:", missing); process.exit(1); }
      console.log("RESULT npm_packages " + want.length);' && cd ..
}
node_starts() {
  local i
  for ((i = 0; i < 10; i++)); do node -e 0; done
}
python_starts() {
  local i
  for ((i = 0; i < 10; i++)); do python3 -c 0; done
}
tar_clone() {
  local n
  n=$(tar cf - clone | wc -c) && [ "$n" -gt 1000000 ] && echo "RESULT tar_bytes_over_1MB yes"
}

step spawns spawns
step git_clone git_clone
step git_status git_status
step git_log_stat git_log_stat
step ripgrep ripgrep
step node_files node_files
step npm_ci npm_ci
step node_starts node_starts
step python_starts python_starts
step tar_clone tar_clone
