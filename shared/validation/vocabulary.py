"""Field paths and predicates of the spec that several rule groups read."""

from __future__ import annotations

from typing import Final, Literal

from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackendSpec
from shared.validation.field_errors import (
    SPEC,
)

# ------------------------------------------------------------------ vocabulary

REMOTE: Final = SPEC.child("remoteStorage")
AUTOSCALING: Final = SPEC.child("autoscaling")
INTEGRATION: Final = SPEC.child("integration")
HICACHE: Final = SPEC.child("hiCache")
OVERRIDES: Final = INTEGRATION.child("engineOverrides")

# Provider -> (wire name of its typed block, attribute on RemoteStorage).
PROVIDER_BLOCKS: Final[dict[str, tuple[str, str]]] = {
    c.PROVIDER_REDIS: ("redis", "redis"),
    c.PROVIDER_LMCACHE_SERVER: ("lmCacheServer", "lm_cache_server"),
    c.PROVIDER_MOONCAKE: ("mooncake", "mooncake"),
}

STANDARD_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage")
HUGEPAGES_PREFIX: Final = "hugepages-"

ResourceKind = Literal["standard", "hugepages", "extended"]


def integration_mode_of(spec: CacheBackendSpec) -> str:
    return effective.integration_mode(spec)


def is_events_only(spec: CacheBackendSpec) -> bool:
    return integration_mode_of(spec) == c.MODE_EVENTS_ONLY


def provider_of(spec: CacheBackendSpec) -> str | None:
    return spec.remote_storage.provider if spec.remote_storage else None


def ownership_of(spec: CacheBackendSpec) -> str | None:
    return spec.remote_storage.ownership if spec.remote_storage else None


def trimmed_endpoint(spec: CacheBackendSpec) -> str:
    """The trimmed endpoint ("" when unset or whitespace-only)."""
    rs = spec.remote_storage
    return (rs.endpoint or "").strip() if rs else ""


def is_mooncake(spec: CacheBackendSpec) -> bool:
    """Spec: the Mooncake rules apply "when remoteStorage.provider: Mooncake"."""
    return provider_of(spec) == c.PROVIDER_MOONCAKE


def is_managed_redis(spec: CacheBackendSpec) -> bool:
    """the managed Redis rules apply with provider Redis and ownership Managed."""
    return provider_of(spec) == c.PROVIDER_REDIS and ownership_of(spec) == c.OWNERSHIP_MANAGED
