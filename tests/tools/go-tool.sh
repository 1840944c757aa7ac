#!/usr/bin/env bash
# Build one pinned Go command from the Go module proxy into a cache directory outside
# the working tree, and print the binary's path. The per-tool scripts next to this one
# (kustomize.sh, promtool.sh, helm.sh) pin the package and version.
#
# Usage: tests/tools/go-tool.sh NAME PACKAGE VERSION [--print] [--in-module MODULE]
#                                 [--from-dir DIR] [--tags TAGS] [--ldflags FLAGS]
#   --print              print the binary path, build nothing
#   --tags TAGS          Go build tags (comma-separated); part of the cache key
#   --in-module MODULE   build PACKAGE from inside MODULE's own source tree (fetched from
#                        the module proxy at VERSION) instead of `go install pkg@version`:
#                        for modules whose go.mod has replace directives, which
#                        `go install pkg@version` refuses.
#   --from-dir DIR       build the main package of a small module of ours in DIR (its
#                        go.mod pins PACKAGE at VERSION); a hash of its go.mod, go.sum
#                        and Go files is part of the cache key.
#   --ldflags FLAGS      link flags in addition to -s -w; part of the cache key
#
# Cache: ${XDG_CACHE_HOME:-$HOME/.cache}/inference-cache/NAME/VERSION-GOVERSION[-TAGS]/bin/NAME,
# or under $ICACHE_<NAME>_CACHE when set (NAME upper-cased).
# Only the binary path is printed on stdout; progress goes to stderr.
set -euo pipefail

name="${1:?usage: go-tool.sh NAME PACKAGE VERSION [--print] [-- FLAGS]}"
package="${2:?package missing}"
version="${3:?version missing}"
shift 3
print_only=0
module=""
from_dir=""
tags=""
ldflags=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --print) print_only=1; shift ;;
        --in-module) module="${2:?--in-module needs a module path}"; shift 2 ;;
        --from-dir) from_dir="${2:?--from-dir needs a directory}"; shift 2 ;;
        --tags) tags="${2:?--tags needs a list}"; shift 2 ;;
        --ldflags) ldflags="${2:?--ldflags needs flags}"; shift 2 ;;
        *) echo "go-tool.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

command -v go >/dev/null 2>&1 || { echo "go-tool.sh: go is not on PATH" >&2; exit 1; }
go_version="$(go env GOVERSION)"
override_var="ICACHE_$(tr '[:lower:]-' '[:upper:]_' <<<"$name")_CACHE"
key="${version}-${go_version}${tags:+-${tags//,/-}}"
if [[ -n "$from_dir" || -n "$ldflags" ]]; then
    sources=""
    [[ -z "$from_dir" ]] || sources="$(cd "$from_dir" && cat go.mod go.sum ./*.go)"
    key="${key}-$( { echo "$sources"; echo "$ldflags"; } | sha256sum | cut -c1-12)"
fi
cache_dir="${!override_var:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/inference-cache/${name}/${key}}"
bin="${cache_dir}/bin/${name}"

if [[ $print_only -eq 1 || -x "$bin" ]]; then
    echo "$bin"
    exit 0
fi

mkdir -p "$cache_dir"
# Serialise concurrent builds (make and a pytest fixture may both ask).
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
echo "go-tool.sh: building ${name} (${package}@${version}) with ${go_version} into ${cache_dir}/bin" >&2
export CGO_ENABLED=0 GOFLAGS=-buildvcs=false GOWORK=off
if [[ -n "$from_dir" ]]; then
    (cd "$from_dir" && go build -mod=mod -trimpath -tags "$tags" -ldflags "-s -w $ldflags" \
        -o "${tmp_out}/${name}" .)
elif [[ -z "$module" ]]; then
    # `go install pkg@version` resolves the module's own go.mod (pinned dependencies),
    # outside any workspace.
    (cd "$tmp_out" && GOBIN="$tmp_out" go install -trimpath -tags "$tags" -ldflags "-s -w $ldflags" \
        "${package}@${version}")
else
    # The module as the main module: its go.mod and go.sum (replace directives
    # included) pin every dependency, exactly as the project's own release builds.
    src="$(cd "$tmp_out" && go mod download -json "${module}@${version}" \
        | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
    [[ -d "$src" ]] || { echo "go-tool.sh: could not fetch ${module}@${version}" >&2; exit 1; }
    (cd "$src" && go build -mod=readonly -trimpath -tags "$tags" -ldflags "-s -w $ldflags" \
        -o "${tmp_out}/${name}" "./${package#"${module}/"}")
fi
mkdir -p "${cache_dir}/bin"
mv "${tmp_out}/${name}" "$bin"
echo "go-tool.sh: ${name} done in $(( $(date +%s) - start ))s" >&2
echo "$bin"
