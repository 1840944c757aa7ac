"""`icache doctor` knows type VLLMOffloading: its Ready reasons are explained, and an
engine pod whose memory limit cannot hold the /dev/shm offload regions is the
pinned-host-memory finding (docs/doctor.md)."""

from __future__ import annotations

from typing import Any

from icache_install.doctor.conditions import explain
from icache_install.doctor.findings import Severity
from icache_install.doctor.host_memory import PINNED_HOST_MEMORY_CODE, check_host_memory
from shared import constants as c
from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from tests.builders import CTX
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod


def offloading_backend() -> dict[str, Any]:
    return make_backend(
        "cache", type_=c.TYPE_VLLM_OFFLOADING, vllmOffloading={"cpu": {"capacity": "64Gi"}}
    )


def wired(limit: str) -> dict[str, Any]:
    pod = make_pod(
        make_container(
            image="vllm/vllm-openai:v0.34.0",
            args=["--model", "m", "-dp", "2"],
            resources={"limits": {"memory": limit}},
        ),
        name="engine-a",
    )
    result = wire_pod(pod, [offloading_backend()], CTX)
    assert result.outcome == OUTCOME_INJECTED, result.message
    return result.pod


def test_doctor_explains_the_vllm_offloading_ready_reasons() -> None:
    ok = explain(c.COND_READY, c.REASON_ENGINE_PODS_WIRED)
    waiting = explain(c.COND_READY, c.REASON_NO_ENGINE_PODS_WIRED)
    assert ok is not None
    assert ok.severity == Severity.INFO
    assert waiting is not None
    assert waiting.severity == Severity.WARNING
    assert explain(c.COND_PROGRESSING, c.REASON_NO_ENGINE_PODS_WIRED) is not None


def test_doctor_finds_a_limit_below_the_offload_regions_and_none_above() -> None:
    backend = offloading_backend()
    (found,) = check_host_memory(backend, [wired("48Gi")])
    assert found.code == PINNED_HOST_MEMORY_CODE
    assert "OffloadingConnector 32 GiB x 2 engines" in found.message
    assert check_host_memory(backend, [wired("512Gi")]) == []
