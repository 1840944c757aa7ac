"""Effective values of optional fields: the defaults code applies when a field is unset.

Readers call these instead of repeating a default, so each default lives in one place.
"""

from __future__ import annotations

from shared import constants as c
from shared.api.models import CacheBackendSpec

DEFAULT_CHUNK_SIZE_TOKENS = 256
DEFAULT_HOST_MEMORY_CAPACITY = "4Gi"
DEFAULT_WORKER_PORT = 5555
DEFAULT_FIRST_EVENT_TIMEOUT = "5m"
DEFAULT_TARGET_CPU_UTILIZATION_PERCENT = 80
# LMCache's own default serializer has changed between releases; the engine env always
# names one with a remote binding, so behaviour never depends on the LMCache version.
DEFAULT_REMOTE_SERDE = "naive"


def cache_type(spec: CacheBackendSpec) -> str:
    return spec.type or c.TYPE_LMCACHE


def integration_mode(spec: CacheBackendSpec) -> str:
    return (spec.integration and spec.integration.mode) or c.MODE_OFFLOAD


def integration_role(spec: CacheBackendSpec) -> str:
    return (spec.integration and spec.integration.role) or c.ROLE_READ_WRITE


def fail_open(spec: CacheBackendSpec) -> bool:
    """IntegrationFailOpen: a nil spec or nil field means true (defence in depth)."""
    if spec.integration is None or spec.integration.fail_open is None:
        return True
    return spec.integration.fail_open


def engine_host_network(spec: CacheBackendSpec) -> bool:
    return bool(spec.integration and spec.integration.engine_host_network)


def replicas(spec: CacheBackendSpec) -> int:
    return 1 if spec.replicas is None else spec.replicas


def deployment_kind(spec: CacheBackendSpec) -> str:
    return spec.deployment_kind or c.DEPLOYMENT_KIND_DEPLOYMENT


def chunk_size_tokens(spec: CacheBackendSpec) -> int:
    lm = spec.lm_cache
    return lm.chunk_size_tokens if lm and lm.chunk_size_tokens else DEFAULT_CHUNK_SIZE_TOKENS


def host_memory_capacity(spec: CacheBackendSpec) -> str | int:
    lm = spec.lm_cache
    if lm and lm.host_memory and lm.host_memory.capacity is not None:
        return lm.host_memory.capacity
    return DEFAULT_HOST_MEMORY_CAPACITY


def remote_serde(spec: CacheBackendSpec) -> str:
    lm = spec.lm_cache
    return (lm.remote_serde if lm else None) or DEFAULT_REMOTE_SERDE


def worker_port(spec: CacheBackendSpec) -> int:
    lm = spec.lm_cache
    return lm.worker_port if lm and lm.worker_port else DEFAULT_WORKER_PORT


def first_event_timeout(spec: CacheBackendSpec) -> str:
    obs = spec.observation
    return (obs and obs.first_event_timeout) or DEFAULT_FIRST_EVENT_TIMEOUT


def model_id(spec: CacheBackendSpec) -> str | None:
    return spec.observation.model_id if spec.observation and spec.observation.model_id else None


def claim_match_labels(spec: CacheBackendSpec) -> dict[str, str]:
    """The claim-capable selector; empty means 'claims nothing'."""
    sel = spec.engine_selector
    return dict(sel.match_labels) if sel and sel.match_labels else {}


def eviction_policy(spec: CacheBackendSpec) -> str:
    """spec.vllmOffloading.evictionPolicy; LRU when unset (the CRD default)."""
    vo = spec.vllm_offloading
    return (vo.eviction_policy if vo else None) or c.EVICTION_POLICY_LRU


def vllm_offloading_capacity(spec: CacheBackendSpec) -> str | int | None:
    """spec.vllmOffloading.cpu.capacity as written; None when unset (validation requires it)."""
    vo = spec.vllm_offloading
    return vo.cpu.capacity if vo and vo.cpu else None


def target_cpu_utilization_percent(spec: CacheBackendSpec) -> int:
    a = spec.autoscaling
    if a and a.target_cpu_utilization_percent:
        return a.target_cpu_utilization_percent
    return DEFAULT_TARGET_CPU_UTILIZATION_PERCENT
