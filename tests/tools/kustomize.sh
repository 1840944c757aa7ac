#!/usr/bin/env bash
# Build the pinned kustomize from the Go module proxy into a cache directory
# outside the working tree (like tests/controlplane/build.sh). The tests render
# manifests/ with it and compare with `icache manifests` (one source of truth: the
# kustomization; the Python renderer must agree with kustomize or a test fails).
#
# Usage: tests/tools/kustomize.sh            # build if needed, print the binary path
#        tests/tools/kustomize.sh --print    # print the binary path, build nothing
#
# Cache: ${ICACHE_KUSTOMIZE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-cache/kustomize/<version>-<go>}
# Only the binary path is printed on stdout; progress goes to stderr.
set -euo pipefail

KUSTOMIZE_VERSION="v5.7.1"

command -v go >/dev/null 2>&1 || { echo "kustomize.sh: go is not on PATH" >&2; exit 1; }
go_version="$(go env GOVERSION)"
cache_dir="${ICACHE_KUSTOMIZE_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/inference-cache/kustomize/${KUSTOMIZE_VERSION}-${go_version}}"
bin="${cache_dir}/bin/kustomize"

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
echo "kustomize.sh: building kustomize ${KUSTOMIZE_VERSION} with ${go_version} into ${cache_dir}/bin" >&2
# `go install pkg@version` resolves the module's own go.mod (pinned dependencies),
# outside any workspace.
(cd "$tmp_out" && CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOBIN="$tmp_out" \
    go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kustomize/kustomize/v5@${KUSTOMIZE_VERSION}")
mkdir -p "${cache_dir}/bin"
mv "${tmp_out}/kustomize" "$bin"
echo "kustomize.sh: done in $(( $(date +%s) - start ))s" >&2
echo "$bin"
