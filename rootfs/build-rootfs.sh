#!/usr/bin/env bash
# Builds, lists, verifies and removes the versioned sandbox root filesystems.
#
#   rootfs/build-rootfs --out DIR [--profile busybox|agent] [--arch amd64|arm64] [--rebuild]
#   rootfs/build-rootfs --out DIR --list
#   rootfs/build-rootfs --out DIR --verify VERSION
#   rootfs/build-rootfs --out DIR --remove VERSION
#
# DIR is usually <stateDir>/rootfs. A build leaves DIR/<version>/rootfs/ and
# DIR/<version>/manifest.json and prints the version alone on stdout (progress goes to stderr).
#   busybox (default)  busybox-static only, version busybox-<digest prefix> (rootfs/busybox/build)
#   agent              Debian bookworm minbase, Node 22, npm, claude, codex, opencode,
#                      version agent-<arch>-<digest prefix> (rootfs/agent/build)
# --verify builds VERSION again from the same recipe in a temporary directory and compares the
# digest with VERSION's manifest and every file with VERSION's tree; --remove refuses while a sandbox's overlay uses the version.
# (rootfs/build-rootfs is a symlink to this file: Bazel's target of that name cannot share it.)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out=""
profile=busybox
action=build
version=""
passthrough=()
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="$2"; shift 2 ;;
    --profile) profile="$2"; shift 2 ;;
    --arch|--busybox) passthrough+=("$1" "$2"); shift 2 ;;
    --rebuild) passthrough+=("$1"); shift ;;
    --list) action=list; shift ;;
    --verify|--remove) action="${1#--}"; version="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "build-rootfs: unknown argument: $1" >&2; exit 2 ;;
  esac
done
[ -n "$out" ] || { echo "build-rootfs: --out DIR is required" >&2; exit 2; }

die() { echo "build-rootfs: $*" >&2; exit 1; }

# Runs one profile's recipe; prints the version it built (or reused) on stdout.
build_profile() {
  local name=$1; shift
  case "$name" in
    busybox|agent) bash "$here/$name/build" "$@" ;;
    *) echo "build-rootfs: unknown profile: $name (busybox or agent)" >&2; return 2 ;;
  esac
}

# A version named on the command line: a plain id that exists under DIR.
check_version() {
  [[ "$1" =~ ^[a-z0-9-]{1,64}$ ]] || die "not a rootfs version: '$1'"
  [ -f "$out/$1/manifest.json" ] || die "no version $1 in $out"
}

# Whether any mount namespace on the machine has a mount that uses DIR/VERSION (a sandbox's
# overlay names it as lowerdir). The privhelper mounts in its own private namespace, so every
# process's mountinfo is read, once per namespace.
in_use() {
  local target="$out/$1/" seen=" " pid ns
  for pid in /proc/[0-9]*; do
    ns=$(readlink "$pid/ns/mnt" 2>/dev/null) || continue
    case "$seen" in *" $ns "*) continue ;; esac
    seen+="$ns "
    if grep -qsF -- "$target" "$pid/mountinfo"; then
      return 0
    fi
  done
  return 1
}

# "path<TAB>type mode uid:gid size target-or-sha256" for every entry of a tree, sorted: the
# per-file view of a digest, to name what differs between two builds.
file_list() {
  (
    cd "$1"
    find . -printf '%p\t%y %m %U:%G %s %l\n'
    find . -type f -print0 | xargs -0r sha256sum | sed -E 's|^([0-9a-f]{64})  (.*)$|\2\tsha256:\1|'
  ) | LC_ALL=C sort
}

list_versions() {
  local m v
  printf '%-36s %-8s %-6s %-20s %-7s %s\n' VERSION PROFILE ARCH DIGEST SIZE IN-USE
  for m in "$out"/*/manifest.json; do
    [ -f "$m" ] || continue
    v=$(basename "$(dirname "$m")")
    printf '%-36s %-8s %-6s %-20s %-7s %s\n' "$v" \
      "$(jq -r '.profile // "busybox"' "$m")" \
      "$(jq -r '.arch // "-"' "$m")" \
      "$(jq -r '.digest[0:19]' "$m")" \
      "$(du -sh "$out/$v" | cut -f1)" \
      "$(in_use "$v" && echo yes || echo no)"
  done
}

remove_version() {
  check_version "$version"
  if in_use "$version"; then
    die "$version is in use (a mount uses $out/$version); delete the sandboxes that use it first"
  fi
  # Renamed first, so nothing can start on a half-removed tree.
  local doomed
  doomed=$(mktemp -d "$out/.remove.XXXXXX")
  mv "$out/$version" "$doomed/"
  rm -rf "$doomed"
  echo "build-rootfs: removed $version" >&2
}

verify_version() {
  check_version "$version"
  local m="$out/$version/manifest.json" vprofile arch want got
  vprofile=$(jq -r '.profile // "busybox"' "$m")
  arch=$(jq -r '.arch // empty' "$m")
  want=$(jq -r '.digest' "$m")
  tmp=$(mktemp -d "$out/.verify.XXXXXX")  # global: the EXIT trap runs after this returns
  trap 'rm -rf "$tmp"' EXIT
  local args=(--out "$tmp")
  [ -z "$arch" ] || args+=(--arch "$arch")
  got=$(build_profile "$vprofile" "${args[@]}")
  local gotdigest
  gotdigest=$(jq -r '.digest' "$tmp/$got/manifest.json")
  if [ "$vprofile" = agent ] &&
     [ "$(jq -r .inputsKey "$m")" != "$(jq -r .inputsKey "$tmp/$got/manifest.json")" ]; then
    echo "build-rootfs: note: the inputs differ from $version's (recipe or mirror changed);" \
         "compare unpinned.debianMirror in the manifests" >&2
  fi
  # The rebuild must match the manifest, and the tree on disk must match the rebuild (a
  # changed file under DIR/VERSION would not change its manifest).
  local differing
  differing=$(diff <(file_list "$out/$version/rootfs") <(file_list "$tmp/$got/rootfs") |
    sed -n 's/^[<>] //p' | cut -f1 | LC_ALL=C sort -u)  || true  # diff exits 1 on differences
  if [ "$gotdigest" = "$want" ] && [ -z "$differing" ]; then
    echo "reproducible: $version $want"
    return 0
  fi
  echo "not reproducible: $version: manifest $want, rebuilt $gotdigest; paths that differ:"
  if [ -n "$differing" ]; then echo "$differing"; else echo "(every file matches: the manifest digest is wrong)"; fi
  return 1
}

mkdir -p "$out"
out=$(cd "$out" && pwd)
case "$action" in
  build) build_profile "$profile" --out "$out" "${passthrough[@]}" ;;
  list) list_versions ;;
  remove) remove_version ;;
  verify) verify_version ;;
esac
