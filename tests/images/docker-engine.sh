#!/usr/bin/env bash
# Make sure a Docker engine answers, for `make images-test`. On a machine without
# one, install Debian's docker.io (and debootstrap, which tests/images/base-image.sh
# needs) and start dockerd in the background; it keeps running after the tests, as
# the machine's engine, with its image and layer store in /var/lib/docker (outside
# the work tree: base image and layers are reused by the next run).
#
# Runs as root: installing packages, starting dockerd and (in base-image.sh)
# debootstrap and chroot all need it, and a dockerd started through sudo would
# leave a socket the calling user cannot reach. Without root it only checks that
# an engine already answers this user.
set -euo pipefail

log() { printf 'docker-engine.sh: %s\n' "$*" >&2; }

root=0
[[ "$(id -u)" -eq 0 ]] && root=1

apt_updated=0
apt_install() {
    if [[ "$apt_updated" -eq 0 ]]; then
        env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        apt_updated=1
    fi
    env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >&2
}

if [[ "$root" -eq 1 ]] && ! command -v debootstrap >/dev/null 2>&1; then
    log "installing debootstrap"
    apt_install debootstrap
fi

if docker info >/dev/null 2>&1; then
    exit 0
fi
if [[ "$root" -eq 0 ]]; then
    log "no Docker engine answers this user; make images-test installs and starts one only when run as root"
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
    log "no Docker engine: installing Debian's docker.io"
    apt_install docker.io
fi
if ! command -v docker >/dev/null 2>&1; then
    log "dockerd is installed but no docker client is on PATH"
    exit 1
fi

log_dir="${XDG_CACHE_HOME:-${HOME:?HOME is not set}/.cache}/inference-cache/docker"
mkdir -p "$log_dir"
log "starting dockerd (log: ${log_dir}/dockerd.log)"
# Its own session, so it outlives this script and the make that ran it.
setsid dockerd >>"${log_dir}/dockerd.log" 2>&1 </dev/null &

for _ in $(seq 1 120); do
    if docker info >/dev/null 2>&1; then
        log "Docker engine $(docker version --format '{{.Server.Version}}') is up"
        exit 0
    fi
    sleep 0.5
done
log "dockerd did not answer within 60s; last lines of its log:"
tail -n 30 "${log_dir}/dockerd.log" >&2
exit 1
