#!/usr/bin/env bash
# Build the real control plane the tests use from the Go module proxy, into a
# cache directory outside the working tree: etcd, kube-apiserver,
# kube-controller-manager and kube-scheduler (one Kubernetes module and
# version, go.mod here), and the kwok controller (its own module, kwok/go.mod)
# that plays the kubelet for fake nodes.
#
# Usage: tests/controlplane/build.sh            # build if needed, print the bin dir
#        tests/controlplane/build.sh --print    # print the bin dir, build nothing
#
# Next to bin/, kwok-stages/ holds kwok's default node and pod stages, copied
# from the same kwok release (the kwok binary has none built in).
#
# The cache directory is ${ICACHE_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-cache/controlplane/<key>}
# where <key> names the pinned versions plus a hash of both go.mod/go.sum pairs,
# the Go sources, the link flags and the Go toolchain version, so that changing
# any pin builds into a fresh directory. When every binary exists the build is
# skipped.
# Only the bin dir is printed on stdout; progress goes to stderr.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

command -v go >/dev/null 2>&1 || { echo "build.sh: go is not on PATH" >&2; exit 1; }

mod_version() { # $1 = module path; the version go.mod requires
    awk -v m="$1" '$1 == "require" { $1 = ""; $0 = $0 } $1 == m && $2 ~ /^v/ { print $2; exit }' go.mod
}
k8s_version="$(mod_version k8s.io/kubernetes)"
etcd_version="$(mod_version go.etcd.io/etcd/server/v3)"
kwok_version="$(cd kwok && mod_version sigs.k8s.io/kwok)"
[[ -n "$k8s_version" && -n "$etcd_version" && -n "$kwok_version" ]] || { echo "build.sh: cannot read versions from go.mod" >&2; exit 1; }

major="${k8s_version#v}"; major="${major%%.*}"
minor="${k8s_version#v*.}"; minor="${minor%%.*}"
version_pkg="k8s.io/component-base/version"
# Stamp the release into the binary so /version reports it (a module build
# otherwise says v0.0.0-master).
k8s_ldflags="-s -w -X ${version_pkg}.gitVersion=${k8s_version} -X ${version_pkg}.gitMajor=${major} -X ${version_pkg}.gitMinor=${minor} -X ${version_pkg}.gitTreeState=clean"
etcd_ldflags="-s -w"

go_version="$(go env GOVERSION)"
hash="$( { cat go.mod go.sum tools.go cmd/etcd/main.go kwok/go.mod kwok/go.sum kwok/tools.go; echo "$go_version|$k8s_ldflags|$etcd_ldflags"; } \
    | sha256sum | cut -c1-12)"
key="k8s-${k8s_version}-etcd-${etcd_version}-kwok-${kwok_version}-${hash}"
cache_dir="${ICACHE_CP_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/inference-cache/controlplane/${key}}"
bin_dir="${cache_dir}/bin"

if [[ "${1:-}" == "--print" ]]; then
    echo "$bin_dir"
    exit 0
fi

binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok)
stages_dir="${cache_dir}/kwok-stages"
# Where kwok's release keeps them (kustomize/stage/...), and the names the
# harness reads (tests/harness/kwok.py DEFAULT_STAGE_FILES).
stage_sources=(
    node/fast/node-initialize.yaml
    node/heartbeat-with-lease/node-heartbeat-with-lease.yaml
    pod/fast/pod-ready.yaml
    pod/fast/pod-complete.yaml
    pod/fast/pod-delete.yaml
)
have_binaries() {
    local name
    for name in "${binaries[@]}"; do [[ -x "${bin_dir}/${name}" ]] || return 1; done
    for name in "${stage_sources[@]}"; do [[ -s "${stages_dir}/$(basename "$name")" ]] || return 1; done
}

copy_kwok_stages() {
    local module_dir name tmp
    module_dir="$(cd kwok && go mod download sigs.k8s.io/kwok && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)"
    tmp="$(mktemp -d "${cache_dir}/.stages.XXXXXX")"
    for name in "${stage_sources[@]}"; do cp "${module_dir}/kustomize/stage/${name}" "$tmp/"; done
    chmod -R u+w,a+rX "$tmp"
    rm -rf "$stages_dir"
    mv "$tmp" "$stages_dir"
}

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

if [[ -x "${bin_dir}/kwok" ]]; then
    copy_kwok_stages
    if have_binaries; then
        echo "$bin_dir"
        exit 0
    fi
fi

start=$(date +%s)
echo "build.sh: building etcd ${etcd_version}, kube-apiserver, kube-controller-manager, kube-scheduler ${k8s_version} and kwok ${kwok_version} with ${go_version} into ${bin_dir}" >&2
go build -trimpath -ldflags "$etcd_ldflags" -o "${tmp_out}/etcd" ./cmd/etcd
for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
    go build -trimpath -ldflags "$k8s_ldflags" -o "${tmp_out}/${cmd}" "k8s.io/kubernetes/cmd/${cmd}"
done
(cd kwok && go build -trimpath -ldflags "-s -w" -o "${tmp_out}/kwok" sigs.k8s.io/kwok/cmd/kwok)
mkdir -p "$bin_dir"
for name in "${binaries[@]}"; do mv "${tmp_out}/${name}" "$bin_dir/"; done
copy_kwok_stages
echo "build.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$bin_dir"
