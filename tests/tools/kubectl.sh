#!/usr/bin/env bash
# Build the pinned kubectl from the Go module proxy into a cache directory outside
# the working tree (like tests/controlplane/build.sh and kustomize.sh). The README
# test runs the laptop steps, as written, with it on PATH.
#
# Usage: tests/tools/kubectl.sh            # build if needed, print the binary path
#        tests/tools/kubectl.sh --print    # print the binary path, build nothing
#
# Cache: ${ICACHE_KUBECTL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-cache/kubectl/<version>-<hash>}
# where <hash> covers go.mod, go.sum, main.go and the Go toolchain version.
# Only the binary path is printed on stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/kubectl" && pwd)"
cd "$here"
command -v go >/dev/null 2>&1 || { echo "kubectl.sh: go is not on PATH" >&2; exit 1; }

kubectl_module="$(awk '$1 == "k8s.io/kubectl" && $2 ~ /^v/ { print $2; exit }' go.mod)"
# k8s.io/kubectl v0.X.Y is Kubernetes v1.X.Y.
version="v1.${kubectl_module#v0.}"
major="1"
minor="${version#v1.}"; minor="${minor%%.*}"
version_pkg="k8s.io/component-base/version"
ldflags="-s -w -X ${version_pkg}.gitVersion=${version} -X ${version_pkg}.gitMajor=${major} -X ${version_pkg}.gitMinor=${minor} -X ${version_pkg}.gitTreeState=clean"
go_version="$(go env GOVERSION)"
hash="$( { cat go.mod go.sum main.go; echo "$go_version|$ldflags"; } | sha256sum | cut -c1-12)"
cache_dir="${ICACHE_KUBECTL_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/inference-cache/kubectl/${version}-${hash}}"
bin="${cache_dir}/bin/kubectl"

if [[ "${1:-}" == "--print" ]]; then
    echo "$bin"
    exit 0
fi
if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache_dir"
# Serialise concurrent builds (make and the pytest fixture may both ask).
exec 9>"${cache_dir}/.lock"
flock 9
if [[ -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

# Build into a scratch dir and move into place, so a killed build never leaves a
# binary that looks complete.
tmp_out="$(mktemp -d "${cache_dir}/.build.XXXXXX")"
trap 'rm -rf "$tmp_out"' EXIT
start=$(date +%s)
echo "kubectl.sh: building kubectl ${version} with ${go_version} into ${cache_dir}/bin" >&2
CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod -buildvcs=false" \
    go build -trimpath -ldflags "$ldflags" -o "${tmp_out}/kubectl" .
mkdir -p "${cache_dir}/bin"
mv "${tmp_out}/kubectl" "$bin"
echo "kubectl.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$bin"
