"""vLLM + LMCache: --kv-transfer-config with LMCacheConnectorV1 and the LMCACHE_* env.

Engine wire (all upserts, so repeat injection converges):

- ``--kv-transfer-config {"kv_connector":"LMCacheConnectorV1","kv_role":<role>}`` with
  ReadOnly -> kv_consumer, WriteOnly -> kv_producer, ReadWrite -> kv_both;
- ``LMCACHE_REMOTE_URL`` = ``lm://host:port`` or ``mooncakestore://host:port`` from the
  binding; not injected for host-only, where a value the pod template already carries
  is the operator's and is preserved (spec: adapters preserve existing user env);
- ``LMCACHE_CHUNK_SIZE`` (default 256);
- ``LMCACHE_REMOTE_SERDE`` always with a remote binding, from spec.lmCache.remoteSerde
  or ``naive`` (LMCache's own default has changed between releases, so the engine must
  not depend on it); host-only only when remoteSerde is set. Not reserved:
  engineOverrides.env can amend it;
- ``LMCACHE_LOCAL_CPU=True`` and ``LMCACHE_MAX_LOCAL_CPU_SIZE`` (GiB as a float literal,
  e.g. ``4.0``) for every binding, host-only or remote: LMCache keeps its local CPU tier
  in front of the remote one (stores land there first, remote hits are promoted into
  it), and the spec sizes it from spec.lmCache.hostMemory for remote bindings too;
- ``VLLM_USE_V1=1``, ``PYTHONHASHSEED=0``, ``INFERENCECACHE_FAIL_OPEN=true|false``;
- the ``lmcache-kernel-check`` init container, per the backend's kernel-check annotation.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend
from shared.bindings import Binding, Protocol
from shared.jsoncopy import json_copy
from shared.runtime_adapters import kernel_check
from shared.runtime_adapters.base import InjectContext, InjectionRejectedError, RuntimeAdapter
from shared.runtime_adapters.engine import select_vllm_engine
from shared.runtime_adapters.podspec import (
    runs_shell_script,
    upsert_arg,
    upsert_env,
)
from shared.runtime_adapters.sizing import gib_decimal_string, host_memory_bytes

KV_TRANSFER_CONFIG = "--kv-transfer-config"
CONNECTOR = "LMCacheConnectorV1"
KV_ROLE = {
    c.ROLE_READ_ONLY: "kv_consumer",
    c.ROLE_WRITE_ONLY: "kv_producer",
    c.ROLE_READ_WRITE: "kv_both",
}
REMOTE_URL_SCHEME: dict[str, str] = {"lm": "lm://", "mooncakestore": "mooncakestore://"}


def kv_transfer_config(role: str) -> str:
    """The connector JSON, compact and key-ordered so the arg is byte-stable."""
    return json.dumps({"kv_connector": CONNECTOR, "kv_role": KV_ROLE[role]}, separators=(",", ":"))


def remote_url(binding: Binding) -> str:
    """``<scheme>://host:port``; an endpoint already carrying the scheme is not doubled."""
    scheme = REMOTE_URL_SCHEME[binding.protocol]
    endpoint = binding.endpoint.strip()
    for known in REMOTE_URL_SCHEME.values():
        if endpoint.startswith(known):
            endpoint = endpoint[len(known) :]
    return scheme + endpoint


def fail_open_value(backend: CacheBackend) -> str:
    return "true" if effective.fail_open(backend.spec) else "false"


def lmcache_env(backend: CacheBackend, binding: Binding | None) -> dict[str, str]:
    """Env name -> desired value, in render order."""
    spec = backend.spec
    env: dict[str, str] = {"VLLM_USE_V1": "1", "PYTHONHASHSEED": "0"}
    if binding is not None:
        env["LMCACHE_REMOTE_URL"] = remote_url(binding)
    env |= {
        "LMCACHE_CHUNK_SIZE": str(effective.chunk_size_tokens(spec)),
        "LMCACHE_LOCAL_CPU": "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": gib_decimal_string(host_memory_bytes(spec)),
        "INFERENCECACHE_FAIL_OPEN": fail_open_value(backend),
    }
    explicit = spec.lm_cache.remote_serde if spec.lm_cache else None
    if binding is not None or explicit:
        env["LMCACHE_REMOTE_SERDE"] = effective.remote_serde(spec)
    return env


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

    def engine_container_index(self, pod: dict[str, Any]) -> int:
        return select_vllm_engine(pod)

    def wire(
        self,
        pod: dict[str, Any],
        backend: CacheBackend,
        binding: Binding | None,
        ctx: InjectContext,
    ) -> dict[str, Any]:
        role = effective.integration_role(backend.spec)
        # Everything that can reject is decided before the copy is touched.
        index = self.engine_container_index(pod)
        env = lmcache_env(backend, binding)
        mode = kernel_check.requested_mode(backend.metadata.annotations)

        out = json_copy(pod)
        engine = out["spec"]["containers"][index]
        if runs_shell_script(engine):
            raise InjectionRejectedError(
                f"container {engine.get('name')!r} runs a shell script (sh -c); "
                f"{KV_TRANSFER_CONFIG} appended to args would not reach vLLM: put the vLLM "
                "CLI in command/args"
            )
        upsert_arg(engine, KV_TRANSFER_CONFIG, kv_transfer_config(role))
        for name, value in env.items():
            upsert_env(engine, name, value)
        kernel_check.converge(out, kernel_check.admitted_mode(mode, engine), engine)
        return out
