"""vLLM's built-in CPU KV offloading: OffloadingConnector in the engine pod."""

from __future__ import annotations

from typing import Any, ClassVar

from shared import constants as c
from shared.api.models import CacheBackend
from shared.bindings import Binding, Protocol
from shared.runtime_adapters.base import InjectContext, InjectionDeclinedError, RuntimeAdapter
from shared.runtime_adapters.engine import select_vllm_engine
from shared.runtime_adapters.kv_config import (
    KV_OFFLOADING_BACKEND,
    KV_OFFLOADING_SIZE,
    KV_TRANSFER_CONFIG,
)


class VLLMOffloadingAdapter(RuntimeAdapter):
    name: ClassVar[str] = "vLLM+Offloading"
    runtime: ClassVar[str] = c.RUNTIME_VLLM
    cache_type: ClassVar[str] = c.TYPE_VLLM_OFFLOADING
    reserved_args: ClassVar[tuple[str, ...]] = (
        KV_TRANSFER_CONFIG,
        KV_OFFLOADING_SIZE,
        KV_OFFLOADING_BACKEND,
    )
    # The CPU tier lives in the engine pod: only the host-only binding.
    accepted_protocols: ClassVar[frozenset[Protocol | None]] = frozenset({None})

    def engine_container_index(self, pod: dict[str, Any]) -> int:
        return select_vllm_engine(pod)

    def wire(
        self,
        pod: dict[str, Any],
        backend: CacheBackend,
        binding: Binding | None,
        ctx: InjectContext,
    ) -> dict[str, Any]:
        raise InjectionDeclinedError(
            "vLLM offloading wiring is not implemented yet", c.WIRING_REASON_KV_CONFIG_INVALID
        )
