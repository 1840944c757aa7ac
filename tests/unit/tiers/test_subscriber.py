"""docs/server-contract.md "The `kvevent-subscriber` sidecar": the rendered container, byte for byte."""

from __future__ import annotations

from typing import Any

import pytest

from shared.pod_wiring import OUTCOME_INJECTED, wire_pod
from shared.runtime_adapters import subscriber
from shared.runtime_adapters.base import InjectContext
from tests.builders import assert_idempotent, assert_valid_pod, containers_of
from tests.builders import backend as make_backend
from tests.builders import container as make_container
from tests.builders import pod as make_pod

IMAGE = "ghcr.io/inference-cache/kvevent-subscriber:v1.2.3"
CTX = InjectContext(kvevent_subscriber_image=IMAGE, server_address="inference-cache-server:50051")


def sub_of(pod: dict[str, Any]) -> dict[str, Any]:
    return containers_of(pod)["kvevent-subscriber"]


def test_offload_vllm_sidecar_exactly_as_the_contract_renders_it() -> None:
    result = wire_pod(make_pod(), [make_backend(model_id="Qwen/Qwen3-8B")], CTX)
    assert sub_of(result.pod) == {
        "name": "kvevent-subscriber",
        "image": IMAGE,
        "args": [
            "--engine-endpoint=tcp://127.0.0.1:5557",
            "--server=inference-cache-server:50051",
            "--replica-id=$(POD_NAME)",
            "--tenant-id=$(POD_NAMESPACE)",
            "--model-id=Qwen/Qwen3-8B",
            "--hash-scheme=vllm",
            "--ignore-block-removed=true",
        ],
        "env": [
            {
                "name": "POD_NAME",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
            },
            {
                "name": "POD_NAMESPACE",
                "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}},
            },
        ],
        "resources": {
            "requests": {"cpu": "10m", "memory": "32Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
            "runAsNonRoot": True,
        },
    }


def test_sidecar_is_a_regular_container_appended_last() -> None:
    pod = make_pod(make_container(), make_container("metrics", image="exporter"))
    result = wire_pod(pod, [make_backend()], CTX)
    assert [ct["name"] for ct in result.pod["spec"]["containers"]] == [
        "vllm",
        "metrics",
        "kvevent-subscriber",
    ]
    assert "restartPolicy" not in sub_of(result.pod)


@pytest.mark.parametrize(("runtime", "scheme"), [("VLLM", "vllm"), ("SGLang", "sglang")])
def test_hash_scheme_from_spec_runtime(runtime: str, scheme: str) -> None:
    engine = (
        make_container("sglang", image="lmsysorg/sglang")
        if runtime == "SGLang"
        else make_container()
    )
    result = wire_pod(make_pod(engine), [make_backend(runtime=runtime)], CTX)
    assert f"--hash-scheme={scheme}" in sub_of(result.pod)["args"]


def test_ignore_block_removed_only_in_offload_mode() -> None:
    offload = wire_pod(make_pod(), [make_backend()], CTX)
    events = wire_pod(make_pod(), [make_backend(integration={"mode": "EventsOnly"})], CTX)
    assert "--ignore-block-removed=true" in sub_of(offload.pod)["args"]
    assert "--ignore-block-removed=true" not in sub_of(events.pod)["args"]
    assert len(sub_of(events.pod)["args"]) == 6


def test_server_address_from_webhook_settings() -> None:
    ctx = InjectContext(kvevent_subscriber_image=IMAGE, server_address="idx.infra.svc:9000")
    result = wire_pod(make_pod(), [make_backend()], ctx)
    assert "--server=idx.infra.svc:9000" in sub_of(result.pod)["args"]


def test_unset_image_means_no_sidecar() -> None:
    result = wire_pod(make_pod(), [make_backend()], InjectContext())
    assert "kvevent-subscriber" not in containers_of(result.pod)


def test_missing_model_id_means_no_sidecar() -> None:
    result = wire_pod(make_pod(), [make_backend(model_id=None)], CTX)
    assert result.outcome == OUTCOME_INJECTED
    assert "kvevent-subscriber" not in containers_of(result.pod)


# --------------------------------------------------------- kv-events port


@pytest.mark.parametrize(
    ("args", "port"),
    [
        ([], 5557),
        (
            [
                "--kv-events-config",
                '{"publisher":"zmq","endpoint":"tcp://*:6001","topic":"kv-events"}',
            ],
            6001,
        ),
        (['--kv-events-config={"publisher":"zmq","endpoint":"tcp://0.0.0.0:7000"}'], 7000),
        (["--kv-events-config", '{"publisher":"zmq"}'], 5557),
        (["--kv-events-config", "not-json"], 5557),
        (["--kv-events-config", '{"endpoint":"ipc:///tmp/kv"}'], 5557),
        (["--kv-events-config", '{"endpoint":"tcp://*:99999"}'], 5557),
    ],
)
def test_engine_kv_events_port_parsed_from_kv_events_config(args: list[str], port: int) -> None:
    assert subscriber.kv_events_port(make_container(args=args)) == port


def test_kv_events_port_read_from_the_engine_container() -> None:
    engine = make_container(
        args=["--kv-events-config", '{"publisher":"zmq","endpoint":"tcp://*:6100"}']
    )
    result = wire_pod(make_pod(engine), [make_backend()], CTX)
    assert sub_of(result.pod)["args"][0] == "--engine-endpoint=tcp://127.0.0.1:6100"


def test_kv_events_port_in_command_is_found() -> None:
    engine = make_container(
        command=["vllm", "serve", "m", "--kv-events-config", '{"endpoint":"tcp://*:6200"}']
    )
    result = wire_pod(make_pod(engine), [make_backend()], CTX)
    assert sub_of(result.pod)["args"][0] == "--engine-endpoint=tcp://127.0.0.1:6200"


def test_events_only_port_found_when_engine_selection_is_ambiguous() -> None:
    pod = make_pod(
        make_container("router", image="envoy"),
        make_container(
            "engine", image="x", args=["--kv-events-config", '{"endpoint":"tcp://*:6300"}']
        ),
        make_container("other", image="y"),
    )
    result = wire_pod(pod, [make_backend(integration={"mode": "EventsOnly"})], CTX)
    assert sub_of(result.pod)["args"][0] == "--engine-endpoint=tcp://127.0.0.1:6300"


# ----------------------------------------------------------- convergence


def test_existing_subscriber_is_converged_not_duplicated() -> None:
    hand_attached = make_container("kvevent-subscriber", image="old:1", args=["--model-id=old"])
    result = wire_pod(make_pod(make_container(), hand_attached), [make_backend()], CTX)
    names = [ct["name"] for ct in result.pod["spec"]["containers"]]
    assert names.count("kvevent-subscriber") == 1
    assert sub_of(result.pod)["image"] == IMAGE


def test_re_admission_is_idempotent_and_valid() -> None:
    backend = make_backend()
    result = wire_pod(make_pod(), [backend], CTX)
    assert_valid_pod(result.pod)
    assert_idempotent(result, [backend], CTX)
