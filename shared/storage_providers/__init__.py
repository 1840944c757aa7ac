"""Storage-provider adapters (Redis, LMCacheServer, Mooncake): workload + Service + binding.

``render(cb)`` gives the desired managed objects; ``select(provider)`` the adapter.
"""

from shared.storage_providers.base import StorageProvider
from shared.storage_providers.registry import select
from shared.storage_providers.render import managed_provider, render, service_endpoint

__all__ = ["StorageProvider", "managed_provider", "render", "select", "service_endpoint"]
