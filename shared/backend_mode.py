"""The backend's mode: which lifecycle shape a CacheBackend has, decided from its spec.

Every status rule, the reconcile's choice of what to provision and doctor's reading of
the conditions start from it: Managed (we run the tier), External (an endpoint someone
else runs), HostOnly (node-local LMCache host memory, no remote tier), EventsOnly (KV
events for routing, no offload), HiCache (SGLang's own hierarchy) or Unsupported (no
runtime adapter or provider binding for the pair).
"""

from __future__ import annotations

import enum

from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend
from shared.runtime_adapters import registry as runtime_registry
from shared.storage_providers.render import managed_provider


class Mode(enum.StrEnum):
    MANAGED = "Managed"
    HOST_ONLY = "HostOnly"
    EVENTS_ONLY = "EventsOnly"
    EXTERNAL = "External"
    HICACHE = "HiCache"
    UNSUPPORTED = "Unsupported"


def backend_mode(cb: CacheBackend) -> Mode:
    """Which lifecycle shape this backend has; decides every other rule."""
    spec = cb.spec
    if runtime_registry.select_adapter(spec.runtime, effective.cache_type(spec)) is None:
        return Mode.UNSUPPORTED
    if effective.integration_mode(spec) == c.MODE_EVENTS_ONLY:
        return Mode.EVENTS_ONLY
    if effective.cache_type(spec) == c.TYPE_SGLANG_HICACHE:
        return Mode.HICACHE
    rs = spec.remote_storage
    if rs is None or rs.provider is None:
        return Mode.HOST_ONLY
    if rs.ownership == c.OWNERSHIP_EXTERNAL:
        return Mode.EXTERNAL
    if managed_provider(cb) is None:
        # A provider whose binding the runtime adapter refuses: nothing would dial it.
        return Mode.UNSUPPORTED
    return Mode.MANAGED
