"""SGLang native HiCache: --enable-hierarchical-cache and the --hicache-* flags."""

from __future__ import annotations

from typing import Any, ClassVar

from shared import constants as c
from shared.api.models import CacheBackend
from shared.bindings import Binding, Protocol
from shared.runtime_adapters.base import InjectContext, RuntimeAdapter


class SGLangHiCacheAdapter(RuntimeAdapter):
    name: ClassVar[str] = "SGLang+SGLangHiCache"
    runtime: ClassVar[str] = c.RUNTIME_SGLANG
    cache_type: ClassVar[str] = c.TYPE_SGLANG_HICACHE
    reserved_args: ClassVar[tuple[str, ...]] = (
        "--enable-hierarchical-cache",
        "--hicache-ratio",
        "--hicache-size",
        "--hicache-write-policy",
        "--hicache-io-backend",
        "--hicache-mem-layout",
    )
    reserved_env: ClassVar[tuple[str, ...]] = ()
    accepted_protocols: ClassVar[frozenset[Protocol | None]] = frozenset({None})

    def inject(
        self, pod: dict[str, Any], backend: CacheBackend, binding: Binding | None, ctx: InjectContext
    ) -> dict[str, Any]:
        raise NotImplementedError  # implemented with the Pod webhook (issue 4)
