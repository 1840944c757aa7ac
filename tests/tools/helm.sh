#!/usr/bin/env bash
# The pinned helm the chart tests run `helm lint` / `helm template` with; built from
# the Go module proxy and cached outside the tree (tests/tools/go-tool.sh).
#
# Usage: tests/tools/helm.sh [--print]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HELM_VERSION="v3.21.4"
exec bash "${here}/go-tool.sh" helm helm.sh/helm/v3/cmd/helm "$HELM_VERSION" "$@"
