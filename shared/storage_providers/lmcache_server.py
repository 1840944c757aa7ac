"""Managed standalone LMCache server: the lm:// remote tier (binding ``lm``)."""

from __future__ import annotations

from typing import ClassVar

from shared import constants as c
from shared.api.models import CacheBackendSpec, LMCacheServerProvider
from shared.storage_providers.base import Port, StorageProvider

# Pinned, never :latest: the server and the lmcache client in the engine speak a
# versioned wire protocol and a skew fails silently (0 reload hits). v0.4.7 is
# version-aligned with the validated lmcache 0.4.7 client. TODO: pin to an
# @sha256 digest of a wire-tested build before release.
DEFAULT_LMCACHE_SERVER_IMAGE = "lmcache/standalone:v0.4.7"
LMCACHE_SERVER_PORT = 65432
# `lmcache_server <host> <port> [device]` ships with the lmcache package; bind every
# interface so the Service can reach it, device defaults to cpu (in-memory).
DEFAULT_LMCACHE_SERVER_COMMAND: tuple[str, ...] = (
    "lmcache_server",
    "0.0.0.0",
    str(LMCACHE_SERVER_PORT),
)

# The image's entrypoint does not drop root, so the pod names a user: any non-root
# uid can run it (the venv is world-readable). The server keeps everything in memory
# and writes no file; what runs before it (Python, torch and lmcache imports) may write
# caches under HOME or the temp directory, so both point at one emptyDir.
LMCACHE_SERVER_UID = 1000
LMCACHE_SERVER_SCRATCH = "/tmp"


class LMCacheServerStorageProvider(StorageProvider):
    provider: ClassVar[str] = c.PROVIDER_LMCACHE_SERVER
    component: ClassVar[str] = "lmcache-server"
    container_name: ClassVar[str] = "lmcache-server"
    default_image: ClassVar[str] = DEFAULT_LMCACHE_SERVER_IMAGE
    container_ports: ClassVar[tuple[Port, ...]] = (Port("lm", LMCACHE_SERVER_PORT),)
    service_ports: ClassVar[tuple[Port, ...]] = (Port("lm", LMCACHE_SERVER_PORT),)
    default_command: ClassVar[tuple[str, ...]] = tuple(DEFAULT_LMCACHE_SERVER_COMMAND)
    run_as_user: ClassVar[int | None] = LMCACHE_SERVER_UID
    read_only_root_filesystem: ClassVar[bool] = True
    writable_paths: ClassVar[tuple[tuple[str, str], ...]] = (("scratch", LMCACHE_SERVER_SCRATCH),)
    env: ClassVar[tuple[tuple[str, str], ...]] = (
        ("HOME", LMCACHE_SERVER_SCRATCH),
        ("TMPDIR", LMCACHE_SERVER_SCRATCH),
    )

    def block(self, spec: CacheBackendSpec) -> LMCacheServerProvider | None:
        return spec.remote_storage.lm_cache_server if spec.remote_storage else None
