"""Pod wiring through a real kube-apiserver calling `icache webhook` over TLS.

The API server applies our JSON patch and runs its own Pod validation on the result;
no kubelet runs, so the pods stay Pending. Spec: "Mutating Pod webhook (engine wiring)".
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from shared import constants as c
from tests.builders import named_pod as _pod
from tests.builders import new_cb
from tests.harness.controlplane import (
    AuditEvent,
    CertificateAuthority,
    ControlPlane,
    free_port,
    wait_until,
)
from tests.webhook_process import (
    Endpoint,
    WebhookProcess,
    labelled_namespace,
    registered,
    run_webhook,
)

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"
SUFFIX = "pods"
# The key prefix of the audit annotation the API server adds when it ignores a failed
# mutating webhook call (failurePolicy Ignore).
FAILED_OPEN_ANNOTATION = "failed-open.mutation.webhook.admission.k8s.io/"
SUBSCRIBER_IMAGE = "ghcr.io/inference-cache/kvevent-subscriber:0.1.0"


@pytest.fixture(scope="module")
def pod_ns(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> Iterator[str]:
    extra = ["--kvevent-subscriber-image", SUBSCRIBER_IMAGE]
    hook: WebhookProcess
    with (
        run_webhook(control_plane.kubeconfig_path, extra) as hook,
        registered(kube_api_client, hook, SUFFIX),
    ):
        ns = labelled_namespace(kube_api_client, f"pods-{uuid.uuid4().hex[:6]}", SUFFIX)
        custom = client.CustomObjectsApi(kube_api_client)
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            new_cb(
                "a-vllm",
                {"app": "vllm"},
                runtime="VLLM",
                lmCache={"hostMemory": {"capacity": "8Gi"}},
                observation={"modelID": "meta-llama/Llama-3.1-8B-Instruct"},
            ),
        )
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            new_cb("b-sglang", {"app": "sglang-mp"}, runtime="SGLang"),
        )
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            new_cb(
                "c-hicache",
                {"app": "sglang-hicache"},
                runtime="SGLang",
                type="SGLangHiCache",
                hiCache={"sizeGB": 16, "writePolicy": "write_through"},
            ),
        )
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            new_cb(
                "d-mooncake",
                {"app": "vllm-mooncake"},
                runtime="VLLM",
                remoteStorage={
                    "provider": "Mooncake",
                    "ownership": "External",
                    "endpoint": "mooncake-master:50051",
                },
                integration={"engineHostNetwork": True},
            ),
        )
        # The typed client wants V1Pod; a plain manifest dict is what it sends anyway.
        core: Any = client.CoreV1Api(kube_api_client)

        def webhook_wires() -> bool:
            probe = _pod(
                f"probe-{uuid.uuid4().hex[:5]}",
                {"app": "vllm"},
                "vllm",
                "vllm/vllm-openai:v0.11.0",
                [],
            )
            got = core.create_namespaced_pod(ns, probe, dry_run="All")
            return c.ANNOTATION_INJECTED_BY in (got.metadata.annotations or {})

        wait_until(webhook_wires, timeout=30, description="API server calling the Pod webhook")
        yield ns


def _create(api: client.ApiClient, ns: str, pod: dict[str, Any]) -> dict[str, Any]:
    core: Any = client.CoreV1Api(api)
    created = core.create_namespaced_pod(ns, pod)
    out: dict[str, Any] = api.sanitize_for_serialization(created)
    return out


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_vllm_pod_comes_back_wired_and_annotated(
    kube_api_client: client.ApiClient, pod_ns: str
) -> None:
    pod = _create(
        kube_api_client,
        pod_ns,
        _pod("vllm-0", {"app": "vllm"}, "vllm", "vllm/vllm-openai:v0.11.0", ["--model", "m"]),
    )
    annotations = pod["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_INJECTED_BY] == f"{pod_ns}/a-vllm"
    backend: Any = client.CustomObjectsApi(kube_api_client).get_namespaced_custom_object(
        GROUP, VERSION, pod_ns, PLURAL, "a-vllm"
    )
    assert annotations[c.ANNOTATION_INJECTED_BY_UID] == backend["metadata"]["uid"]
    engine = pod["spec"]["containers"][0]
    assert engine["args"][:2] == ["--model", "m"]
    i = engine["args"].index("--kv-transfer-config")
    assert json.loads(engine["args"][i + 1]) == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
    }
    env = _env(engine)
    assert env["PYTHONHASHSEED"]
    assert env["INFERENCECACHE_FAIL_OPEN"] == "true"
    assert "LMCACHE_REMOTE_URL" not in env  # host-only
    names = [ctr["name"] for ctr in pod["spec"]["containers"]]
    assert "kvevent-subscriber" in names
    assert pod["status"]["phase"] == "Pending"


def test_mooncake_pod_carries_the_master_address_in_extra_config(
    kube_api_client: client.ApiClient, pod_ns: str
) -> None:
    """Engine fact (LMCache 0.4.7, 0.5.6): the Mooncake connector reads the master address
    from LMCACHE_EXTRA_CONFIG (json.loads), never from the mooncakestore:// URL. The API
    server stores the pod with the downward-API pod-IP variable before the JSON that
    references it (Kubernetes expands $(VAR) only from earlier variables), and the
    template's own object merged in (its protocol wins)."""
    pod = _pod(
        "vllm-mooncake-0",
        {"app": "vllm-mooncake"},
        "vllm",
        "vllm/vllm-openai:v0.11.0",
        ["--model", "m"],
    )
    pod["spec"]["containers"][0]["env"] = [
        {"name": "LMCACHE_EXTRA_CONFIG", "value": '{"protocol":"rdma","device_name":"mlx5_0"}'}
    ]
    created = _create(kube_api_client, pod_ns, pod)
    assert created["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY] == f"{pod_ns}/d-mooncake"
    assert created["spec"]["hostNetwork"] is True
    env = created["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    pod_ip = env[names.index("INFERENCECACHE_POD_IP")]
    assert pod_ip["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert names.index("INFERENCECACHE_POD_IP") < names.index("LMCACHE_EXTRA_CONFIG")
    assert json.loads(env[names.index("LMCACHE_EXTRA_CONFIG")]["value"]) == {
        "device_name": "mlx5_0",
        "local_hostname": "$(INFERENCECACHE_POD_IP)",
        "master_server_address": "mooncake-master:50051",
        "metadata_server": "P2PHANDSHAKE",
        "protocol": "rdma",
    }
    assert _env(created["spec"]["containers"][0])["LMCACHE_REMOTE_URL"] == (
        "mooncakestore://mooncake-master:50051"
    )


def test_sglang_mp_pod_with_native_sidecar_is_accepted(
    kube_api_client: client.ApiClient, pod_ns: str
) -> None:
    """Spec "SGLang LMCache MP mode": the lmcache-mp-worker native sidecar (restartPolicy
    Always) and the shared volumes pass the API server's Pod validation."""
    pod = _create(
        kube_api_client,
        pod_ns,
        _pod(
            "sglang-0",
            {"app": "sglang-mp"},
            "sglang",
            "lmsysorg/sglang:v0.5.13-cu129",
            ["--model-path", "m"],
        ),
    )
    inits = {ctr["name"]: ctr for ctr in pod["spec"].get("initContainers", [])}
    assert inits["lmcache-mp-worker"]["restartPolicy"] == "Always"
    engine = pod["spec"]["containers"][0]
    assert "--enable-lmcache" in engine["args"]
    assert _env(engine)["LMCACHE_USE_EXPERIMENTAL"] == "True"
    volumes = {v["name"] for v in pod["spec"]["volumes"]}
    assert {"lmcache-config", "lmcache-dshm"} <= volumes


def test_hicache_pod_gets_hierarchical_cache_flags(
    kube_api_client: client.ApiClient, pod_ns: str
) -> None:
    pod = _create(
        kube_api_client,
        pod_ns,
        _pod(
            "hicache-0",
            {"app": "sglang-hicache"},
            "server",
            "lmsysorg/sglang:v0.5.13-cu129",
            ["--model-path", "m"],
        ),
    )
    args = pod["spec"]["containers"][0]["args"]
    assert "--enable-hierarchical-cache" in args
    assert args[args.index("--hicache-size") + 1] == "16"
    assert args[args.index("--hicache-write-policy") + 1] == "write_through"


def test_unmatched_pod_is_admitted_unchanged(
    kube_api_client: client.ApiClient, pod_ns: str
) -> None:
    pod = _create(
        kube_api_client,
        pod_ns,
        _pod("other-0", {"app": "other"}, "main", "busybox:1.36", ["sleep", "1"]),
    )
    assert c.ANNOTATION_INJECTED_BY not in (pod["metadata"].get("annotations") or {})
    assert pod["spec"]["containers"][0]["args"] == ["sleep", "1"]


def test_skip_inject_annotation_is_honoured(kube_api_client: client.ApiClient, pod_ns: str) -> None:
    body = _pod("skip-0", {"app": "vllm"}, "vllm", "vllm/vllm-openai:v0.11.0", [])
    body["metadata"]["annotations"] = {c.ANNOTATION_SKIP_INJECT: "true"}
    pod = _create(kube_api_client, pod_ns, body)
    annotations = pod["metadata"]["annotations"]
    assert annotations[c.ANNOTATION_INJECT_SKIPPED] == c.INJECT_SKIPPED_VALUE
    assert c.ANNOTATION_INJECTED_BY not in annotations
    assert "--kv-transfer-config" not in (pod["spec"]["containers"][0].get("args") or [])


def _failed_open(event: AuditEvent) -> list[str]:
    """Mutating webhooks the API server skipped under failurePolicy Ignore for this
    request (it records each in an audit annotation)."""
    annotations: dict[str, str] = event.raw.get("annotations") or {}
    return sorted(
        name for key, name in annotations.items() if key.startswith(FAILED_OPEN_ANNOTATION)
    )


def test_pods_are_created_while_the_webhook_is_down(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> None:
    """Spec "Fail-open": failurePolicy Ignore, so an unreachable webhook never blocks pods."""
    # Nothing listens on this port; the CA is valid but signs nothing served.
    dead = Endpoint(f"https://127.0.0.1:{free_port()}", CertificateAuthority("unused").cert_pem)
    core: Any = client.CoreV1Api(kube_api_client)
    engine = _pod("engine-0", {"app": "vllm"}, "vllm", "vllm/vllm-openai:v0.11.0", [])
    with registered(kube_api_client, dead, "down"):
        ns = labelled_namespace(kube_api_client, f"down-{uuid.uuid4().hex[:6]}", "down")

        def create_audited(dry_run: str | None) -> AuditEvent:
            since = control_plane.audit_offset()
            core.create_namespaced_pod(ns, engine, dry_run=dry_run)
            events = control_plane.wait_for_audit_events(
                since, verbs=["create"], resource="pods", namespace=ns, name="engine-0"
            )
            return events[-1]

        # The API server loads a new configuration shortly after it is created. Until a
        # dry run records that mpod failed open, a create would not exercise fail-open.
        wait_until(
            lambda: _failed_open(create_audited("All")) == ["mpod.inferencecache.io"],
            timeout=30,
            description="the API server to call (and fail open on) the unreachable Pod webhook",
        )
        event = create_audited(None)
        assert event.code == 201
        assert _failed_open(event) == ["mpod.inferencecache.io"]
        pod: Any = core.read_namespaced_pod("engine-0", ns)
        assert pod.spec.containers[0].args is None  # admitted unwired
