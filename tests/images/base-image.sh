#!/usr/bin/env bash
# A local stand-in for the Dockerfiles' base image (python:3.11-slim-bookworm),
# built from Debian's own packages, for machines that reach no container
# registry (CI). Debian bookworm's python3 is 3.11, the same minor release
# and the same Debian release as the official image.
#
# Usage: tests/images/base-image.sh            # ensure the image exists, print its tag
#        tests/images/base-image.sh --print    # print the tag, build nothing
#
# The rootfs comes from debootstrap (minbase variant plus the packages below),
# is saved as a tarball under
# ${ICACHE_IMAGES_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/inference-cache/images}
# and `docker import`ed under a tag whose suffix hashes this script, so
# changing the package list builds afresh. When Docker already has the tag,
# nothing happens; when only the tarball survives (a wiped Docker store), it is
# imported again without downloading anything. Only the tag goes to stdout.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

suite=bookworm
mirror="${ICACHE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
# What the official slim image carries for a Python service: the interpreter
# with venv/ensurepip, `python` on PATH, CA certificates, /etc/services and
# time zones.
packages=python3,python3-venv,python-is-python3,ca-certificates,netbase,tzdata
# This machine's own certificate authorities (Debian's place for local CAs),
# trusted inside the image too: where egress goes through a TLS-inspecting
# proxy, `pip install` in the builder stage needs them to reach PyPI. pip
# reads PIP_CERT, the rest of Python SSL_CERT_FILE.
local_cas=/usr/local/share/ca-certificates
ca_bundle=/etc/ssl/certs/ca-certificates.crt

key="$( { cat "${BASH_SOURCE[0]}"; echo "$suite|$packages"; \
          find "$local_cas" -name '*.crt' -type f -exec cat {} + 2>/dev/null; } \
        | sha256sum | cut -c1-12)"
tag="inference-cache-base/python:3.11-slim-${suite}-${key}"

if [[ "${1:-}" == "--print" ]]; then
    echo "$tag"
    exit 0
fi

log() { printf 'base-image.sh: %s\n' "$*" >&2; }

if docker image inspect "$tag" >/dev/null 2>&1; then
    echo "$tag"
    exit 0
fi

cache_dir="${ICACHE_IMAGES_CACHE:-${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/inference-cache/images}"
tarball="${cache_dir}/python-3.11-slim-${suite}-${key}.tar"
mkdir -p "$cache_dir"
exec 9>"${cache_dir}/.lock"
flock 9

if [[ ! -s "$tarball" ]]; then
    command -v debootstrap >/dev/null 2>&1 || {
        log "debootstrap is not installed (apt-get install debootstrap)"; exit 1; }
    [[ "$(id -u)" -eq 0 ]] || {
        log "building the base rootfs needs root (debootstrap, chroot); run make images-test as root"
        exit 1
    }
    start=$(date +%s)
    rootfs="$(mktemp -d "${cache_dir}/.rootfs.XXXXXX")"
    trap 'rm -rf "$rootfs" "${tarball}.tmp"' EXIT
    log "debootstrap ${suite} (${packages}) from ${mirror}"
    debootstrap --variant=minbase --include="$packages" "$suite" "$rootfs" "$mirror" \
        >"${cache_dir}/debootstrap.log" 2>&1 || {
        log "debootstrap failed; see ${cache_dir}/debootstrap.log"
        tail -n 30 "${cache_dir}/debootstrap.log" >&2
        exit 1
    }
    if compgen -G "${local_cas}/*.crt" >/dev/null; then
        cp "$local_cas"/*.crt "$rootfs/usr/local/share/ca-certificates/"
        chroot "$rootfs" update-ca-certificates >&2
    fi
    # Slim, as the official image: no package indexes, caches, docs or man pages.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* \
        "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/log/* \
        "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    chroot "$rootfs" python3 -c "import sys, venv, ensurepip, ssl; print(sys.version)" >&2
    tar --numeric-owner -C "$rootfs" -cf "${tarball}.tmp" .
    mv "${tarball}.tmp" "$tarball"
    # One base at a time: drop the rootfs of earlier package lists.
    find "$cache_dir" -maxdepth 1 -name "python-3.11-slim-${suite}-*.tar" ! -path "$tarball" -delete
    rm -rf "$rootfs"
    trap - EXIT
    log "rootfs built in $(( $(date +%s) - start ))s: ${tarball}"
fi

log "docker import ${tarball} as ${tag}"
docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    --change "ENV PIP_CERT=${ca_bundle}" \
    --change "ENV SSL_CERT_FILE=${ca_bundle}" \
    --change 'CMD ["python3"]' \
    "$tarball" "$tag" >/dev/null
echo "$tag"
