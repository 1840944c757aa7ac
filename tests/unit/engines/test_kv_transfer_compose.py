"""Composing the pod's own ``--kv-transfer-config`` with ours: one rule per shape, and the
connector registry per vLLM release."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from shared.runtime_adapters.kv_config import (
    TransferConfigError,
    compose_transfer_config,
    read_kv_tokens,
)
from shared.runtime_adapters.vllm_release import connector_registered

OURS: dict[str, Any] = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


def is_ours(config: dict[str, Any]) -> bool:
    return str(config.get("kv_connector", "")).startswith("LMCache")


def compose(pod_config: dict[str, Any] | None) -> dict[str, Any]:
    return compose_transfer_config(pod_config, OURS, is_ours=is_ours)


NIXL: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
MOONCAKE_PRODUCER: dict[str, Any] = {
    "kv_connector": "MooncakeConnector",
    "kv_role": "kv_producer",
    "kv_load_failure_policy": "recompute",
    "kv_connector_extra_config": {"num_workers": 4},
}
MULTI: dict[str, Any] = {
    "kv_connector": "MultiConnector",
    "kv_role": "kv_both",
    "kv_connector_extra_config": {
        "connectors": [
            {"kv_connector": "NixlConnector", "kv_role": "kv_both"},
            {
                "kv_connector": "OffloadingConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": {"cpu_bytes_to_use": 1 << 30},
            },
        ],
        "other": 1,
    },
}

SHAPES = [
    pytest.param(None, id="none"),
    pytest.param(dict(OURS), id="ours"),
    pytest.param({"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_producer"}, id="ours-role"),
    pytest.param(NIXL, id="nixl"),
    pytest.param(MOONCAKE_PRODUCER, id="mooncake-producer"),
    pytest.param({**NIXL, "engine_id": "prefill-0"}, id="nixl-engine-id"),
    pytest.param(MULTI, id="multi"),
    pytest.param({"kv_connector": "MultiConnector", "kv_role": "kv_both"}, id="multi-empty"),
]


def test_no_pod_config_gives_ours() -> None:
    assert compose(None) == OURS


def test_pod_naming_our_connector_converges_to_ours() -> None:
    pod = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_consumer", "x": 1}
    assert compose(pod) == OURS


def test_other_connector_is_wrapped_first_and_unchanged_with_ours_after() -> None:
    out = compose(MOONCAKE_PRODUCER)
    assert out["kv_connector"] == "MultiConnector"
    assert out["kv_connector_extra_config"] == {"connectors": [MOONCAKE_PRODUCER, OURS]}


def test_wrapped_connector_keeps_the_pods_role_and_load_failure_policy_at_top_level() -> None:
    out = compose(MOONCAKE_PRODUCER)
    assert out["kv_role"] == "kv_producer"
    assert out["kv_load_failure_policy"] == "recompute"


def test_wrapped_connector_without_a_policy_keeps_vllms_default() -> None:
    assert "kv_load_failure_policy" not in compose(NIXL)


def test_wrapped_connector_engine_id_moves_to_the_top_level() -> None:
    # MultiConnector builds each child as KVTransferConfig(**entry, engine_id=...).
    out = compose({**NIXL, "engine_id": "prefill-0"})
    assert out["engine_id"] == "prefill-0"
    assert out["kv_connector_extra_config"]["connectors"][0] == NIXL


def test_wrapped_connector_without_a_role_gets_ours_at_top_level() -> None:
    out = compose({"kv_connector": "NixlConnector"})
    assert out["kv_role"] == "kv_both"
    assert out["kv_connector_extra_config"]["connectors"][0] == {"kv_connector": "NixlConnector"}


def test_multi_connector_gets_ours_appended_and_keeps_everything_else() -> None:
    out = compose(MULTI)
    expected = copy.deepcopy(MULTI)
    expected["kv_connector_extra_config"]["connectors"].append(OURS)
    assert out == expected


def test_multi_connector_with_an_lmcache_entry_converges_it_in_place() -> None:
    pod = copy.deepcopy(MULTI)
    entries = pod["kv_connector_extra_config"]["connectors"]
    entries.insert(1, {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_consumer"})
    entries.append({"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both"})
    out = compose(pod)
    assert [e["kv_connector"] for e in out["kv_connector_extra_config"]["connectors"]] == [
        "NixlConnector",
        "LMCacheConnectorV1",
        "OffloadingConnector",
    ]
    assert out["kv_connector_extra_config"]["connectors"][1] == OURS


def test_multi_connector_without_a_list_gets_one() -> None:
    out = compose({"kv_connector": "MultiConnector", "kv_role": "kv_both"})
    assert out["kv_connector_extra_config"] == {"connectors": [OURS]}


@pytest.mark.parametrize(
    "extra",
    [{"connectors": "nixl"}, {"connectors": [1]}, "not-an-object"],
)
def test_malformed_multi_connector_cannot_be_composed(extra: Any) -> None:
    with pytest.raises(TransferConfigError):
        compose(
            {
                "kv_connector": "MultiConnector",
                "kv_role": "kv_both",
                "kv_connector_extra_config": extra,
            }
        )


@pytest.mark.parametrize("pod_config", SHAPES)
def test_compose_is_idempotent(pod_config: dict[str, Any] | None) -> None:
    once = compose(pod_config)
    assert compose(once) == once


@pytest.mark.parametrize("pod_config", SHAPES)
def test_compose_leaves_exactly_one_of_ours(pod_config: dict[str, Any] | None) -> None:
    out = compose(pod_config)
    configs = [out, *out.get("kv_connector_extra_config", {}).get("connectors", [])]
    assert sum(is_ours(c) for c in configs) == 1


@pytest.mark.parametrize("pod_config", SHAPES)
def test_compose_does_not_mutate_its_input(pod_config: dict[str, Any] | None) -> None:
    before = copy.deepcopy(pod_config)
    compose(pod_config)
    assert pod_config == before


def test_read_kv_tokens_takes_the_last_occurrence_as_argparse_does() -> None:
    kv = read_kv_tokens(
        ["vllm", "serve", "m", "--kv-transfer-config", '{"a":1}', '--kv-transfer-config={"b":2}']
    )
    assert kv.transfer_config == {"b": 2}
    assert kv.transfer_occurrences == 2


@pytest.mark.parametrize(
    ("name", "release", "expected"),
    [
        ("P2pNcclConnector", (0, 11, 0), True),
        ("P2pNcclConnector", (0, 33, 0), False),
        ("P2pNcclConnector", (0, 34, 0), False),
        ("MooncakeConnector", (0, 11, 0), False),
        ("MooncakeConnector", (0, 33, 0), True),
        ("NixlConnector", (0, 20, 1), True),  # registered at both neighbours
        ("MooncakeConnector", (0, 20, 1), None),  # only the newer neighbour registers it
        ("SharedStorageConnector", (0, 40, 0), None),  # after the newest: maybe re-added
        ("MultiConnector", None, True),  # no release named: the newest semantics
        ("NixlConnector", (0, 10, 0), None),  # before the oldest read
    ],
)
def test_connector_registered_by_release(
    name: str, release: tuple[int, int, int] | None, expected: bool | None
) -> None:
    assert connector_registered(name, release) is expected
