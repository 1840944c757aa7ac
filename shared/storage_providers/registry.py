"""Registry of storage-provider adapters keyed by spec.remoteStorage.provider."""

from __future__ import annotations

from shared.storage_providers.base import StorageProvider
from shared.storage_providers.lmcache_server import LMCacheServerStorageProvider
from shared.storage_providers.mooncake import MooncakeStorageProvider
from shared.storage_providers.redis import RedisStorageProvider

REGISTRY: tuple[StorageProvider, ...] = (
    RedisStorageProvider(),
    LMCacheServerStorageProvider(),
    MooncakeStorageProvider(),
)


class UnknownProviderError(KeyError):
    """No adapter serves this spec.remoteStorage.provider value."""


def select_provider(provider: str) -> StorageProvider:
    for adapter in REGISTRY:
        if adapter.provider == provider:
            return adapter
    raise UnknownProviderError(provider)
