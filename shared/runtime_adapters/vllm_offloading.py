"""vLLM's built-in CPU KV offloading (type VLLMOffloading): ``OffloadingConnector`` and
the memory-backed ``/dev/shm`` its CPU tier lives in.

Engine wire (all converging, so re-admission returns an equal pod):

- ``--kv-transfer-config {"kv_connector":"OffloadingConnector","kv_role":"kv_both",
  "kv_connector_extra_config":{"cpu_bytes_to_use":<bytes>,"eviction_policy":"lru"|"arc"}}``,
  an explicit config, never ``--kv-offloading-size``: that flag overwrites any
  connector (``VllmConfig._post_init_kv_transfer_config``), so it cannot compose with a
  prefill/decode connector, and it cannot carry the eviction policy (docs/decisions.md);
- ``cpu_bytes_to_use`` is one engine's CPU tier, summed over its TP x PP workers
  (``CPUOffloadingSpec`` multiplies the per-worker block size by the world size before
  dividing it into chunks); every data-parallel engine of the pod has its own, so it is
  ``capacity // engines`` (``engine_parallelism.vllm_engines_in_pod``): the pod's
  engines hold at most ``capacity`` and at least ``capacity - engines`` bytes of it;
- a pod with its own connector (NIXL, Mooncake, LMCache, a MultiConnector) gets a
  ``MultiConnector`` with its connector first, unchanged (``kv_config.compose_transfer_config``);
- ``/dev/shm``: each engine's tier is the file ``/dev/shm/vllm_offload_<engine_id>.mmap``
  of its full size (``vllm/v1/kv_offload/cpu/shared_offload_region.py``), and a
  container's own ``/dev/shm`` is 64 MiB. The engine container gets the memory-backed
  emptyDir ``inferencecache-vllm-offload-shm`` mounted there, sized for every engine's
  region plus headroom for the other users of ``/dev/shm`` (NCCL's shared-memory
  transport, vLLM's shared-memory broadcast queue between workers): 512 MiB per worker
  process, at least 1 GiB. A pod that mounts its own ``/dev/shm`` keeps it: memory-backed
  without a ``sizeLimit``, or with one that holds the regions and the headroom, is used
  as it is; one too small, not memory-backed, read-only, or from an undeclared volume
  makes the wiring fail open with the reason. The user's volume is never rewritten;
- the decision annotation ``inferencecache.io/vllm-offloading``: the bytes per engine,
  the engines, the policy, the ``/dev/shm`` and the release read from the image tag.

Refusals (the pod admitted unwired, flags untouched, with the reason):

- an image tag naming a vLLM release before 0.33.0: 0.11.0 has no offloading flags and
  its OffloadingConnector reads ``num_cpu_blocks``, not ``cpu_bytes_to_use``; releases
  before 0.33.0 have no ``/dev/shm`` region. A tag naming no release gets the newest
  semantics and a note in the decision annotation;
- the pod's own ``--kv-offloading-size`` (any value: vLLM would overwrite our connector
  with its own, sized by the flag) or its own OffloadingConnector (one we did not
  render: a different size or policy);
- engines per pod that cannot be read, or a multi-node engine (a fraction per pod).
"""

from __future__ import annotations

import json
from typing import Any, ClassVar, Final

from shared import constants as c
from shared.api import effective
from shared.api.models import CacheBackend
from shared.bindings import Binding, Protocol
from shared.jsoncopy import json_copy
from shared.quantity import parse_quantity
from shared.runtime_adapters.base import (
    InjectContext,
    InjectionDeclinedError,
    InjectionRejectedError,
    RuntimeAdapter,
)
from shared.runtime_adapters.engine import VLLMEngine
from shared.runtime_adapters.engine_parallelism import vllm_engines_in_pod, vllm_process_count
from shared.runtime_adapters.host_memory_fit import (
    CPU_BYTES_KEY,
    OFFLOADING_CONNECTOR,
    SHM_PATH,
    gib_text,
    memory_backed_shm,
)
from shared.runtime_adapters.kv_config import (
    KV_TRANSFER_CONFIG,
    MULTI_CONNECTOR,
    VLLM_KV_FLAGS,
    KVConfig,
    TransferConfigError,
    composed_pod_transfer_config,
    engine_offloading_declined,
    kv_override_tokens,
    multi_connector_entries,
    read_kv_config,
)
from shared.runtime_adapters.podspec import (
    converge_last_arg,
    find_named,
    mount_at,
    runs_shell_script,
    set_pod_annotation,
    upsert_mount_by_name,
)
from shared.runtime_adapters.vllm_release import image_release, release_text

EVICTION_POLICY_KEY: Final = "eviction_policy"
# CachePolicyFactory's built-in names (vllm/v1/kv_offload/cpu/policies/factory.py).
EVICTION_POLICY_VALUE: Final[dict[str, str]] = {
    c.EVICTION_POLICY_LRU: "lru",
    c.EVICTION_POLICY_ARC: "arc",
}
# The first vLLM whose OffloadingConnector keeps its CPU tier in the /dev/shm region
# sized by cpu_bytes_to_use (shared_offload_region.py).
OFFLOADING_REGION_SINCE: Final[tuple[int, int, int]] = (0, 33, 0)
# The newest release read (the semantics a tag naming no release gets).
NEWEST_READ: Final[tuple[int, int, int]] = (0, 34, 0)
OFFLOAD_SHM_VOLUME: Final = "inferencecache-vllm-offload-shm"
MIB: Final = 1024**2
# /dev/shm headroom beside the regions: NCCL's shared-memory transport and vLLM's
# shared-memory broadcast queue between workers.
SHM_HEADROOM_PER_PROCESS: Final = 512 * MIB
SHM_HEADROOM_MIN: Final = 1024 * MIB
CACHE_NAME: Final = "the CacheBackend's OffloadingConnector"


def offloading_transfer_config(per_engine_bytes: int, policy: str) -> dict[str, Any]:
    """Our connector config, key-ordered so the arg is byte-stable. kv_both, as vLLM's
    own flag path sets it (``_post_init_kv_transfer_config``)."""
    return {
        "kv_connector": OFFLOADING_CONNECTOR,
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            CPU_BYTES_KEY: per_engine_bytes,
            EVICTION_POLICY_KEY: EVICTION_POLICY_VALUE[policy],
        },
    }


def is_offloading_connector(config: dict[str, Any]) -> bool:
    return config.get("kv_connector") == OFFLOADING_CONNECTOR


def release_declined(release: tuple[int, int, int] | None) -> None:
    """Rule: a vLLM release before 0.33.0 is not wired; the reason names it."""
    if release is None or release >= OFFLOADING_REGION_SINCE:
        return
    since = release_text(OFFLOADING_REGION_SINCE)
    raise InjectionDeclinedError(
        f"the image tag names vLLM {release_text(release)}, which has no OffloadingConnector "
        f"CPU tier sized by {CPU_BYTES_KEY} in /dev/shm (from {since}; 0.11.0 has no "
        f"offloading flags and reads num_cpu_blocks): the pod is left unwired; run vLLM "
        f"{since} or later",
        c.WIRING_REASON_ENGINE_RELEASE,
    )


def engines_in_pod(template: dict[str, Any], override_tokens: list[str]) -> int:
    """The pod's data-parallel engines, each with its own region; declines when they
    cannot be read or an engine spans pods (a multi-node launch)."""
    engines, unreadable = vllm_engines_in_pod(template, override_tokens)
    if unreadable is not None:
        raise InjectionDeclinedError(
            f"the engines per pod cannot be read ({unreadable}), so the capacity cannot be "
            "divided among them: the pod is left unwired",
            c.WIRING_REASON_PARALLELISM_UNREADABLE,
        )
    if engines.denominator != 1 or engines < 1:
        raise InjectionDeclinedError(
            f"an engine of this pod spans pods ({float(engines):.2f} engines per pod, a "
            "multi-node launch): the per-pod capacity cannot be placed; the pod is left "
            "unwired",
            c.WIRING_REASON_PARALLELISM_UNREADABLE,
        )
    return int(engines)


def own_offloading_connectors(kv: KVConfig) -> list[dict[str, Any]]:
    """The OffloadingConnector configs of the pod's own --kv-transfer-config (top level or
    MultiConnector entries)."""
    config = kv.transfer_config or {}
    configs = [config]
    if config.get("kv_connector") == MULTI_CONNECTOR:
        try:
            configs = multi_connector_entries(config)
        except TransferConfigError:
            return []  # reported by composed_pod_transfer_config
    return [entry for entry in configs if is_offloading_connector(entry)]


def own_offloading_declined(kv: KVConfig, ours: dict[str, Any], release: Any) -> None:
    """Rule "the pod's own offloading wins": its own --kv-offloading-size (any value) or
    an OffloadingConnector of its own (one that is not exactly ours, a re-admission):
    admitted unwired, flags untouched, with the reason."""
    engine_offloading_declined(kv, release, CACHE_NAME)
    theirs = [entry for entry in own_offloading_connectors(kv) if entry != ours]
    if not theirs:
        return
    extra = theirs[0].get("kv_connector_extra_config")
    size = extra.get(CPU_BYTES_KEY) if isinstance(extra, dict) else None
    warning = (
        f"the pod's {KV_TRANSFER_CONFIG} runs its own {OFFLOADING_CONNECTOR} "
        f"({CPU_BYTES_KEY} {str(size)[:16]}); admitted unwired, flags untouched "
        f"({c.REASON_ENGINE_OFFLOADING_CONFLICT}). Drop it to use the CacheBackend"
    )
    raise InjectionDeclinedError(
        f"{c.REASON_ENGINE_OFFLOADING_CONFLICT}: the pod's own {OFFLOADING_CONNECTOR} wins "
        f"({CPU_BYTES_KEY} {str(size)[:16]}); the pod is admitted unwired with its flags "
        "untouched",
        c.WIRING_REASON_ENGINE_OFFLOADING,
        declined=c.REASON_ENGINE_OFFLOADING_CONFLICT,
        warnings=(warning,),
    )


def shm_bytes(regions: int, processes: int) -> int:
    """What /dev/shm must hold: every engine's region plus the headroom."""
    return regions + max(SHM_HEADROOM_MIN, SHM_HEADROOM_PER_PROCESS * processes)


def mib_quantity(num_bytes: int) -> str:
    """A byte count as a whole-MiB quantity, rounded up: ``68719476736`` -> ``65536Mi``."""
    return f"{-(-num_bytes // MIB)}Mi"


def shm_declined(why: str) -> InjectionDeclinedError:
    return InjectionDeclinedError(
        f"{SHM_PATH}: {why}; the offload regions (/dev/shm/vllm_offload_<engine>.mmap) would "
        "not fit, so the pod is left unwired (the volume is the pod's and is not rewritten)",
        c.WIRING_REASON_DEV_SHM,
    )


def own_shm(pod: dict[str, Any], engine: dict[str, Any], needed: int) -> str | None:
    """How the engine's own ``/dev/shm`` is used: None when the engine mounts none (or
    ours: render it), else the note of the pod's volume kept. Raises when it cannot
    hold ``needed`` bytes."""
    mount = mount_at(engine, SHM_PATH)
    if mount is None or mount.get("name") == OFFLOAD_SHM_VOLUME:
        return None
    name = str(mount.get("name"))
    if mount.get("readOnly"):
        raise shm_declined(f"mounted read-only from volume {name!r}")
    volume = find_named((pod.get("spec") or {}).get("volumes"), name)
    if volume is None:
        raise shm_declined(f"mounted from undeclared volume {name!r}")
    memory, limit = memory_backed_shm(volume)
    if not memory:
        raise shm_declined(f"volume {name!r} is not memory-backed (use emptyDir medium: Memory)")
    if limit is not None and limit < needed:
        raise shm_declined(
            f"volume {name!r} sizeLimit {limit_text(volume)} is below the "
            f"{gib_text(needed)} the regions and their headroom need"
        )
    return f"pod volume {name!r} kept"


def limit_text(volume: dict[str, Any]) -> str:
    return str((volume.get("emptyDir") or {}).get("sizeLimit"))


def capacity_bytes(backend: CacheBackend) -> int:
    capacity = effective.vllm_offloading_capacity(backend.spec)
    if capacity is None:
        raise InjectionRejectedError("spec.vllmOffloading.cpu.capacity is not set")
    return int(parse_quantity(capacity))


def release_note(release: tuple[int, int, int] | None) -> str:
    if release is not None:
        return f"vLLM {release_text(release)}"
    return f"image tag names no vLLM release: newest semantics (vLLM {release_text(NEWEST_READ)})"


class VLLMOffloadingAdapter(VLLMEngine, RuntimeAdapter):
    name: ClassVar[str] = "vLLM+Offloading"
    runtime: ClassVar[str] = c.RUNTIME_VLLM
    cache_type: ClassVar[str] = c.TYPE_VLLM_OFFLOADING
    # The connector, and vLLM's own offloading flags (they overwrite the connector).
    reserved_args: ClassVar[tuple[str, ...]] = VLLM_KV_FLAGS
    # The CPU tier lives in the engine pod: only the host-only binding.
    accepted_protocols: ClassVar[frozenset[Protocol | None]] = frozenset({None})

    def wire(
        self,
        pod: dict[str, Any],
        backend: CacheBackend,
        binding: Binding | None,
        ctx: InjectContext,
    ) -> dict[str, Any]:
        # Everything that can decline is decided before the copy is touched.
        index = self.engine_container_index(pod)
        template = pod["spec"]["containers"][index]
        release = image_release(template)
        release_declined(release)
        tokens = kv_override_tokens(backend)
        engines = engines_in_pod(template, tokens)
        per_engine = capacity_bytes(backend) // engines
        policy = effective.eviction_policy(backend.spec)
        ours = offloading_transfer_config(per_engine, policy)
        kv = read_kv_config(template, tokens)
        own_offloading_declined(kv, ours, release)
        transfer = composed_pod_transfer_config(kv, release, ours, is_ours=is_offloading_connector)
        processes = vllm_process_count(template, tokens).count
        needed = shm_bytes(per_engine * engines, processes)
        kept = own_shm(pod, template, needed)
        if runs_shell_script(template):
            raise InjectionRejectedError(
                f"container {template.get('name')!r} runs a shell script (sh -c); "
                f"{KV_TRANSFER_CONFIG} appended to args would not reach vLLM: put the vLLM "
                "CLI in command/args"
            )

        out = json_copy(pod)
        engine = out["spec"]["containers"][index]
        converge_last_arg(engine, KV_TRANSFER_CONFIG, transfer)
        if kept is None:
            volume = {
                "name": OFFLOAD_SHM_VOLUME,
                "emptyDir": {"medium": "Memory", "sizeLimit": mib_quantity(needed)},
            }
            volumes = [
                v for v in out["spec"].get("volumes") or [] if v.get("name") != OFFLOAD_SHM_VOLUME
            ]
            out["spec"]["volumes"] = [*volumes, volume]
            upsert_mount_by_name(engine, {"name": OFFLOAD_SHM_VOLUME, "mountPath": SHM_PATH})
        shm = kept or f"{OFFLOAD_SHM_VOLUME} {mib_quantity(needed)}"
        decision = {
            "connector": json.loads(transfer)["kv_connector"],
            CPU_BYTES_KEY: per_engine,
            "engines": engines,
            "evictionPolicy": EVICTION_POLICY_VALUE[policy],
            "devShm": shm,
            "release": release_note(release),
        }
        set_pod_annotation(
            out, c.ANNOTATION_VLLM_OFFLOADING, json.dumps(decision, separators=(",", ":"))
        )
        return out
