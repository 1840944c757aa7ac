#!/usr/bin/env bash
# The Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule, ...), pinned: fetched
# from the Go module proxy into the Go module cache (outside the working tree) and the
# directory holding them printed. The tests install them in the test API server to
# validate the monitoring bundle against the operator's real schemas.
#
# Usage: tests/tools/prometheus-operator-crds.sh     # prints .../example/prometheus-operator-crd
set -euo pipefail

PROMETHEUS_OPERATOR_VERSION="v0.85.0"
MODULE="github.com/prometheus-operator/prometheus-operator"

command -v go >/dev/null 2>&1 || { echo "prometheus-operator-crds.sh: go is not on PATH" >&2; exit 1; }
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
dir="$(cd "$scratch" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "${MODULE}@${PROMETHEUS_OPERATOR_VERSION}" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
crds="${dir}/example/prometheus-operator-crd"
[[ -d "$crds" ]] || { echo "prometheus-operator-crds.sh: no CRDs at ${crds}" >&2; exit 1; }
echo "$crds"
