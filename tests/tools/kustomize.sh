#!/usr/bin/env bash
# The pinned kustomize the tests compare `icache manifests` with, built from the Go
# module proxy and cached outside the working tree (tests/tools/go-tool.sh). The tests
# render manifests/ with it and compare with `icache manifests` (one source of truth:
# the kustomization; the Python renderer must agree with kustomize or a test fails).
#
# Usage: tests/tools/kustomize.sh            # build if needed, print the binary path
#        tests/tools/kustomize.sh --print    # print the binary path, build nothing
#
# Cache: ${ICACHE_KUSTOMIZE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-cache/kustomize/<version>-<go>}
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KUSTOMIZE_VERSION="v5.7.1"
exec bash "${here}/go-tool.sh" kustomize sigs.k8s.io/kustomize/kustomize/v5 "$KUSTOMIZE_VERSION" "$@"
