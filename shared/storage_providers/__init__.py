"""Storage-provider adapters (Redis, LMCacheServer, Mooncake): workload + Service + binding.

``render_managed_objects(cb)`` gives the desired managed objects;
``select_provider(provider)`` the adapter.
"""

from shared.storage_providers.base import StorageProvider
from shared.storage_providers.registry import select_provider
from shared.storage_providers.render import (
    managed_provider,
    render_managed_objects,
    service_endpoint,
)

__all__ = [
    "StorageProvider",
    "managed_provider",
    "render_managed_objects",
    "select_provider",
    "service_endpoint",
]
