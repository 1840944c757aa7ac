#!/usr/bin/env bash
# The pinned kubectl the README test runs the laptop steps with, as written; built
# from the Go module proxy (the small module in tests/tools/kubectl/ pins k8s.io/kubectl)
# and cached outside the tree (tests/tools/go-tool.sh), with the release stamped in so
# `kubectl version` reports it.
#
# Usage: tests/tools/kubectl.sh [--print]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
kubectl_module="$(awk '$1 == "k8s.io/kubectl" && $2 ~ /^v/ { print $2; exit }' "${here}/kubectl/go.mod")"
# k8s.io/kubectl v0.X.Y is Kubernetes v1.X.Y.
version="v1.${kubectl_module#v0.}"
minor="${version#v1.}"; minor="${minor%%.*}"
version_pkg="k8s.io/component-base/version"
ldflags="-X ${version_pkg}.gitVersion=${version} -X ${version_pkg}.gitMajor=1 -X ${version_pkg}.gitMinor=${minor} -X ${version_pkg}.gitTreeState=clean"
exec bash "${here}/go-tool.sh" kubectl k8s.io/kubectl "$version" \
    --from-dir "${here}/kubectl" --ldflags "$ldflags" "$@"
