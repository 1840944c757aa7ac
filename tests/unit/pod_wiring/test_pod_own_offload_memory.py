"""Host memory counts what the pod pins itself (docs/api.md, "Host memory per pod"): the
pod's own OffloadingConnector ``cpu_bytes_to_use`` (top-level or inside a
MultiConnector, from the effective --kv-transfer-config) per engine, times the pod's
in-pod data-parallel engines, added to what the LMCache wiring pins."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from shared.runtime_adapters.base import InjectContext
from shared.runtime_adapters.host_memory_fit import offloading_connector_pin, pinned_host_memory
from tests.builders import backend, container, pod

GIB = 1024**3
CTX = InjectContext()


def offloading(gib: int) -> dict[str, Any]:
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": gib * GIB},
    }


def multi(*entries: dict[str, Any]) -> dict[str, Any]:
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"connectors": list(entries)},
    }


NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}


def engine(config: dict[str, Any] | None, *args: str, limit: str | None = None) -> dict[str, Any]:
    kv = ["--kv-transfer-config", json.dumps(config)] if config is not None else []
    resources = {"limits": {"memory": limit}} if limit else {}
    return container(
        image="vllm/vllm-openai:v0.34.0",
        command=["vllm", "serve", "m", *args, *kv],
        resources=resources,
    )


@pytest.mark.parametrize(
    ("config", "args", "expected_gib"),
    [
        (offloading(16), [], 16),
        (offloading(16), ["-tp", "4"], 16),  # one engine: its TP workers share the tier
        (offloading(16), ["-tp", "2", "-dp", "2"], 32),  # two engines in the pod
        (offloading(16), ["-tp", "2", "-dp", "4", "-dpn", "1"], 16),  # one rank per pod
        (offloading(16), ["-tp", "4", "-dp", "2", "--nnodes", "2"], 16),  # half the world
        (multi(NIXL, offloading(8)), [], 8),
        (multi(NIXL, offloading(8), offloading(4)), ["-dp", "2"], 24),
    ],
)
def test_offloading_connector_pin_per_engine_times_engines(
    config: dict[str, Any], args: list[str], expected_gib: int
) -> None:
    pin = offloading_connector_pin(engine(config, *args))
    assert pin is not None
    assert pin.pinned_bytes == expected_gib * GIB


@pytest.mark.parametrize(
    "config", [None, NIXL, multi(NIXL), {"kv_connector": "OffloadingConnector"}]
)
def test_no_offloading_connector_pins_nothing(config: dict[str, Any] | None) -> None:
    assert offloading_connector_pin(engine(config)) is None


def test_only_the_effective_last_config_counts() -> None:
    ct = engine(offloading(16))
    ct["args"] = ["--kv-transfer-config", json.dumps(NIXL)]
    assert offloading_connector_pin(ct) is None


def test_lmcache_and_the_pods_own_tier_add_up() -> None:
    ct = engine(offloading(8))
    ct["env"] = [{"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": "4.0"}]
    (pin,) = pinned_host_memory(pod(ct))
    assert pin.pinned_bytes == 12 * GIB
    assert "OffloadingConnector" in pin.how


def test_wired_pod_warning_counts_its_own_offload() -> None:
    """32Gi LMCache budget + the pod's 16 GiB OffloadingConnector over a 40Gi limit."""
    wired = backend(lmCache={"hostMemory": {"capacity": "32Gi"}})
    result = wire_pod(pod(engine(multi(NIXL, offloading(16)), limit="40Gi")), [wired], CTX)
    assert result.outcome == OUTCOME_INJECTED
    (warning,) = result.warnings
    assert "pins 48 GiB" in warning
    assert "OffloadingConnector 16 GiB" in warning
    assert len(warning) <= 256
    plain = wire_pod(pod(engine(multi(NIXL), limit="40Gi")), [wired], CTX)
    assert plain.warnings == ()
