"""vLLM + LMCache: --kv-transfer-config with LMCacheConnectorV1 and the LMCACHE_* env."""

from __future__ import annotations

from typing import Any, ClassVar

from shared import constants as c
from shared.api.models import CacheBackend
from shared.bindings import Binding, Protocol
from shared.runtime_adapters.base import InjectContext, RuntimeAdapter


class VLLMLMCacheAdapter(RuntimeAdapter):
    name: ClassVar[str] = "vLLM+LMCache"
    runtime: ClassVar[str] = c.RUNTIME_VLLM
    cache_type: ClassVar[str] = c.TYPE_LMCACHE
    reserved_args: ClassVar[tuple[str, ...]] = ("--kv-transfer-config",)
    reserved_env: ClassVar[tuple[str, ...]] = (
        "VLLM_USE_V1",
        "LMCACHE_REMOTE_URL",
        "INFERENCECACHE_FAIL_OPEN",
        "PYTHONHASHSEED",
    )
    accepted_protocols: ClassVar[frozenset[Protocol | None]] = frozenset(
        {None, "lm", "mooncakestore"}
    )

    def inject(
        self, pod: dict[str, Any], backend: CacheBackend, binding: Binding | None, ctx: InjectContext
    ) -> dict[str, Any]:
        raise NotImplementedError  # implemented with the Pod webhook (issue 4)
