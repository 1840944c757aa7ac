"""Type VLLMOffloading through the Pod webhook's decision: vLLM's OffloadingConnector with
cpu_bytes_to_use over the pod's engines and the eviction policy, composition with the
pod's own connector, the /dev/shm emptyDir, the memory-fit warning, and every refusal
with its reason (docs/api.md "vLLM's built-in offloading")."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import constants as c
from shared.pod_wiring import (
    OUTCOME_FAIL_OPEN,
    OUTCOME_INJECTED,
    REASON_DEV_SHM,
    REASON_ENGINE_OFFLOADING,
    REASON_ENGINE_RELEASE,
    REASON_PARALLELISM_UNREADABLE,
    WiringResult,
    wire_pod,
)
from shared.runtime_adapters.podspec import cli_tokens, find_flag
from shared.runtime_adapters.vllm_offloading import OFFLOAD_SHM_VOLUME, mib_quantity, shm_bytes
from tests.builders import CTX, annotations_of, assert_valid_pod
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod

GIB = 1024**3
CAPACITY = 64 * GIB
NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def offloading_backend(policy: str | None = "LRU", capacity: str = "64Gi") -> dict[str, Any]:
    block: dict[str, Any] = {"cpu": {"capacity": capacity}}
    if policy is not None:
        block["evictionPolicy"] = policy
    return make_backend("cache", type_=c.TYPE_VLLM_OFFLOADING, vllmOffloading=block)


def vllm_pod(
    args: list[str], tag: str = "v0.34.0", limit: str | None = None, **spec: Any
) -> dict[str, Any]:
    extra: dict[str, Any] = {"args": ["--model", "m", *args]}
    if limit is not None:
        extra["resources"] = {"limits": {"memory": limit}}
    return make_pod(make_container(image=f"vllm/vllm-openai:{tag}", **extra), **spec)


def wire(pod: dict[str, Any], **kw: Any) -> WiringResult:
    return wire_pod(pod, [offloading_backend(**kw)], CTX)


def transfer_config(result: WiringResult) -> dict[str, Any]:
    engine = result.pod["spec"]["containers"][0]
    found = find_flag(cli_tokens(engine), "--kv-transfer-config")
    assert len(found) == 1
    value = found[-1].value
    assert value is not None
    parsed: dict[str, Any] = json.loads(value)
    return parsed


def offloading_entry(config: dict[str, Any]) -> dict[str, Any]:
    if config["kv_connector"] == "MultiConnector":
        entries = config["kv_connector_extra_config"]["connectors"]
        return next(e for e in entries if e["kv_connector"] == "OffloadingConnector")
    return config


def shm_volume(result: WiringResult) -> dict[str, Any]:
    return next(v for v in result.pod["spec"]["volumes"] if v["name"] == OFFLOAD_SHM_VOLUME)


@pytest.mark.parametrize(
    ("args", "engines", "processes"),
    [([], 1, 1), (["-tp", "4"], 1, 4), (["-dp", "2"], 2, 2), (["-tp", "2", "-dp", "2"], 2, 4)],
)
@pytest.mark.parametrize("tag", ["v0.33.0", "v0.34.0"])
def test_offloading_connector_holds_the_capacity_over_the_pods_engines(
    args: list[str], engines: int, processes: int, tag: str
) -> None:
    """cpu_bytes_to_use = capacity / in-pod engines (TP and PP ranks share one engine's
    tier); the pod's engines hold at most the capacity and at least 90% of it; the
    /dev/shm emptyDir holds every region plus the headroom."""
    result = wire(vllm_pod(args, tag))
    assert result.outcome == OUTCOME_INJECTED, result.message
    config = transfer_config(result)
    extra = config["kv_connector_extra_config"]
    assert config["kv_connector"] == "OffloadingConnector"
    assert extra["cpu_bytes_to_use"] == CAPACITY // engines
    assert 0.9 * CAPACITY <= extra["cpu_bytes_to_use"] * engines <= CAPACITY
    assert extra["eviction_policy"] == "lru"
    volume = shm_volume(result)
    assert volume["emptyDir"]["medium"] == "Memory"
    assert volume["emptyDir"]["sizeLimit"] == mib_quantity(shm_bytes(CAPACITY, processes))
    mounts = result.pod["spec"]["containers"][0]["volumeMounts"]
    assert {"name": OFFLOAD_SHM_VOLUME, "mountPath": "/dev/shm"} in mounts
    decision = json.loads(annotations_of(result.pod)[c.ANNOTATION_VLLM_OFFLOADING])
    assert decision["engines"] == engines
    assert decision["release"] == f"vLLM {tag[1:]}"
    assert_valid_pod(result.pod)


def test_shm_headroom_is_512_mib_per_worker_and_at_least_1_gib() -> None:
    assert shm_bytes(CAPACITY, 1) == CAPACITY + GIB
    assert shm_bytes(CAPACITY, 4) == CAPACITY + 2 * GIB


def test_arc_policy_is_rendered_and_lru_is_the_default() -> None:
    assert offloading_entry(transfer_config(wire(vllm_pod([]), policy="ARC")))[
        "kv_connector_extra_config"
    ]["eviction_policy"] == ("arc")
    default = wire(vllm_pod([]), policy=None)
    assert offloading_entry(transfer_config(default))["kv_connector_extra_config"][
        "eviction_policy"
    ] == ("lru")


@pytest.mark.parametrize(
    "own",
    [
        NIXL,
        {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"},
        {
            "kv_connector": "MultiConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"connectors": [NIXL]},
        },
    ],
)
def test_pods_own_connector_is_kept_first_in_a_multiconnector(own: dict[str, Any]) -> None:
    """A P/D pod keeps its connector, unchanged and first; ours after it; never the
    --kv-offloading-size flag, which would overwrite it."""
    result = wire(vllm_pod(["--kv-transfer-config", json.dumps(own)]))
    assert result.outcome == OUTCOME_INJECTED, result.message
    config = transfer_config(result)
    assert config["kv_connector"] == "MultiConnector"
    entries = config["kv_connector_extra_config"]["connectors"]
    first = own if own["kv_connector"] != "MultiConnector" else NIXL
    assert entries[0] == first
    assert entries[-1]["kv_connector"] == "OffloadingConnector"
    assert "--kv-offloading-size" not in cli_tokens(result.pod["spec"]["containers"][0])


def test_rewiring_a_wired_pod_is_an_equal_pod() -> None:
    """Idempotent: our own OffloadingConnector and /dev/shm converge."""
    for args in ([], ["--kv-transfer-config", json.dumps(NIXL)]):
        first = wire(vllm_pod(args, limit="512Gi"))
        again = wire(first.pod)
        assert again.outcome == OUTCOME_INJECTED
        assert again.pod == first.pod


@pytest.mark.parametrize("tag", ["v0.11.0", "v0.32.1"])
def test_release_before_0_33_is_refused_naming_the_release(tag: str) -> None:
    result = wire(vllm_pod([], tag))
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, REASON_ENGINE_RELEASE)
    assert f"vLLM {tag[1:]}" in result.message
    assert result.pod["spec"]["containers"][0]["args"] == ["--model", "m"]


def test_tag_naming_no_release_gets_the_newest_semantics_and_a_note() -> None:
    result = wire(vllm_pod([], "latest"))
    assert result.outcome == OUTCOME_INJECTED
    decision = json.loads(annotations_of(result.pod)[c.ANNOTATION_VLLM_OFFLOADING])
    assert "names no vLLM release" in decision["release"]


@pytest.mark.parametrize("size", ["32", "64"])
def test_pods_own_offloading_size_is_refused_with_a_reason(size: str) -> None:
    """Any own --kv-offloading-size: vLLM would overwrite our connector with its own."""
    pod = vllm_pod(["--kv-offloading-size", size])
    result = wire(pod)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, REASON_ENGINE_OFFLOADING)
    assert "--kv-offloading-size" in result.message
    assert result.warnings
    assert result.pod["spec"]["containers"][0]["args"] == pod["spec"]["containers"][0]["args"]
    assert annotations_of(result.pod)[c.ANNOTATION_INJECT_DECLINED] == (
        c.REASON_ENGINE_OFFLOADING_CONFLICT
    )


def test_pods_own_offloading_connector_is_refused_with_a_reason() -> None:
    own = {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": 1024},
    }
    result = wire(vllm_pod(["--kv-transfer-config", json.dumps(own)]))
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, REASON_ENGINE_OFFLOADING)
    assert "OffloadingConnector" in result.message


def test_unreadable_engine_count_is_refused() -> None:
    result = wire(vllm_pod(["--config", "c.yaml"]))
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, REASON_PARALLELISM_UNREADABLE)


def with_shm(volume_source: dict[str, Any], read_only: bool = False) -> dict[str, Any]:
    mount: dict[str, Any] = {"name": "dshm", "mountPath": "/dev/shm"}
    if read_only:
        mount["readOnly"] = True
    pod = vllm_pod([], volumes=[{"name": "dshm", **volume_source}])
    pod["spec"]["containers"][0]["volumeMounts"] = [mount]
    return pod


@pytest.mark.parametrize(
    "source",
    [{"emptyDir": {"medium": "Memory"}}, {"emptyDir": {"medium": "Memory", "sizeLimit": "80Gi"}}],
)
def test_pods_own_memory_backed_shm_that_holds_the_regions_is_kept(source: dict[str, Any]) -> None:
    pod = with_shm(source)
    result = wire(pod)
    assert result.outcome == OUTCOME_INJECTED, result.message
    assert result.pod["spec"]["volumes"] == pod["spec"]["volumes"]
    assert result.pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"}
    ]


@pytest.mark.parametrize(
    ("source", "read_only", "why"),
    [
        ({"emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}, False, "below"),
        ({"emptyDir": {}}, False, "not memory-backed"),
        ({"hostPath": {"path": "/dev/shm"}}, False, "not memory-backed"),
        ({"emptyDir": {"medium": "Memory"}}, True, "read-only"),
    ],
)
def test_pods_own_unfit_shm_fails_open_with_a_reason(
    source: dict[str, Any], read_only: bool, why: str
) -> None:
    pod = with_shm(source, read_only)
    result = wire(pod)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, REASON_DEV_SHM)
    assert why in result.message
    assert result.pod["spec"]["volumes"] == pod["spec"]["volumes"]


@pytest.mark.parametrize(("limit", "warned"), [("48Gi", True), ("512Gi", False), (None, False)])
@pytest.mark.parametrize("args", [[], ["-tp", "2", "-dp", "2"]])
def test_memory_warning_exactly_when_the_limit_cannot_hold_the_shm(
    limit: str | None, warned: bool, args: list[str]
) -> None:
    """Rule: the regions (in the /dev/shm emptyDir, counted once) against the limit;
    still wired; no limit, no warning."""
    result = wire(vllm_pod(args, limit=limit))
    assert result.outcome == OUTCOME_INJECTED
    assert bool(result.warnings) is warned
    if warned:
        assert "OffloadingConnector" in result.warnings[0]
        assert len(result.warnings[0]) <= 256
