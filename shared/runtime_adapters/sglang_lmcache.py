"""SGLang + LMCache in MP mode: --enable-lmcache, a config file and the lmcache-mp-worker sidecar."""

from __future__ import annotations

from typing import Any, ClassVar

from shared import constants as c
from shared.api.models import CacheBackend
from shared.bindings import Binding, Protocol
from shared.runtime_adapters.base import InjectContext, RuntimeAdapter


class SGLangLMCacheAdapter(RuntimeAdapter):
    name: ClassVar[str] = "SGLang+LMCache"
    runtime: ClassVar[str] = c.RUNTIME_SGLANG
    cache_type: ClassVar[str] = c.TYPE_LMCACHE
    reserved_args: ClassVar[tuple[str, ...]] = ("--enable-lmcache", "--lmcache-config-file")
    reserved_env: ClassVar[tuple[str, ...]] = ("LMCACHE_USE_EXPERIMENTAL", "INFERENCECACHE_FAIL_OPEN")
    accepted_protocols: ClassVar[frozenset[Protocol | None]] = frozenset({None, "resp"})

    def inject(
        self, pod: dict[str, Any], backend: CacheBackend, binding: Binding | None, ctx: InjectContext
    ) -> dict[str, Any]:
        raise NotImplementedError  # implemented with the Pod webhook (issue 4)
