"""The Pod webhook's decision over a vLLM pod's own KV configuration: composed and wired,
or admitted unwired with a reason of its own (the engine's own offloading, an unreadable
config, a connector the release does not register)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared import constants as c
from shared.pod_wiring import (
    OUTCOME_FAIL_OPEN,
    OUTCOME_INJECTED,
    REASON_ENGINE_OFFLOADING,
    REASON_KV_CONFIG_INVALID,
    REASON_KV_CONNECTOR_UNREGISTERED,
    WIRING_REASONS,
    wire_pod,
)
from tests.builders import CTX, NS, annotations_of, containers_of
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod

NIXL = '{"kv_connector":"NixlConnector","kv_role":"kv_both"}'
DECLINED = {
    c.ANNOTATION_INJECT_DECLINED: c.REASON_ENGINE_OFFLOADING_CONFLICT,
    c.ANNOTATION_INJECT_DECLINED_BY: f"{NS}/cache",
}


def vllm_pod(args: list[str], tag: str = "v0.34.0", **kw: Any) -> dict[str, Any]:
    return make_pod(make_container(image=f"vllm/vllm-openai:{tag}", args=args), **kw)


def wire(pod: dict[str, Any]) -> Any:
    return wire_pod(pod, [make_backend("cache")], CTX)


def test_new_reasons_are_in_the_metric_label_set() -> None:
    assert {
        REASON_ENGINE_OFFLOADING,
        REASON_KV_CONFIG_INVALID,
        REASON_KV_CONNECTOR_UNREGISTERED,
    } <= set(WIRING_REASONS)


@pytest.mark.parametrize("tag", ["v0.11.0", "v0.33.0", "v0.34.0"])
def test_engine_offloading_size_is_admitted_untouched_and_not_wired(tag: str) -> None:
    pod = vllm_pod(["--model", "m", "--kv-offloading-size", "64"], tag)
    result = wire(pod)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, REASON_ENGINE_OFFLOADING)
    assert result.pod["spec"] == pod["spec"]
    assert c.REASON_ENGINE_OFFLOADING_CONFLICT in result.message
    assert annotations_of(result.pod) == DECLINED
    assert c.ANNOTATION_INJECTED_BY not in annotations_of(result.pod)


def test_engine_offloading_warning_names_the_flag_and_the_overwrite() -> None:
    result = wire(vllm_pod(["--kv-offloading-size=64"]))
    (warning,) = result.warnings
    assert "--kv-offloading-size 64" in warning
    assert "overwrites the KV connector" in warning
    assert "OffloadingConnector" in warning
    assert len(warning) <= 256  # the API server's bound on one warning


@pytest.mark.parametrize(
    "args",
    [
        ["--kv-offloading-backend", "lmcache", "--kv-offloading-size", "12345678.5"],
        ["--kv-offloading-backend", "something-else-entirely", "--kv-offloading-size", "1"],
    ],
)
@pytest.mark.parametrize("tag", ["v0.11.0", "v0.34.0"])
def test_every_engine_offloading_warning_fits_the_api_servers_bound(
    args: list[str], tag: str
) -> None:
    (warning,) = wire(vllm_pod(args, tag)).warnings
    assert len(warning) <= 256


def test_lmcache_offloading_backend_with_a_size_is_declined_naming_lmcache_mp() -> None:
    pod = vllm_pod(["--kv-offloading-backend", "lmcache", "--kv-offloading-size", "32"])
    result = wire(pod)
    assert result.reason == REASON_ENGINE_OFFLOADING
    assert "LMCacheMPConnector" in result.warnings[0]


def test_engine_offloading_wins_over_a_kv_transfer_config_too() -> None:
    result = wire(vllm_pod(["--kv-transfer-config", NIXL, "--kv-offloading-size", "8"]))
    assert result.reason == REASON_ENGINE_OFFLOADING


def test_offloading_backend_without_a_size_changes_nothing_and_is_wired() -> None:
    result = wire(vllm_pod(["--kv-offloading-backend", "native"]))
    assert result.outcome == OUTCOME_INJECTED
    assert c.ANNOTATION_INJECT_DECLINED not in annotations_of(result.pod)


def test_readmitting_a_declined_pod_changes_nothing() -> None:
    once = wire(vllm_pod(["--kv-offloading-size", "64"]))
    again = wire(once.pod)
    assert again.pod == once.pod
    assert again.reason == REASON_ENGINE_OFFLOADING


def test_every_other_decision_clears_the_declined_record() -> None:
    wired = wire(vllm_pod(["--model", "m"], annotations=dict(DECLINED)))
    assert wired.outcome == OUTCOME_INJECTED
    assert not set(DECLINED) & set(annotations_of(wired.pod))
    skipped = wire(
        vllm_pod(["--model", "m"], annotations={**DECLINED, c.ANNOTATION_SKIP_INJECT: "true"})
    )
    assert not set(DECLINED) & set(annotations_of(skipped.pod))
    unmatched = wire_pod(vllm_pod(["--model", "m"], annotations=dict(DECLINED)), [], CTX)
    assert not set(DECLINED) & set(annotations_of(unmatched.pod))


def test_nixl_pod_is_wired_with_its_connector_first() -> None:
    result = wire(vllm_pod(["--kv-transfer-config", NIXL]))
    assert result.outcome == OUTCOME_INJECTED
    args = containers_of(result.pod)["vllm"]["args"]
    config = json.loads(args[args.index("--kv-transfer-config") + 1])
    assert [e["kv_connector"] for e in config["kv_connector_extra_config"]["connectors"]] == [
        "NixlConnector",
        "LMCacheConnectorV1",
    ]


def test_invalid_json_fails_open_with_its_reason() -> None:
    pod = vllm_pod(["--kv-transfer-config", "{not json"])
    result = wire(pod)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, REASON_KV_CONFIG_INVALID)
    assert result.pod["spec"] == pod["spec"]
    assert "not valid JSON" in result.message


def test_unregistered_connector_fails_open_with_its_reason() -> None:
    pod = vllm_pod(
        ["--kv-transfer-config", '{"kv_connector":"P2pNcclConnector","kv_role":"kv_producer"}']
    )
    result = wire(pod)
    assert (result.outcome, result.reason) == (OUTCOME_FAIL_OPEN, REASON_KV_CONNECTOR_UNREGISTERED)
    assert "vLLM 0.34.0" in result.message
