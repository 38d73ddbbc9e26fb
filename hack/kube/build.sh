#!/usr/bin/env bash
# Builds (or reuses) kube-apiserver, kube-controller-manager and etcd from Go modules for the real-cluster tests.
#
# Usage: hack/kube/build.sh            build what is missing, print where the binaries are
#        hack/kube/build.sh --env      also print `export KBIND_...=path` lines on stdout (for eval)
#
# The binaries live outside the repo, one folder per tool and version:
#   ${KBIND_TOOLS_CACHE:-$HOME/.cache/kbind-tools}/<name>-<version>/<name>
# A folder counts as built only when its `.sha256` marker matches the binary in it; anything else is rebuilt.
# Only the Go module proxy is needed: the wrapper modules under hack/kube/wrapper/ pin every version and go.sum.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${KBIND_TOOLS_CACHE:-$HOME/.cache/kbind-tools}"

# Keep in step with hack/kube/wrapper/*/go.mod and tests/harness/src/binaries.rs.
kube_version=v1.35.8
etcd_version=v3.6.14

print_env=false
[[ "${1:-}" == "--env" ]] && print_env=true

log() { echo "kube/build: $*" >&2; }

# A tool folder is reusable when its marker names the binary's current checksum.
is_built() {
  local dir=$1 name=$2
  [[ -x "$dir/$name" && -f "$dir/.sha256" ]] || return 1
  (cd "$dir" && sha256sum --quiet --check .sha256 >/dev/null 2>&1)
}

# Why: these builds share 2 cores with other developers' Rust builds, so they run niced.
go_build() {
  local module_dir=$1 out=$2 ldflags=$3
  shift 3
  (cd "$module_dir" && nice -n 10 go build -mod=readonly -trimpath -ldflags "$ldflags" -o "$out" "$@")
}

# Builds the packages into a scratch folder, then moves each binary into its cache folder with its marker.
build_into_cache() {
  local module_dir=$1 version=$2 ldflags=$3
  shift 3
  local names=("$@") pkgs=() name
  local scratch
  scratch="$(mktemp -d "$cache/.build.XXXXXX")"
  for name in "${names[@]}"; do pkgs+=("$(pkg_of "$name")"); done
  if ((${#names[@]} == 1)); then
    # Why: a lone package is named explicitly; `go build -o dir/` would call etcd's `server`.
    go_build "$module_dir" "$scratch/${names[0]}" "$ldflags" "${pkgs[@]}"
  else
    go_build "$module_dir" "$scratch/" "$ldflags" "${pkgs[@]}"
  fi
  for name in "${names[@]}"; do
    local built="$scratch/$name"
    local dir="$cache/$name-$version"
    rm -rf "$dir"
    mkdir -p "$dir"
    mv "$built" "$dir/$name"
    (cd "$dir" && sha256sum "$name" > .sha256)
  done
  rm -rf "$scratch"
}

pkg_of() {
  case "$1" in
    kube-apiserver) echo k8s.io/kubernetes/cmd/kube-apiserver ;;
    kube-controller-manager) echo k8s.io/kubernetes/cmd/kube-controller-manager ;;
    etcd) echo go.etcd.io/etcd/server/v3 ;;
    *) log "unknown tool $1"; return 1 ;;
  esac
}

kube_ldflags() {
  local v=$kube_version minor
  minor="${v#v1.}"
  minor="${minor%%.*}"
  local x=""
  # Why: without these the apiserver reports v0.0.0-master from /version, which clients may check.
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  echo "-s -w$x"
}

free_gib() { df -P --block-size=1G "$1" | awk 'NR == 2 { print $4 }'; }

main() {
  mkdir -p "$cache"
  local missing_kube=() start cold=false
  start=$(date +%s)
  for name in kube-apiserver kube-controller-manager; do
    is_built "$cache/$name-$kube_version" "$name" || missing_kube+=("$name")
  done
  if ((${#missing_kube[@]})); then
    cold=true
    log "building ${missing_kube[*]} $kube_version"
    build_into_cache "$here/wrapper/kubernetes" "$kube_version" "$(kube_ldflags)" "${missing_kube[@]}"
  fi
  if ! is_built "$cache/etcd-$etcd_version" etcd; then
    cold=true
    log "building etcd $etcd_version"
    build_into_cache "$here/wrapper/etcd" "$etcd_version" "-s -w" etcd
  fi
  local took=$(($(date +%s) - start))
  if $cold; then
    log "cold build took ${took}s"
    # Why: the module and build caches of k8s.io/kubernetes run to several GiB; keep the disk usable for others.
    local gomodcache gocache
    gomodcache="$(go env GOMODCACHE)"
    gocache="$(go env GOCACHE)"
    log "disk: GOMODCACHE $(du -sh "$gomodcache" 2>/dev/null | cut -f1), GOCACHE $(du -sh "$gocache" 2>/dev/null | cut -f1), tools $(du -sh "$cache" | cut -f1)"
    if (($(free_gib "$cache") < 10)); then
      log "free disk below 10 GiB: cleaning GOMODCACHE ($gomodcache) and GOCACHE ($gocache)"
      go clean -modcache
      go clean -cache
    fi
  else
    log "warm: all binaries present (${took}s)"
  fi
  for name in kube-apiserver kube-controller-manager etcd; do
    local v=$kube_version
    [[ $name == etcd ]] && v=$etcd_version
    log "$(du -sh "$cache/$name-$v/$name" | cut -f1) $cache/$name-$v/$name"
  done
  if $print_env; then
    echo "export KBIND_KUBE_APISERVER=$cache/kube-apiserver-$kube_version/kube-apiserver"
    echo "export KBIND_KUBE_CONTROLLER_MANAGER=$cache/kube-controller-manager-$kube_version/kube-controller-manager"
    echo "export KBIND_ETCD=$cache/etcd-$etcd_version/etcd"
  fi
}

main
