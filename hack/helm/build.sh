#!/usr/bin/env bash
# Builds (or reuses) helm from its Go module for the chart checks (hack/chart-check, konnector/tests/chart.rs).
#
# Usage: hack/helm/build.sh            build helm when missing, print where it is
#        hack/helm/build.sh --env      also print an `export KBIND_HELM=path` line on stdout (for eval)
#
# The binary lives outside the repo:
#   ${KBIND_TOOLS_CACHE:-$HOME/.cache/kbind-tools}/helm-<version>/helm
# The folder counts as built only when its `.sha256` marker matches the binary in it; anything else is rebuilt.
# Only the Go module proxy is needed: the wrapper module under hack/helm/wrapper/ pins every version and go.sum.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache="${KBIND_TOOLS_CACHE:-$HOME/.cache/kbind-tools}"

# Keep in step with hack/helm/wrapper/go.mod and konnector/tests/chart.rs.
helm_version=v3.22.0
# The Kubernetes version helm assumes for `.Capabilities.KubeVersion` and lint, as helm's Makefile derives it
# from its client-go (v0.37.x -> 1.37).
k8s_major=1
k8s_minor=37

print_env=false
[[ "${1:-}" == "--env" ]] && print_env=true

log() { echo "helm/build: $*" >&2; }

# The tool folder is reusable when its marker names the binary's current checksum.
is_built() {
  local dir=$1 name=$2
  [[ -x "$dir/$name" && -f "$dir/.sha256" ]] || return 1
  (cd "$dir" && sha256sum --quiet --check .sha256 >/dev/null 2>&1)
}

# The flags helm's own Makefile sets for a tagged release build.
helm_ldflags() {
  local x="-s -w"
  x+=" -X helm.sh/helm/v3/internal/version.version=$helm_version"
  x+=" -X helm.sh/helm/v3/internal/version.metadata="
  x+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    x+=" -X $pkg.k8sVersionMajor=$k8s_major -X $pkg.k8sVersionMinor=$k8s_minor"
  done
  echo "$x"
}

# Why: this build shares 2 cores with other developers' Rust builds, so it runs niced; helm releases are
# built without cgo, and so is this one.
build_into_cache() {
  local dir=$1 scratch
  scratch="$(mktemp -d "$cache/.build.XXXXXX")"
  (cd "$here/wrapper" && CGO_ENABLED=0 nice -n 10 go build -mod=readonly -trimpath -ldflags "$(helm_ldflags)" \
    -o "$scratch/helm" helm.sh/helm/v3/cmd/helm)
  rm -rf "$dir"
  mkdir -p "$dir"
  mv "$scratch/helm" "$dir/helm"
  (cd "$dir" && sha256sum helm > .sha256)
  rm -rf "$scratch"
}

free_gib() { df -P --block-size=1G "$1" | awk 'NR == 2 { print $4 }'; }

# Why: the Go caches are shared with hack/kube/build.sh and run to several GiB; keep the disk usable for others.
report_disk() {
  local gomodcache gocache
  gomodcache="$(go env GOMODCACHE)"
  gocache="$(go env GOCACHE)"
  log "disk: GOMODCACHE $(du -sh "$gomodcache" 2>/dev/null | cut -f1), GOCACHE $(du -sh "$gocache" 2>/dev/null | cut -f1)"
  if (($(free_gib "$cache") < 10)); then
    log "free disk below 10 GiB: cleaning GOMODCACHE ($gomodcache) and GOCACHE ($gocache)"
    go clean -modcache
    go clean -cache
  fi
}

main() {
  mkdir -p "$cache"
  local dir="$cache/helm-$helm_version" start
  start=$(date +%s)
  if is_built "$dir" helm; then
    log "warm: helm present ($(($(date +%s) - start))s)"
  else
    log "building helm $helm_version"
    build_into_cache "$dir"
    log "cold build took $(($(date +%s) - start))s"
    report_disk
  fi
  log "$(du -sh "$dir/helm" | cut -f1) $dir/helm ($("$dir/helm" version --short))"
  if $print_env; then
    echo "export KBIND_HELM=$dir/helm"
  fi
}

main
