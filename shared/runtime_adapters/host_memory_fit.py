"""Whether a wired pod's containers can hold the host memory the cache wiring pins.

Read from the pod alone (the webhook, ``icache admit-pod``, the worker and ``icache
doctor`` all judge the same pod the same way). ``pinned_host_memory`` is, per container
the wiring adds host memory to:

- a vLLM engine with ``LMCACHE_MAX_LOCAL_CPU_SIZE`` (our per-process value, or the
  operator's through engineOverrides.env): LMCache allocates
  ``int(<value> * 1024**3)`` bytes of pinned memory in every vLLM worker process, times
  the pod's worker processes (``engine_parallelism.vllm_process_count``; one when they
  cannot be read);
- a vLLM engine whose effective ``--kv-transfer-config`` (the last occurrence, as
  argparse reads it) runs vLLM's ``OffloadingConnector``, at the top level or inside a
  ``MultiConnector``: its ``kv_connector_extra_config.cpu_bytes_to_use`` is the CPU
  tier of one engine (``CPUOffloadingSpec`` divides it over the engine's TP x PP
  workers), times the pod's in-pod data-parallel engines
  (``engine_parallelism.vllm_engines_in_pod``), added to what LMCache pins there. From
  vLLM 0.33 that tier is a file in ``/dev/shm`` (``shared_offload_region.py``), so when
  the container mounts a memory-backed emptyDir with a ``sizeLimit`` at ``/dev/shm``
  (type VLLMOffloading renders one: the regions plus headroom for NCCL) the figure is
  the larger of the regions and that ``sizeLimit``: the regions live inside it, so they
  are not counted twice, and what else lands there counts up to the limit;
- the ``lmcache-mp-worker`` sidecar (SGLang + LMCache): its ``--l1-size-gb`` GiB, once
  (one process), judged against the engine container that shares the worker's
  ``/dev/shm`` volume (``lmcache-dshm``, memory-backed, where the L1 lives): that is
  the container the operator sizes (the worker's own limit is rendered to hold its L1
  and is never below it). Without such a container, against the worker's own limit;
- an SGLang HiCache engine with ``--hicache-size``: that many GB (10^9 bytes) per rank,
  times the pod's ranks. ``--hicache-ratio`` is relative to the device pool and cannot
  be turned into bytes from the pod: no figure, no check.

``pinned_host_memory_exceeds_limit`` is the rule: a container whose
``resources.limits.memory`` is below what it pins. A container without a memory limit
is never flagged. The pod is still admitted and wired (fail-open); the finding is a
warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, Final

from shared.quantity import parse_quantity
from shared.runtime_adapters.engine import SUBSCRIBER_CONTAINER
from shared.runtime_adapters.engine_parallelism import (
    sglang_rank_count,
    vllm_engines_in_pod,
    vllm_process_count,
)
from shared.runtime_adapters.kv_config import (
    MULTI_CONNECTOR,
    TransferConfigError,
    multi_connector_entries,
    read_kv_tokens,
)
from shared.runtime_adapters.podspec import cli_tokens, find_flag

LMCACHE_SIZE_ENV: Final = "LMCACHE_MAX_LOCAL_CPU_SIZE"
MP_WORKER: Final = "lmcache-mp-worker"
L1_SIZE_FLAG: Final = "--l1-size-gb"
HICACHE_ENABLE: Final = "--enable-hierarchical-cache"
HICACHE_SIZE: Final = "--hicache-size"
SHM_PATH: Final = "/dev/shm"
OFFLOADING_CONNECTOR: Final = "OffloadingConnector"
CPU_BYTES_KEY: Final = "cpu_bytes_to_use"
GIB: Final = 1024**3
GB: Final = 10**9


@dataclass(frozen=True)
class PinnedHostMemory:
    """What one container pins, how that was counted, and its memory limit."""

    container: str
    pinned_bytes: int
    how: str
    limit: str | None = None  # resources.limits.memory as written
    limit_bytes: Decimal | None = None

    @property
    def over_limit(self) -> bool:
        return self.limit_bytes is not None and self.pinned_bytes > self.limit_bytes


def gib_text(num_bytes: int | Decimal) -> str:
    """``34359738368`` -> ``32 GiB``; ``1.5 GiB``; two decimals at most."""
    text = f"{Decimal(num_bytes) / GIB:.2f}".rstrip("0").rstrip(".")
    return f"{text} GiB"


def memory_limit(container: dict[str, Any]) -> tuple[str | None, Decimal | None]:
    """``resources.limits.memory`` as written and in bytes; (None, None) when unset or
    malformed (the API server refuses a malformed one)."""
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, dict) else None
    value = limits.get("memory") if isinstance(limits, dict) else None
    if value is None:
        return None, None
    try:
        return str(value), parse_quantity(value)
    except (ValueError, ArithmeticError):
        return str(value), None


def _literal_env(container: dict[str, Any], name: str) -> str | None:
    """The last literal value of env ``name`` (the one the process sees)."""
    found = None
    for var in container.get("env") or []:
        if isinstance(var, dict) and var.get("name") == name and "valueFrom" not in var:
            found = str(var.get("value") or "")
    return found


def _last_value(tokens: list[str], flag: str) -> str | None:
    found = find_flag(tokens, flag)
    return found[-1].value if found else None


def _number(text: str | None) -> Decimal | None:
    try:
        value = Decimal((text or "").strip())
    except InvalidOperation:
        return None
    return value if value.is_finite() and value > 0 else None


def _processes_text(count: int, unit: str) -> str:
    return f"{count} {unit}{'' if count == 1 else 'es' if unit == 'process' else 's'}"


def vllm_lmcache_pin(container: dict[str, Any]) -> PinnedHostMemory | None:
    """LMCache's local CPU pools of a vLLM engine container."""
    size = _number(_literal_env(container, LMCACHE_SIZE_ENV))
    if size is None:
        return None
    per_process = int(float(size) * GIB)  # LMCache: int(max_local_cpu_size * 1024**3)
    processes = vllm_process_count(container)
    how = (
        f"{LMCACHE_SIZE_ENV}={_literal_env(container, LMCACHE_SIZE_ENV)} GiB x "
        f"{_processes_text(processes.count, 'process')}"
    )
    return PinnedHostMemory(str(container.get("name")), per_process * processes.count, how)


def _offloading_bytes(config: dict[str, Any]) -> int:
    """``cpu_bytes_to_use`` of every OffloadingConnector a connector config runs (the
    config itself, or a MultiConnector's entries); 0 for none or an unreadable value."""
    configs = [config]
    if config.get("kv_connector") == MULTI_CONNECTOR:
        try:
            configs = multi_connector_entries(config)
        except TransferConfigError:
            return 0
    total = 0
    for entry in configs:
        extra = entry.get("kv_connector_extra_config")
        if entry.get("kv_connector") != OFFLOADING_CONNECTOR or not isinstance(extra, dict):
            continue
        size = _number(str(extra.get(CPU_BYTES_KEY, "")))
        total += int(size) if size is not None else 0
    return total


def memory_backed_shm(volume: dict[str, Any]) -> tuple[bool, int | None]:
    """Whether a pod volume is a memory-backed emptyDir, and its ``sizeLimit`` in bytes
    (None: no limit, or one that does not parse)."""
    empty_dir = volume.get("emptyDir")
    if not isinstance(empty_dir, dict) or empty_dir.get("medium") != "Memory":
        return False, None
    limit = empty_dir.get("sizeLimit")
    if limit is None:
        return True, None
    try:
        return True, int(parse_quantity(limit))
    except (ValueError, ArithmeticError):
        return True, None


def _shm_limit(container: dict[str, Any], volumes: list[Any]) -> int | None:
    """The ``sizeLimit`` of the memory-backed emptyDir the container mounts at /dev/shm."""
    name = _shm_volume(container)
    for volume in volumes:
        if isinstance(volume, dict) and name is not None and volume.get("name") == name:
            return memory_backed_shm(volume)[1]
    return None


def offloading_connector_pin(
    container: dict[str, Any], volumes: list[Any] | None = None
) -> PinnedHostMemory | None:
    """vLLM's own OffloadingConnector CPU tier of the container's effective
    ``--kv-transfer-config``: ``cpu_bytes_to_use`` per engine x the pod's in-pod
    data-parallel engines, or the memory-backed /dev/shm ``sizeLimit`` holding them
    when that is larger (``volumes``: the pod's)."""
    config = read_kv_tokens(cli_tokens(container)).transfer_config
    per_engine = _offloading_bytes(config) if config is not None else 0
    if not per_engine:
        return None
    engines, _ = vllm_engines_in_pod(container)
    count = f"{engines}" if engines.denominator == 1 else f"{float(engines):.2f}"
    how = f"{OFFLOADING_CONNECTOR} {gib_text(per_engine)} x {count} engine" + (
        "" if engines == 1 else "s"
    )
    regions = int(per_engine * engines)
    shm = _shm_limit(container, volumes or [])
    if shm is not None and shm > regions:
        how += f" in {SHM_PATH} (emptyDir sizeLimit {gib_text(shm)})"
        return PinnedHostMemory(str(container.get("name")), shm, how)
    return PinnedHostMemory(str(container.get("name")), regions, how)


def vllm_container_pin(
    container: dict[str, Any], volumes: list[Any] | None = None
) -> PinnedHostMemory | None:
    """What a vLLM engine container pins: LMCache's pools plus the pod's own
    OffloadingConnector tier (and the /dev/shm holding it), summed."""
    offloading = offloading_connector_pin(container, volumes)
    pins = [p for p in (vllm_lmcache_pin(container), offloading) if p]
    if not pins:
        return None
    return PinnedHostMemory(
        pins[0].container, sum(p.pinned_bytes for p in pins), " + ".join(p.how for p in pins)
    )


def mp_worker_pin(container: dict[str, Any]) -> PinnedHostMemory | None:
    """The LMCache MP worker's L1, once."""
    size = _number(_last_value(cli_tokens(container), L1_SIZE_FLAG))
    if size is None:
        return None
    how = f"{MP_WORKER} L1 {L1_SIZE_FLAG} {size} in /dev/shm"
    return PinnedHostMemory(str(container.get("name")), int(size * GIB), how)


def hicache_pin(container: dict[str, Any]) -> PinnedHostMemory | None:
    """SGLang HiCache's host pool: --hicache-size GB per rank."""
    tokens = cli_tokens(container)
    if not find_flag(tokens, HICACHE_ENABLE):
        return None
    size = _number(_last_value(tokens, HICACHE_SIZE))
    if size is None:
        return None
    ranks = sglang_rank_count(container)
    how = f"{HICACHE_SIZE} {size} GB x {_processes_text(ranks.count, 'rank')}"
    return PinnedHostMemory(str(container.get("name")), int(size * GB) * ranks.count, how)


def _with_limit(pin: PinnedHostMemory, container: dict[str, Any]) -> PinnedHostMemory:
    limit, limit_bytes = memory_limit(container)
    return PinnedHostMemory(pin.container, pin.pinned_bytes, pin.how, limit, limit_bytes)


def pinned_host_memory(pod: dict[str, Any]) -> list[PinnedHostMemory]:
    """Every container of the pod the cache wiring adds pinned host memory to."""
    raw = pod.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out: list[PinnedHostMemory] = []
    for container in spec.get("containers") or []:
        if not isinstance(container, dict) or container.get("name") == SUBSCRIBER_CONTAINER:
            continue
        pin = vllm_container_pin(container, spec.get("volumes") or []) or hicache_pin(container)
        if pin is not None:
            out.append(_with_limit(pin, container))
    for container in spec.get("initContainers") or []:
        if isinstance(container, dict) and container.get("name") == MP_WORKER:
            pin = mp_worker_pin(container)
            if pin is not None:
                out += _l1_sharers(pin, container, spec.get("containers") or [])
    return out


def _shm_volume(container: dict[str, Any]) -> str | None:
    for mount in container.get("volumeMounts") or []:
        if isinstance(mount, dict) and str(mount.get("mountPath") or "").rstrip("/") == SHM_PATH:
            return str(mount.get("name"))
    return None


def _l1_sharers(
    pin: PinnedHostMemory, worker: dict[str, Any], containers: list[Any]
) -> list[PinnedHostMemory]:
    """The MP worker's L1, on each engine container sharing its /dev/shm volume (else
    on the worker)."""
    volume = _shm_volume(worker)
    sharers = [
        ct
        for ct in containers
        if isinstance(ct, dict)
        and ct.get("name") != SUBSCRIBER_CONTAINER
        and volume is not None
        and _shm_volume(ct) == volume
    ]
    if not sharers:
        return [_with_limit(pin, worker)]
    return [
        _with_limit(PinnedHostMemory(str(ct.get("name")), pin.pinned_bytes, pin.how), ct)
        for ct in sharers
    ]


def pinned_host_memory_exceeds_limit(pod: dict[str, Any]) -> list[PinnedHostMemory]:
    """The containers whose resources.limits.memory cannot hold what they pin."""
    return [pin for pin in pinned_host_memory(pod) if pin.over_limit]


def host_memory_warning(pin: PinnedHostMemory) -> str:
    """The admission warning (and ``icache admit-pod`` line) for one container; short
    enough for the API server's 256-character warning bound with any container name."""
    return (
        f"container {pin.container!r} pins {gib_text(pin.pinned_bytes)} of host memory "
        f"({pin.how}), over its resources.limits.memory {pin.limit}: it may be "
        "OOM-killed as the cache fills; raise the limit or lower the cache budget"
    )


def host_memory_warnings(pod: dict[str, Any]) -> list[str]:
    return [host_memory_warning(pin) for pin in pinned_host_memory_exceeds_limit(pod)]
