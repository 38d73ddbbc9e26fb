#!/usr/bin/env bash
# Regenerates fakeapi's protobuf schema (fakeapi/proto/) from the Kubernetes Go modules.
#
# Usage: hack/fakeapi-proto.sh
#
# Copies the `generated.proto` files of the groups fakeapi serves from the Go module cache
# (downloading k8s.io/api, apimachinery and apiextensions-apiserver at the version below through
# the Go module proxy when missing), and writes fakeapi/proto/gojson.json: the JSON names,
# omitempty, omitzero and pointer-ness of every field, read from the Go types by hack/fakeapi-proto/main.go.
# fakeapi/build.rs compiles the .proto files (protox) into the descriptor set it embeds.
set -euo pipefail

# Keep in step with hack/kube/build.sh (the Kubernetes the real-apiserver tests run).
version=v0.35.8

root="$(cd "$(dirname "$0")/.." && pwd)"
tool="$root/hack/fakeapi-proto"
dest="$root/fakeapi/proto"
export GOFLAGS=-mod=mod

dir_of() { (cd "$tool" && go mod download -json "$1@$version" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'); }
api="$(dir_of k8s.io/api)"
machinery="$(dir_of k8s.io/apimachinery)"
extensions="$(dir_of k8s.io/apiextensions-apiserver)"

copy() {
  local from=$1 to=$2
  mkdir -p "$(dirname "$dest/$to")"
  install -m 0644 "$from" "$dest/$to"
}

rm -rf "$dest/k8s.io"
for group in core/v1 apps/v1 coordination/v1 events/v1 rbac/v1 authentication/v1; do
  copy "$api/$group/generated.proto" "k8s.io/api/$group/generated.proto"
done
for pkg in apis/meta/v1 runtime runtime/schema util/intstr api/resource; do
  copy "$machinery/pkg/$pkg/generated.proto" "k8s.io/apimachinery/pkg/$pkg/generated.proto"
done
copy "$extensions/pkg/apis/apiextensions/v1/generated.proto" \
  "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1/generated.proto"
(cd "$tool" && go run . "$version") >"$dest/gojson.json"
echo "fakeapi-proto: wrote $dest from Kubernetes $version" >&2
