#!/usr/bin/env bash
# Build the real kube-apiserver and etcd used by the integration tests from the
# Go module proxy, into a cache directory outside the working tree.
#
# Usage: tests/controlplane/build.sh            # build if needed, print the bin dir
#        tests/controlplane/build.sh --print    # print the bin dir, build nothing
#
# The cache directory is ${ICACHE_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-cache/controlplane/<key>}
# where <key> names the pinned versions plus a hash of go.mod, go.sum, the Go
# sources, the link flags and the Go toolchain version, so that changing any pin
# builds into a fresh directory. When both binaries exist the build is skipped.
# Only the bin dir is printed on stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

command -v go >/dev/null 2>&1 || { echo "build.sh: go is not on PATH" >&2; exit 1; }

mod_version() { # $1 = module path; the version go.mod requires
    awk -v m="$1" '$1 == m && $2 ~ /^v/ { print $2; exit }' go.mod
}
k8s_version="$(mod_version k8s.io/kubernetes)"
etcd_version="$(mod_version go.etcd.io/etcd/server/v3)"
[[ -n "$k8s_version" && -n "$etcd_version" ]] || { echo "build.sh: cannot read versions from go.mod" >&2; exit 1; }

major="${k8s_version#v}"; major="${major%%.*}"
minor="${k8s_version#v*.}"; minor="${minor%%.*}"
version_pkg="k8s.io/component-base/version"
# Stamp the release into the binary so /version reports it (a module build
# otherwise says v0.0.0-master).
k8s_ldflags="-s -w -X ${version_pkg}.gitVersion=${k8s_version} -X ${version_pkg}.gitMajor=${major} -X ${version_pkg}.gitMinor=${minor} -X ${version_pkg}.gitTreeState=clean"
etcd_ldflags="-s -w"

go_version="$(go env GOVERSION)"
hash="$( { cat go.mod go.sum tools.go cmd/etcd/main.go; echo "$go_version|$k8s_ldflags|$etcd_ldflags"; } \
    | sha256sum | cut -c1-12)"
key="k8s-${k8s_version}-etcd-${etcd_version}-${hash}"
cache_dir="${ICACHE_CP_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/inference-cache/controlplane/${key}}"
bin_dir="${cache_dir}/bin"

if [[ "${1:-}" == "--print" ]]; then
    echo "$bin_dir"
    exit 0
fi

have_binaries() { [[ -x "${bin_dir}/kube-apiserver" && -x "${bin_dir}/etcd" ]]; }

if have_binaries; then
    echo "$bin_dir"
    exit 0
fi

mkdir -p "$cache_dir"
# Serialise concurrent builds (make test and the pytest fixture may both ask).
exec 9>"${cache_dir}/.lock"
flock 9
if have_binaries; then
    echo "$bin_dir"
    exit 0
fi

export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -mod=mod -buildvcs=false"
# Build into a scratch dir and move into place, so a killed build never leaves
# a binary that looks complete.
tmp_out="$(mktemp -d "${cache_dir}/.build.XXXXXX")"
trap 'rm -rf "$tmp_out"' EXIT

start=$(date +%s)
echo "build.sh: building etcd ${etcd_version} and kube-apiserver ${k8s_version} with ${go_version} into ${bin_dir}" >&2
go build -trimpath -ldflags "$etcd_ldflags" -o "${tmp_out}/etcd" ./cmd/etcd
go build -trimpath -ldflags "$k8s_ldflags" -o "${tmp_out}/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
mkdir -p "$bin_dir"
mv "${tmp_out}/etcd" "${tmp_out}/kube-apiserver" "$bin_dir/"
echo "build.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$bin_dir"
