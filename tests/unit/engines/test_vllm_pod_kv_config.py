"""vLLM + LMCache adapter over a pod that carries its own KV configuration: compose,
never clobber; fail open where the pod's config cannot be composed."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.runtime_adapters.base import InjectContext, InjectionRejectedError
from shared.runtime_adapters.kv_config import read_kv_tokens
from shared.runtime_adapters.podspec import cli_tokens
from shared.runtime_adapters.vllm_lmcache import VLLMLMCacheAdapter
from tests.builders import container as make_container
from tests.builders import containers_of
from tests.builders import parsed_backend as backend
from tests.builders import pod as make_pod

ADAPTER = VLLMLMCacheAdapter()
OURS = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
NIXL = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
SERVE = ["vllm", "serve", "m"]


def engine(image_tag: str = "v0.34.0", **extra: Any) -> dict[str, Any]:
    return make_container(image=f"vllm/vllm-openai:{image_tag}", **extra)


def wire(pod: dict[str, Any]) -> dict[str, Any]:
    return ADAPTER.inject(pod, backend(), None, InjectContext())


def effective_config(pod: dict[str, Any]) -> dict[str, Any] | None:
    """What vLLM's argparse reads: the last --kv-transfer-config of command + args."""
    return read_kv_tokens(cli_tokens(containers_of(pod)["vllm"])).transfer_config


def occurrences(pod: dict[str, Any]) -> int:
    return read_kv_tokens(cli_tokens(containers_of(pod)["vllm"])).transfer_occurrences


def test_nixl_in_args_is_composed_first_with_lmcache_after() -> None:
    pod = make_pod(engine(args=["--kv-transfer-config", json.dumps(NIXL)]))
    config = effective_config(wire(pod))
    assert config is not None
    assert config["kv_connector"] == "MultiConnector"
    assert config["kv_connector_extra_config"]["connectors"] == [NIXL, OURS]


def test_config_in_both_command_and_args_leaves_exactly_one() -> None:
    mooncake = {"kv_connector": "MooncakeConnector", "kv_role": "kv_producer"}
    pod = make_pod(
        engine(
            command=[*SERVE, "--kv-transfer-config", json.dumps(NIXL)],
            args=[f"--kv-transfer-config={json.dumps(mooncake)}"],
        )
    )
    out = wire(pod)
    assert occurrences(out) == 1
    config = effective_config(out)
    assert config is not None
    # argparse took the last (args) one: that is the pod's connector kept.
    assert config["kv_connector_extra_config"]["connectors"][0] == mooncake
    assert config["kv_role"] == "kv_producer"


def test_config_only_in_command_is_composed_there() -> None:
    pod = make_pod(engine(command=[*SERVE, "--kv-transfer-config", json.dumps(NIXL)]))
    out = containers_of(wire(pod))["vllm"]
    assert "args" not in out
    assert json.loads(out["command"][4])["kv_connector"] == "MultiConnector"


def test_readmission_of_a_composed_pod_changes_nothing() -> None:
    pod = make_pod(engine(args=["--kv-transfer-config", json.dumps(NIXL)]))
    once = wire(pod)
    assert wire(once) == once


def test_invalid_json_fails_open_with_the_reason() -> None:
    pod = make_pod(engine(args=["--kv-transfer-config", "{nixl"]))
    with pytest.raises(InjectionRejectedError, match="not valid JSON"):
        wire(pod)


@pytest.mark.parametrize("tag", ["v0.33.0", "v0.34.0"])
def test_connector_the_release_does_not_register_fails_open(tag: str) -> None:
    p2p = {"kv_connector": "P2pNcclConnector", "kv_role": "kv_producer"}
    pod = make_pod(engine(tag, args=["--kv-transfer-config", json.dumps(p2p)]))
    with pytest.raises(InjectionRejectedError, match=r"P2pNcclConnector.*does not register"):
        wire(pod)


def test_connector_the_release_registers_is_composed() -> None:
    p2p = {"kv_connector": "P2pNcclConnector", "kv_role": "kv_producer"}
    pod = make_pod(engine("v0.11.0", args=["--kv-transfer-config", json.dumps(p2p)]))
    config = effective_config(wire(pod))
    assert config is not None
    assert config["kv_connector_extra_config"]["connectors"] == [
        p2p,
        OURS,
    ]


def test_unregistered_connector_with_a_module_path_is_composed() -> None:
    own = {"kv_connector": "MyConnector", "kv_role": "kv_both", "kv_connector_module_path": "x.y"}
    pod = make_pod(engine(args=["--kv-transfer-config", json.dumps(own)]))
    config = effective_config(wire(pod))
    assert config is not None
    assert config["kv_connector_extra_config"]["connectors"][0] == own
