"""Where a wired engine pod serves the metrics the PodMonitor scrapes.

The PodMonitor ``inference-cache-engines`` keeps pods labelled
``inferencecache.io/metrics=engine`` and scrapes ``<pod IP>:<port>/metrics`` for each
port annotation the webhook records (manifests/components/monitoring/podmonitor.yaml).
The ports come from the wired pod's own command lines, never from a guess about the
image:

- ``inferencecache.io/metrics-port``: the engine's HTTP server. vLLM always serves
  ``/metrics`` on its ``--port`` (8000 by default), and LMCache's in-process series
  (``lmcache:*``) with it. SGLang serves ``/metrics`` on its ``--port`` (30000 by
  default) only with ``--enable-metrics``; the webhook does not add that flag (the
  spec lists the SGLang arguments it injects), so without it there is no engine port.
- ``inferencecache.io/cache-metrics-port``: the LMCache MP worker sidecar beside SGLang
  serves its OpenTelemetry series (``lmcache_mp_*``) on ``--prometheus-port``, 9090 by
  default, unless it runs with ``--disable-metrics``.

The defaults are the pinned releases' (tests/engine_contracts/test_metric_names.py reads
them from their source).
"""

from __future__ import annotations

from typing import Any, Final

from shared import constants as c
from shared.runtime_adapters.base import RuntimeAdapter
from shared.runtime_adapters.engine import EngineLocator
from shared.runtime_adapters.podspec import cli_tokens, find_flag, find_named
from shared.runtime_adapters.sglang_lmcache import WORKER_CONTAINER

VLLM_DEFAULT_PORT: Final = 8000
SGLANG_DEFAULT_PORT: Final = 30000
LMCACHE_MP_DEFAULT_PROMETHEUS_PORT: Final = 9090
SGLANG_ENABLE_METRICS: Final = "--enable-metrics"
LMCACHE_MP_PROMETHEUS_PORT: Final = "--prometheus-port"
LMCACHE_MP_DISABLE_METRICS: Final = "--disable-metrics"


def flag_port(tokens: list[str], flag: str, default: int) -> int | None:
    """The last value of ``flag`` as a TCP port (argparse keeps the last), ``default``
    when the flag is absent, None when its value is no port."""
    found = find_flag(tokens, flag)
    if not found:
        return default
    value = found[-1].value
    if value is None or not value.isdigit() or not 0 < int(value) < 65536:
        return None
    return int(value)


def engine_metrics_port(runtime: str, engine: dict[str, Any]) -> int | None:
    """The engine container's ``/metrics`` port, or None when it serves none."""
    tokens = [str(t) for t in cli_tokens(engine)]
    if runtime == c.RUNTIME_VLLM:
        return flag_port(tokens, "--port", VLLM_DEFAULT_PORT)
    if runtime == c.RUNTIME_SGLANG and find_flag(tokens, SGLANG_ENABLE_METRICS):
        return flag_port(tokens, "--port", SGLANG_DEFAULT_PORT)
    return None


def mp_worker_metrics_port(pod: dict[str, Any]) -> int | None:
    """The LMCache MP worker sidecar's Prometheus port, or None without a worker (or
    with its metrics disabled)."""
    worker = find_named((pod.get("spec") or {}).get("initContainers"), WORKER_CONTAINER)
    if worker is None:
        return None
    tokens = [str(t) for t in cli_tokens(worker)]
    if find_flag(tokens, LMCACHE_MP_DISABLE_METRICS):
        return None
    return flag_port(tokens, LMCACHE_MP_PROMETHEUS_PORT, LMCACHE_MP_DEFAULT_PROMETHEUS_PORT)


def metrics_ports(pod: dict[str, Any], adapter: RuntimeAdapter) -> dict[str, str]:
    """The port annotations of a pod ``adapter`` wired: annotation -> port (empty when
    the pod serves no metrics the PodMonitor could scrape)."""
    ports: dict[str, str] = {}
    containers = (pod.get("spec") or {}).get("containers") or []
    if isinstance(adapter, EngineLocator):
        engine = containers[adapter.engine_container_index(pod)]
        port = engine_metrics_port(adapter.runtime, engine)
        if port is not None:
            ports[c.ANNOTATION_METRICS_PORT] = str(port)
    if adapter.cache_type == c.TYPE_LMCACHE and adapter.runtime == c.RUNTIME_SGLANG:
        cache_port = mp_worker_metrics_port(pod)
        if cache_port is not None:
            ports[c.ANNOTATION_CACHE_METRICS_PORT] = str(cache_port)
    return ports


# prometheus_client's multiprocess directory. vLLM's /metrics serves the registry of its
# API-server process alone unless this is set (vLLM sets it itself only with
# --api-server-count > 1), while LMCache records its series in the engine-core and
# worker processes, into this directory (LMCache creates /tmp/lmcache_prometheus when
# it is unset). With it set for the whole container, vLLM's /metrics collects every
# process's series, LMCache's included.
PROMETHEUS_MULTIPROC_DIR: Final = "PROMETHEUS_MULTIPROC_DIR"
LMCACHE_PROMETHEUS_DIR: Final = "/tmp/lmcache_prometheus"


def share_lmcache_metrics(pod: dict[str, Any], adapter: RuntimeAdapter) -> None:
    """vLLM + LMCache: set ``PROMETHEUS_MULTIPROC_DIR`` on the engine container unless
    the pod sets it already (its own directory is then used by both)."""
    if (adapter.runtime, adapter.cache_type) != (c.RUNTIME_VLLM, c.TYPE_LMCACHE):
        return
    if not isinstance(adapter, EngineLocator):
        return
    containers = (pod.get("spec") or {}).get("containers") or []
    engine = containers[adapter.engine_container_index(pod)]
    env = list(engine.get("env") or [])
    if any(var.get("name") == PROMETHEUS_MULTIPROC_DIR for var in env):
        return
    engine["env"] = [*env, {"name": PROMETHEUS_MULTIPROC_DIR, "value": LMCACHE_PROMETHEUS_DIR}]
