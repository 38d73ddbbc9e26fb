#!/usr/bin/env bash
# Builds (or reuses) goclient, conformance run (4)'s client-go / controller-runtime program
# (conformance/tests/go_client.rs). A test tool, never product code.
#
# Usage: hack/goclient/build.sh            build goclient when missing or stale, print where it is
#        hack/goclient/build.sh --env      also print an `export KBIND_GOCLIENT=path` line on stdout (for eval)
#        hack/goclient/build.sh --sources-hash   only print the sources' hash (go_client.rs checks it is its own)
#
# The binary lives outside the repo:
#   ${KBIND_TOOLS_CACHE:-$HOME/.cache/kbind-tools}/goclient/goclient
# Its folder counts as built only when its `.sources` marker names the hash of the sources this
# script builds from (every *.go file, go.mod and go.sum here) and its `.sha256` marker matches the
# binary; anything else is rebuilt, so an edited case never runs as a stale binary.
# Only the Go module proxy is needed: go.mod and go.sum here pin every version.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${KBIND_TOOLS_CACHE:-$HOME/.cache/kbind-tools}"

print_env=false
[[ "${1:-}" == "--env" ]] && print_env=true

log() { echo "goclient/build: $*" >&2; }

# One hash over the sources, in a fixed order; conformance/tests/go_client.rs computes the same
# to refuse a stale binary (keep the two in step).
sources_hash() {
  (cd "$here" && for f in $(ls go.mod go.sum *.go | LC_ALL=C sort); do
    printf '%s %s\n' "$(sha256sum < "$f" | cut -d' ' -f1)" "$f"
  done) | sha256sum | cut -d' ' -f1
}

is_built() {
  local dir=$1 hash=$2
  [[ -x "$dir/goclient" && -f "$dir/.sha256" && -f "$dir/.sources" ]] || return 1
  [[ "$(cat "$dir/.sources")" == "$hash" ]] || return 1
  (cd "$dir" && sha256sum --quiet --check .sha256 >/dev/null 2>&1)
}

# Why: this build shares 2 cores with other developers' Rust builds, so it runs niced.
build_into_cache() {
  local dir=$1 hash=$2 scratch
  scratch="$(mktemp -d "$cache/.build.XXXXXX")"
  (cd "$here" && CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -o "$scratch/goclient" .)
  rm -rf "$dir"
  mkdir -p "$dir"
  mv "$scratch/goclient" "$dir/goclient"
  (cd "$dir" && sha256sum goclient > .sha256)
  echo "$hash" > "$dir/.sources"
  rm -rf "$scratch"
}

main() {
  mkdir -p "$cache"
  local dir="$cache/goclient" hash start
  hash="$(sources_hash)"
  start=$(date +%s)
  if is_built "$dir" "$hash"; then
    log "warm: goclient present for sources ${hash:0:12} ($(($(date +%s) - start))s)"
  else
    log "building goclient for sources ${hash:0:12}"
    build_into_cache "$dir" "$hash"
    log "cold build took $(($(date +%s) - start))s"
  fi
  log "$(du -sh "$dir/goclient" | cut -f1) $dir/goclient"
  if $print_env; then
    echo "export KBIND_GOCLIENT=$dir/goclient"
  fi
}

if [[ "${1:-}" == "--sources-hash" ]]; then
  sources_hash
  exit 0
fi
main
