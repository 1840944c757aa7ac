"""Registry of runtime adapters keyed by (runtime, cache type): adding a pair is adding a module."""

from __future__ import annotations

from shared.runtime_adapters.base import RuntimeAdapter
from shared.runtime_adapters.sglang_hicache import SGLangHiCacheAdapter
from shared.runtime_adapters.sglang_lmcache import SGLangLMCacheAdapter
from shared.runtime_adapters.vllm_lmcache import VLLMLMCacheAdapter
from shared.runtime_adapters.vllm_offloading import VLLMOffloadingAdapter

REGISTRY: tuple[RuntimeAdapter, ...] = (
    VLLMLMCacheAdapter(),
    SGLangLMCacheAdapter(),
    SGLangHiCacheAdapter(),
    VLLMOffloadingAdapter(),
)


def select_adapter(runtime: str, cache_type: str) -> RuntimeAdapter | None:
    for adapter in REGISTRY:
        if adapter.runtime == runtime and adapter.cache_type == cache_type:
            return adapter
    return None


def supported_pairs() -> list[str]:
    """SupportedPairs, as named in admission errors: "VLLM/LMCache", ..."""
    return [f"{a.runtime}/{a.cache_type}" for a in REGISTRY]
