"""vLLM + LMCache: --kv-transfer-config with LMCacheConnectorV1 and the LMCACHE_* env.

Engine wire (all upserts, so repeat injection converges):

- ``--kv-transfer-config {"kv_connector":"LMCacheConnectorV1","kv_role":<role>}`` with
  ReadOnly -> kv_consumer, WriteOnly -> kv_producer, ReadWrite -> kv_both;
- ``LMCACHE_REMOTE_URL`` = ``lm://host:port`` or ``mooncakestore://host:port`` from the
  binding; not injected for host-only, where a value the pod template already carries
  is the operator's and is preserved (spec: adapters preserve existing user env);
- Mooncake only: ``LMCACHE_EXTRA_CONFIG``, the JSON object LMCache's Mooncake connector
  sets the transfer engine up from (it never reads the URL's address): the master
  address, ``P2PHANDSHAKE`` metadata, ``tcp`` and ``local_hostname`` =
  ``$(INFERENCECACHE_POD_IP)``, a downward-API env var (``status.podIP``) kept before it
  so Kubernetes expands the reference. An operator's own object (the pod template's
  value, then ``engineOverrides.env``) is merged in: their keys win, except the master
  address, which is the binding's. A value that is not a JSON object cannot be merged:
  the pod is rejected (fail-open, unwired) rather than silently losing either config;
- ``LMCACHE_CHUNK_SIZE`` (default 256);
- ``LMCACHE_REMOTE_SERDE`` always with a remote binding, from spec.lmCache.remoteSerde
  or ``naive`` (LMCache's own default has changed between releases, so the engine must
  not depend on it); host-only only when remoteSerde is set. Not reserved:
  engineOverrides.env can amend it;
- ``LMCACHE_LOCAL_CPU=True`` and ``LMCACHE_MAX_LOCAL_CPU_SIZE`` (GiB as a float literal,
  e.g. ``4.0``) for every binding, host-only or remote: LMCache keeps its local CPU tier
  in front of the remote one (stores land there first, remote hits are promoted into
  it), and the spec sizes it from spec.lmCache.hostMemory for remote bindings too.
  LMCache pins that size once per vLLM worker process, so the value is the budget
  divided by the pod's worker processes (``engine_parallelism.vllm_process_count``,
  engineOverrides.args included), and the annotation
  ``inferencecache.io/host-memory-processes`` records a count above one, or why it could
  not be read (then the budget is sized for one process, as for a single-GPU engine);
- ``VLLM_USE_V1=1``, ``PYTHONHASHSEED=0``, ``INFERENCECACHE_FAIL_OPEN=true|false``;
  ``VLLM_USE_V1`` is left out when the engine's command line (or engineOverrides.args)
  ends with ``--fail-on-environ-validation``: vLLM 0.33 no longer knows the variable and
  that flag turns its "Unknown vLLM environment variable" warning into a startup error;
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
from shared.runtime_adapters.base import (
    InjectContext,
    InjectionRejectedError,
    RuntimeAdapter,
)
from shared.runtime_adapters.engine import select_vllm_engine
from shared.runtime_adapters.engine_parallelism import ProcessCount, vllm_process_count
from shared.runtime_adapters.kv_config import (
    KV_TRANSFER_CONFIG,
    VLLM_KV_FLAGS,
    composed_pod_transfer_config,
    engine_offloading_declined,
    kv_override_tokens,
    read_kv_config,
)
from shared.runtime_adapters.overrides import override_arg_tokens
from shared.runtime_adapters.podspec import (
    cli_tokens,
    converge_last_arg,
    env_index,
    runs_shell_script,
    set_pod_annotation,
    upsert_env,
    upsert_env_var,
)
from shared.runtime_adapters.sizing import (
    gib_decimal_string,
    host_memory_bytes,
    per_process_bytes,
)
from shared.runtime_adapters.vllm_release import image_release

CONNECTOR = "LMCacheConnectorV1"
# Every LMCache connector vLLM registers (LMCacheConnectorV1, LMCacheMPConnector) starts
# so: an entry of one is LMCache's, converged to ours rather than run twice.
LMCACHE_CONNECTOR_PREFIX = "LMCache"
KV_ROLE = {
    c.ROLE_READ_ONLY: "kv_consumer",
    c.ROLE_WRITE_ONLY: "kv_producer",
    c.ROLE_READ_WRITE: "kv_both",
}
REMOTE_URL_SCHEME: dict[str, str] = {"lm": "lm://", "mooncakestore": "mooncakestore://"}

# vLLM 0.33's validate_environ raises for a VLLM_* variable envs.py does not know when
# this flag is set (VLLM_USE_V1 is one there); it only warns otherwise.
FAIL_ON_ENVIRON_VALIDATION = "--fail-on-environ-validation"
NO_FAIL_ON_ENVIRON_VALIDATION = "--no-fail-on-environ-validation"

# LMCache parses this env var with json.loads into its extra_config; its Mooncake
# connector builds the transfer engine's setup from that dict.
EXTRA_CONFIG_ENV = "LMCACHE_EXTRA_CONFIG"
# The engine pod's address (the node's on the host network), for local_hostname.
POD_IP_ENV = "INFERENCECACHE_POD_IP"
POD_IP_VAR: dict[str, Any] = {
    "name": POD_IP_ENV,
    "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "status.podIP"}},
}
# The master address is the binding's, never the operator's: the prefixed spelling
# LMCache also forwards (it wins over the plain key there) is dropped from theirs.
MASTER_KEY = "master_server_address"
OWNED_MOONCAKE_KEYS = (MASTER_KEY, "mooncake_" + MASTER_KEY)
# Transfer-engine defaults for the simplest deployment: peers exchange segment metadata
# by handshake (no metadata service) over TCP. An operator's object overrides them.
MOONCAKE_DEFAULTS: dict[str, str] = {
    "local_hostname": f"$({POD_IP_ENV})",
    "metadata_server": "P2PHANDSHAKE",
    "protocol": "tcp",
}


def lmcache_transfer_config(role: str) -> dict[str, Any]:
    """Our connector config, key-ordered so the arg is byte-stable."""
    return {"kv_connector": CONNECTOR, "kv_role": KV_ROLE[role]}


def is_lmcache_connector(config: dict[str, Any]) -> bool:
    """Whether a connector config (top-level or a MultiConnector entry) is LMCache's."""
    name = config.get("kv_connector")
    return isinstance(name, str) and name.startswith(LMCACHE_CONNECTOR_PREFIX)


def composed_transfer_config(template: dict[str, Any], backend: CacheBackend, role: str) -> str:
    """The one ``--kv-transfer-config`` the engine runs: the pod's own connector config
    (its last occurrence, as vLLM reads it) composed with ours. Raises
    InjectionDeclinedError (fail open, the pod's arguments untouched) when the pod's
    own offloading would overwrite it, or when that config cannot be read or names a
    connector the pod's vLLM release does not register."""
    kv = read_kv_config(template, kv_override_tokens(backend))
    release = image_release(template)
    engine_offloading_declined(kv, release, "LMCache")
    return composed_pod_transfer_config(
        kv, release, lmcache_transfer_config(role), is_ours=is_lmcache_connector
    )


def remote_url(binding: Binding) -> str:
    """``<scheme>://host:port``; an endpoint already carrying the scheme is not doubled."""
    scheme = REMOTE_URL_SCHEME[binding.protocol]
    endpoint = binding.endpoint.strip()
    for known in REMOTE_URL_SCHEME.values():
        if endpoint.startswith(known):
            endpoint = endpoint[len(known) :]
    return scheme + endpoint


def master_address(binding: Binding) -> str:
    """The Mooncake master's ``host:port``: the binding's endpoint without a scheme."""
    return remote_url(binding)[len(REMOTE_URL_SCHEME[binding.protocol]) :]


def parse_extra_config(value: str, where: str) -> dict[str, Any]:
    """An ``LMCACHE_EXTRA_CONFIG`` value as a dict; empty means none (LMCache reads an
    empty value as unset). Raises InjectionRejectedError when it is not a JSON object."""
    if not value.strip():
        return {}
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise InjectionRejectedError(
            f"{where} {EXTRA_CONFIG_ENV} is not JSON ({exc}); the Mooncake master address "
            "cannot be merged into it: make it a JSON object"
        ) from exc
    if not isinstance(parsed, dict):
        raise InjectionRejectedError(
            f"{where} {EXTRA_CONFIG_ENV} is JSON but not an object; the Mooncake master "
            "address cannot be merged into it: make it a JSON object"
        )
    return parsed


def operator_extra_config(engine: dict[str, Any], backend: CacheBackend) -> dict[str, Any]:
    """The operator's own extra config: the pod template's value, then the
    engineOverrides.env entries of that name on top (later entries win)."""
    merged: dict[str, Any] = {}
    for var in engine.get("env") or []:
        if var.get("name") != EXTRA_CONFIG_ENV:
            continue
        if "valueFrom" in var:
            raise InjectionRejectedError(
                f"the engine container's {EXTRA_CONFIG_ENV} comes from valueFrom; the "
                "Mooncake master address can only be merged into a literal JSON object value"
            )
        merged |= parse_extra_config(str(var.get("value") or ""), "the engine container's")
    integration = backend.spec.integration
    overrides = integration.engine_overrides if integration else None
    for override in (overrides.env if overrides else None) or []:
        if override.name != EXTRA_CONFIG_ENV:
            continue
        if override.value_from is not None:
            raise InjectionRejectedError(
                f"spec.integration.engineOverrides.env {EXTRA_CONFIG_ENV} uses valueFrom; "
                "the Mooncake master address can only be merged into a literal JSON object"
            )
        merged |= parse_extra_config(override.value or "", "spec.integration.engineOverrides.env")
    return merged


def mooncake_extra_config(binding: Binding, operator: dict[str, Any]) -> str:
    """The ``LMCACHE_EXTRA_CONFIG`` value for a Mooncake binding: our transfer-engine
    defaults, the operator's keys over them, the binding's master address over all;
    compact and key-sorted so the env value is byte-stable across re-admissions."""
    theirs = {k: v for k, v in operator.items() if k not in OWNED_MOONCAKE_KEYS}
    config = {**MOONCAKE_DEFAULTS, **theirs, MASTER_KEY: master_address(binding)}
    return json.dumps(config, separators=(",", ":"), sort_keys=True)


def place_pod_ip_before(container: dict[str, Any], name: str) -> None:
    """Converge the downward-API pod-IP var so it comes before env ``name``: Kubernetes
    expands ``$(VAR)`` only from variables defined earlier in the same container."""
    target = env_index(container, name)[0]
    existing = env_index(container, POD_IP_ENV)
    if existing and existing[0] < target:
        upsert_env_var(container, POD_IP_VAR)
        return
    env = [e for e in container.get("env") or [] if e.get("name") != POD_IP_ENV]
    at = next(i for i, e in enumerate(env) if e.get("name") == name)
    env.insert(at, dict(POD_IP_VAR))
    container["env"] = env


def fail_open_value(backend: CacheBackend) -> str:
    return "true" if effective.fail_open(backend.spec) else "false"


def fails_on_unknown_vllm_env(engine: dict[str, Any], backend: CacheBackend) -> bool:
    """Whether vLLM is told to fail at startup on a ``VLLM_*`` variable it does not know:
    the last of ``--fail-on-environ-validation`` / ``--no-fail-on-environ-validation``
    (argparse BooleanOptionalAction) on the engine's command line, then in
    engineOverrides.args (appended after it), wins."""
    tokens = [*cli_tokens(engine), *override_arg_tokens(backend)]
    fails = False
    for token in tokens:
        if token == FAIL_ON_ENVIRON_VALIDATION:
            fails = True
        elif token == NO_FAIL_ON_ENVIRON_VALIDATION:
            fails = False
    return fails


def set_processes_annotation(pod: dict[str, Any], processes: ProcessCount) -> None:
    """Record on the pod how many processes the host-memory budget was divided by, or
    why the count could not be read; absent for one read process (the whole budget)."""
    one = processes.count == 1 and processes.readable
    set_pod_annotation(
        pod, c.ANNOTATION_HOST_MEMORY_PROCESSES, None if one else processes.describe()
    )


def lmcache_env(
    backend: CacheBackend,
    binding: Binding | None,
    *,
    vllm_use_v1: bool = True,
    processes: int = 1,
) -> dict[str, str]:
    """Env name -> desired value, in render order; ``vllm_use_v1=False`` leaves
    ``VLLM_USE_V1`` out (see ``fails_on_unknown_vllm_env``); ``processes``: the vLLM
    worker processes of the pod, each pinning ``LMCACHE_MAX_LOCAL_CPU_SIZE``."""
    spec = backend.spec
    env: dict[str, str] = {"VLLM_USE_V1": "1"} if vllm_use_v1 else {}
    env["PYTHONHASHSEED"] = "0"
    if binding is not None:
        env["LMCACHE_REMOTE_URL"] = remote_url(binding)
    env |= {
        "LMCACHE_CHUNK_SIZE": str(effective.chunk_size_tokens(spec)),
        "LMCACHE_LOCAL_CPU": "True",
        "LMCACHE_MAX_LOCAL_CPU_SIZE": gib_decimal_string(
            per_process_bytes(host_memory_bytes(spec), processes)
        ),
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
    # The offloading flags too: vLLM's own offloading overwrites the connector.
    reserved_args: ClassVar[tuple[str, ...]] = VLLM_KV_FLAGS
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

    def merged_env(self, binding: Binding | None) -> tuple[str, ...]:
        if binding is not None and binding.protocol == "mooncakestore":
            return (EXTRA_CONFIG_ENV,)
        return ()

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
        template = pod["spec"]["containers"][index]
        processes = vllm_process_count(template, override_arg_tokens(backend))
        env = lmcache_env(
            backend,
            binding,
            vllm_use_v1=not fails_on_unknown_vllm_env(template, backend),
            processes=processes.count,
        )
        transfer = composed_transfer_config(template, backend, role)
        mode = kernel_check.requested_mode(backend.metadata.annotations)
        extra = None
        if binding is not None and binding.protocol == "mooncakestore":
            extra = mooncake_extra_config(binding, operator_extra_config(template, backend))

        out = json_copy(pod)
        engine = out["spec"]["containers"][index]
        if runs_shell_script(engine):
            raise InjectionRejectedError(
                f"container {engine.get('name')!r} runs a shell script (sh -c); "
                f"{KV_TRANSFER_CONFIG} appended to args would not reach vLLM: put the vLLM "
                "CLI in command/args"
            )
        converge_last_arg(engine, KV_TRANSFER_CONFIG, transfer)
        for name, value in env.items():
            upsert_env(engine, name, value)
        if extra is not None:
            upsert_env(engine, EXTRA_CONFIG_ENV, extra)
            place_pod_ip_before(engine, EXTRA_CONFIG_ENV)
        kernel_check.converge_check(out, kernel_check.admitted_mode(mode, engine), engine)
        set_processes_annotation(out, processes)
        return out
