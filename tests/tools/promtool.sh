#!/usr/bin/env bash
# The pinned promtool (Prometheus v3.x: module versions v0.3xx.y) the alert and
# dashboard tests run `promtool check rules` / `promtool test rules` with; built from
# the Go module proxy and cached outside the tree (tests/tools/go-tool.sh).
#
# Usage: tests/tools/promtool.sh [--print]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PROMTOOL_VERSION="v0.315.1"
# The prometheus go.mod carries a replace directive, so the package is built from
# inside the module (go-tool.sh --in-module), not with `go install pkg@version`.
# remove_all_sd leaves the cloud service-discovery plugins out (Prometheus's own
# build tag): the rule tests need none, and it cuts the build to a fraction.
exec bash "${here}/go-tool.sh" promtool github.com/prometheus/prometheus/cmd/promtool \
    "$PROMTOOL_VERSION" --in-module github.com/prometheus/prometheus --tags remove_all_sd "$@"
