"""Managed Redis: the RESP L2 tier (binding ``resp``)."""

from __future__ import annotations

from decimal import ROUND_FLOOR, Decimal
from typing import Any, ClassVar

from shared import constants as c
from shared.api.models import CacheBackendSpec, RedisProvider
from shared.quantity import parse_quantity
from shared.storage_providers.base import AUTH_CONFIG_PATH, Port, StorageProvider

# Pinned, fully qualified: a floating tag could change eviction or persistence
# behaviour underneath a running cache on an unrelated pull.
DEFAULT_REDIS_IMAGE = "docker.io/library/redis:7.4-alpine"
REDIS_PORT = 6379
# Fraction of limits.memory handed to Redis as --maxmemory; the rest is headroom for
# Redis' own overhead (buffers, fragmentation) so the kernel does not OOM-kill it first.
MAXMEMORY_FRACTION = Decimal("0.8")
# The official image's `redis` user and group. Started as this user, its entrypoint
# skips the chown and su-exec it does as root and execs redis-server directly.
REDIS_UID = 999
# The image's WORKDIR. With no RDB and no AOF Redis writes nothing, but its working
# directory is where it would; an emptyDir keeps the root filesystem read-only.
REDIS_DATA_DIR = "/data"


def maxmemory_bytes(resources: dict[str, Any]) -> int | None:
    """About 80% of limits.memory in bytes; None without a positive memory limit."""
    limit = (resources.get("limits") or {}).get("memory")
    if limit is None:
        return None
    value = parse_quantity(limit)
    if value <= 0:
        return None
    return int((value * MAXMEMORY_FRACTION).to_integral_value(rounding=ROUND_FLOOR))


class RedisStorageProvider(StorageProvider):
    provider: ClassVar[str] = c.PROVIDER_REDIS
    component: ClassVar[str] = "redis"
    container_name: ClassVar[str] = "redis"
    default_image: ClassVar[str] = DEFAULT_REDIS_IMAGE
    container_ports: ClassVar[tuple[Port, ...]] = (Port("resp", REDIS_PORT),)
    service_ports: ClassVar[tuple[Port, ...]] = (Port("resp", REDIS_PORT),)
    requires_auth: ClassVar[bool] = True
    run_as_user: ClassVar[int | None] = REDIS_UID
    read_only_root_filesystem: ClassVar[bool] = True
    writable_paths: ClassVar[tuple[tuple[str, str], ...]] = (("data", REDIS_DATA_DIR),)

    def block(self, spec: CacheBackendSpec) -> RedisProvider | None:
        return spec.remote_storage.redis if spec.remote_storage else None

    def command_and_args(
        self, spec: CacheBackendSpec, resources: dict[str, Any]
    ) -> tuple[list[str] | None, list[str] | None]:
        # Args only (no command) keep the image's entrypoint, which execs
        # redis-server (as REDIS_UID: the pod's securityContext). It is a cache: no RDB
        # snapshots, no AOF. Every client must AUTH with the backend's password:
        # ``requirepass`` comes from the config file mounted from the backend's Secret
        # (the first argument after redis-server), never from the command line, where
        # ps would show it.
        args = [
            "redis-server",
            AUTH_CONFIG_PATH,
            "--port",
            str(REDIS_PORT),
            "--save",
            "",
            "--appendonly",
            "no",
        ]
        maxmemory = maxmemory_bytes(resources)
        if maxmemory is not None:
            args += ["--maxmemory", str(maxmemory)]
        args += ["--maxmemory-policy", "allkeys-lru"]
        return None, args

    def auth_config(self, password: str) -> str:
        # The password is hex (new_password) or an operator's; quoted so a space or
        # quote in an operator-set one stays one config word.
        quoted = (
            password.replace("\\", "\\\\")
            .replace('"', '\\"')
            .replace("\n", "\\n")
            .replace("\r", "\\r")
        )
        return f'requirepass "{quoted}"\n'
