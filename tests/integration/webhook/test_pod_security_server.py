"""Against a real kube-apiserver: wired engine pods pass Pod Security "restricted" and
a namespace ResourceQuota.

Mutating webhooks run before the PodSecurity and ResourceQuota admission plugins (both
on by default in kube-apiserver), so every container the Pod webhook adds is judged
with the pod: a compliant engine pod must stay compliant once it is wired. In
restricted namespaces whose quota covers requests only, and requests plus limits,
every GPU and CPU engine pod shape the API server admits unwired is admitted wired.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from kubeio.client import PODS, ApiError, Kube
from shared import constants as c
from shared.quantity import parse_quantity
from tests.harness.controlplane import ControlPlane, wait_until
from tests.webhook_process import TEST_NAMESPACE_LABEL, WebhookProcess, registered, run_webhook

GROUP, VERSION, PLURAL = "inferencecache.io", "v1alpha1", "cachebackends"
SUFFIX = "podsec"
SUBSCRIBER_IMAGE = "ghcr.io/inference-cache/kvevent-subscriber:0.1.0"
RESTRICTED_CONTAINER = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
}
QUOTA_HARD = {"cpu": "16", "memory": "64Gi"}


def _namespace(api: client.ApiClient, prefix: str, labels: dict[str, str]) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    body: Any = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {TEST_NAMESPACE_LABEL: SUFFIX, **labels}},
    }
    client.CoreV1Api(api).create_namespace(body)
    return name


def _backends(api: client.ApiClient, ns: str) -> None:
    custom = client.CustomObjectsApi(api)
    observation = {"modelID": "Qwen/Qwen3-8B"}
    for body in (
        {
            "metadata": {
                "name": "a-vllm",
                # Inject the kernel check on a CPU test pod too.
                "annotations": {c.ANNOTATION_LMCACHE_KERNEL_CHECK: "report-only"},
            },
            "spec": {
                "runtime": "VLLM",
                "engineSelector": {"matchLabels": {"app": "vllm"}},
                "observation": observation,
            },
        },
        {
            "metadata": {"name": "b-sglang"},
            "spec": {
                "runtime": "SGLang",
                "engineSelector": {"matchLabels": {"app": "sglang"}},
                "lmCache": {"hostMemory": {"capacity": "2Gi"}},
                "observation": observation,
            },
        },
    ):
        custom.create_namespaced_custom_object(
            GROUP,
            VERSION,
            ns,
            PLURAL,
            {"apiVersion": f"{GROUP}/{VERSION}", "kind": "CacheBackend", **body},
        )


def _quota(api: client.ApiClient, ns: str, hard: dict[str, str] = QUOTA_HARD) -> None:
    """A ResourceQuota, with the status kube-controller-manager would write (the
    admission plugin refuses pods while a quota's usage is unknown)."""
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_resource_quota(
        ns,
        {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "compute"},
            "spec": {"hard": hard},
        },
    )
    quota = core.read_namespaced_resource_quota("compute", ns)
    quota.status = client.V1ResourceQuotaStatus(hard=hard, used={key: "0" for key in hard})
    core.replace_namespaced_resource_quota_status("compute", ns, quota)


# Per-container bounds every engine shape below fits once the API server has applied
# the defaults (LimitRanger defaults the engine's missing requests and limits before the
# Pod webhook runs, and checks every container, added ones included, after it).
LIMIT_RANGE = {
    "type": "Container",
    "min": {"cpu": "50m", "memory": "64Mi"},
    "max": {"cpu": "8", "memory": "32Gi"},
    "default": {"cpu": "2", "memory": "4Gi"},
    "defaultRequest": {"cpu": "500m", "memory": "1Gi"},
    "maxLimitRequestRatio": {"cpu": "4", "memory": "4"},
}


def _limit_range(api: client.ApiClient, ns: str) -> None:
    core: Any = client.CoreV1Api(api)
    core.create_namespaced_limit_range(
        ns,
        {
            "apiVersion": "v1",
            "kind": "LimitRange",
            "metadata": {"name": "bounds"},
            "spec": {"limits": [LIMIT_RANGE]},
        },
    )


RESTRICTED_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
# Restricted namespaces with a quota on requests, and on requests and limits.
QUOTA_SHAPES = {
    "quota-requests": {"requests.cpu": "64", "requests.memory": "256Gi"},
    "quota-limits": {
        "requests.cpu": "64",
        "requests.memory": "256Gi",
        "limits.cpu": "64",
        "limits.memory": "256Gi",
    },
}


@pytest.fixture(scope="module")
def namespaces(
    control_plane: ControlPlane, kube_api_client: client.ApiClient, cachebackend_crd: dict[str, Any]
) -> Iterator[dict[str, str]]:
    extra = ["--kvevent-subscriber-image", SUBSCRIBER_IMAGE]
    hook: WebhookProcess
    with (
        run_webhook(control_plane.kubeconfig_path, extra) as hook,
        registered(kube_api_client, hook, SUFFIX),
    ):
        restricted = _namespace(kube_api_client, "restricted", RESTRICTED_LABELS)
        quota = _namespace(kube_api_client, "quota", {})
        _quota(kube_api_client, quota)
        shaped = {}
        for name, hard in QUOTA_SHAPES.items():
            shaped[name] = _namespace(kube_api_client, name, RESTRICTED_LABELS)
            _quota(kube_api_client, shaped[name], hard)
        limited = _namespace(kube_api_client, "limitrange", RESTRICTED_LABELS)
        _quota(kube_api_client, limited, QUOTA_SHAPES["quota-limits"])
        _limit_range(kube_api_client, limited)
        for ns in (restricted, quota, limited, *shaped.values()):
            _backends(kube_api_client, ns)
        core: Any = client.CoreV1Api(kube_api_client)

        def webhook_wires() -> bool:
            probe = _vllm_pod(f"probe-{uuid.uuid4().hex[:5]}")
            got = core.create_namespaced_pod(restricted, probe, dry_run="All")
            return c.ANNOTATION_INJECTED_BY in (got.metadata.annotations or {})

        wait_until(webhook_wires, timeout=60, description="API server calling the Pod webhook")
        yield {"restricted": restricted, "quota": quota, "limitrange": limited, **shaped}


RESOURCES = {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}}


def _vllm_pod(name: str) -> dict[str, Any]:
    """Restricted-compliant with the identity at pod level."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "vllm"}},
        "spec": {
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 1000,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": "vllm",
                    "image": "vllm/vllm-openai:v0.11.0",
                    "args": ["--model", "Qwen/Qwen3-8B"],
                    "resources": RESOURCES,
                    "securityContext": RESTRICTED_CONTAINER,
                }
            ],
        },
    }


def _sglang_pod(name: str) -> dict[str, Any]:
    """Restricted-compliant with the identity on the engine container only."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "sglang"}},
        "spec": {
            "containers": [
                {
                    "name": "sglang",
                    "image": "lmsysorg/sglang:v0.5.13-cu129",
                    "command": ["python3", "-m", "sglang.launch_server"],
                    "args": ["--model-path", "Qwen/Qwen3-8B"],
                    "resources": RESOURCES,
                    "securityContext": {
                        **RESTRICTED_CONTAINER,
                        "runAsNonRoot": True,
                        "runAsUser": 1000,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                }
            ],
        },
    }


def _create(api: client.ApiClient, ns: str, pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the API server stored it (the shared dict-in, dict-out client)."""
    return Kube(api).create(PODS, ns, pod)


def _names(pod: dict[str, Any], field: str) -> set[str]:
    return {ct["name"] for ct in pod["spec"].get(field) or []}


@pytest.mark.parametrize("kind", ["restricted", "quota"])
def test_wired_vllm_pod_is_admitted(
    kube_api_client: client.ApiClient, namespaces: dict[str, str], kind: str
) -> None:
    """A compliant vLLM engine pod comes out wired (subscriber + kernel check), and the
    API server's PodSecurity / ResourceQuota admission accepts the result."""
    pod = _create(kube_api_client, namespaces[kind], _vllm_pod(f"vllm-{uuid.uuid4().hex[:5]}"))
    assert pod["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY].endswith("/a-vllm")
    assert _names(pod, "containers") == {"vllm", "kvevent-subscriber"}
    assert _names(pod, "initContainers") == {"lmcache-kernel-check"}
    engine = pod["spec"]["containers"][0]
    assert engine["securityContext"] == RESTRICTED_CONTAINER  # untouched


@pytest.mark.parametrize("kind", ["restricted", "quota"])
def test_wired_sglang_pod_is_admitted(
    kube_api_client: client.ApiClient, namespaces: dict[str, str], kind: str
) -> None:
    """A compliant SGLang engine pod comes out wired (MP-worker native sidecar +
    subscriber), and PodSecurity / ResourceQuota admission accepts the result."""
    name = f"sglang-{uuid.uuid4().hex[:5]}"
    pod = _create(kube_api_client, namespaces[kind], _sglang_pod(name))
    assert pod["metadata"]["annotations"][c.ANNOTATION_INJECTED_BY].endswith("/b-sglang")
    assert _names(pod, "containers") == {"sglang", "kvevent-subscriber"}
    assert _names(pod, "initContainers") == {"lmcache-mp-worker"}
    worker = pod["spec"]["initContainers"][0]
    assert worker["securityContext"]["runAsUser"] == 1000  # the engine's identity


def test_quota_counts_the_added_containers(
    kube_api_client: client.ApiClient, namespaces: dict[str, str]
) -> None:
    """ResourceQuota charged the wired pod's requests, sidecars included: the MP worker
    (a restartable init container) adds its request to the engine's."""
    ns = namespaces["quota"]
    core: Any = client.CoreV1Api(kube_api_client)
    before = core.read_namespaced_resource_quota("compute", ns).status.used or {}
    _create(kube_api_client, ns, _sglang_pod(f"sglang-{uuid.uuid4().hex[:5]}"))
    after = core.read_namespaced_resource_quota("compute", ns).status.used or {}
    # engine 1 + subscriber 500m + worker 1 of cpu: each added container requests the
    # engine's request up to its own limit (security.fit_to_engine).
    assert _millicores(after["cpu"]) - _millicores(before.get("cpu", "0")) == 2500


def _millicores(value: str) -> int:
    return int(value[:-1]) if value.endswith("m") else int(value) * 1000


def test_the_api_server_enforces_both_policies_on_unwired_pods(
    kube_api_client: client.ApiClient, namespaces: dict[str, str]
) -> None:
    """Control: PodSecurity and ResourceQuota admission are on in this kube-apiserver, so
    the admissions above prove something. A pod no backend selects (left unwired) is
    rejected when it is not restricted-compliant, and when a container has no requests."""
    loose = _vllm_pod(f"loose-{uuid.uuid4().hex[:5]}")
    loose["metadata"]["labels"] = {"app": "unselected"}
    del loose["spec"]["containers"][0]["securityContext"]
    with pytest.raises(ApiError) as info:
        _create(kube_api_client, namespaces["restricted"], loose)
    assert info.value.status == 403
    assert "PodSecurity" in info.value.body

    no_requests = _vllm_pod(f"noreq-{uuid.uuid4().hex[:5]}")
    no_requests["metadata"]["labels"] = {"app": "unselected"}
    del no_requests["spec"]["containers"][0]["resources"]
    with pytest.raises(ApiError) as info:
        _create(kube_api_client, namespaces["quota"], no_requests)
    assert info.value.status == 403
    assert "must specify" in info.value.body


# Engine resource shapes: GPU and CPU, requests and limits, limits only, requests only.
ENGINE_SHAPES: dict[str, dict[str, Any]] = {
    "gpu-requests-limits": {
        "requests": {"cpu": "2", "memory": "8Gi", "ephemeral-storage": "1Gi"},
        "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
    },
    "gpu-limits": {"limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}},
    "gpu-requests": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": "1"}},
    "cpu-requests-limits": {
        "requests": {"cpu": "1", "memory": "2Gi"},
        "limits": {"cpu": "2", "memory": "4Gi"},
    },
    "cpu-limits": {"limits": {"cpu": "2", "memory": "4Gi"}},
    "cpu-requests": {"requests": {"cpu": "1", "memory": "2Gi"}},
}


def _admitted_unwired(api: client.ApiClient, ns: str, pod: dict[str, Any]) -> bool:
    """Whether the API server admits ``pod`` with no backend selecting it (dry run)."""
    control = copy.deepcopy(pod)
    control["metadata"]["labels"] = {"app": "unselected"}
    core: Any = client.CoreV1Api(api)
    status = 201
    try:
        core.create_namespaced_pod(ns, control, dry_run="All")
    except ApiException as exc:
        status = exc.status
    assert status in (201, 403, 422), status
    return status == 201


@pytest.mark.parametrize("shape", sorted(ENGINE_SHAPES))
@pytest.mark.parametrize("quota", sorted(QUOTA_SHAPES))
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_admissible_engine_pod_is_admitted_wired_under_every_quota_shape(
    kube_api_client: client.ApiClient,
    namespaces: dict[str, str],
    quota: str,
    shape: str,
    engine: str,
) -> None:
    """Rule (the Pod webhook never turns an admissible pod into a refused one): in a
    restricted namespace whose quota covers requests, or requests and limits, every
    engine pod the API server admits on its own is admitted once wired, with the
    kernel check (vLLM) or the MP worker (SGLang) and the subscriber added; the
    kernel check carries the engine's cpu/memory/ephemeral-storage and no GPU."""
    ns = namespaces[quota]
    name = f"{engine}-{uuid.uuid4().hex[:5]}"
    pod = _vllm_pod(name) if engine == "vllm" else _sglang_pod(name)
    pod["spec"]["containers"][0]["resources"] = copy.deepcopy(ENGINE_SHAPES[shape])
    if not _admitted_unwired(kube_api_client, ns, pod):
        # Control: only a quota on limits refuses an engine pod on its own, one that
        # declares no cpu and memory limits; wired, it is refused for the same reason.
        limits = ENGINE_SHAPES[shape].get("limits", {})
        assert quota == "quota-limits", shape
        assert not {"cpu", "memory"} <= set(limits), shape
        with pytest.raises(ApiError) as refused:
            _create(kube_api_client, ns, pod)
        assert "must specify limits.cpu" in refused.value.body
        assert engine in refused.value.body.split("must specify", 1)[1]
        return
    created = _create(kube_api_client, ns, pod)
    assert c.ANNOTATION_INJECTED_BY in created["metadata"]["annotations"]
    inits = {ct["name"]: ct for ct in created["spec"].get("initContainers") or []}
    if engine == "vllm":
        check = inits["lmcache-kernel-check"]
        declared = ENGINE_SHAPES[shape]
        for section in ("requests", "limits"):
            for key in ("cpu", "memory", "ephemeral-storage"):
                if key in declared.get(section, {}):
                    assert check["resources"][section][key] == declared[section][key]
        assert "nvidia.com/gpu" not in str(check["resources"])
    else:
        assert "lmcache-mp-worker" in inits


def _quantity(value: Any) -> Decimal:
    return parse_quantity(str(value))


def _fits(container: dict[str, Any], bounds: dict[str, Any]) -> list[str]:
    """What of the LimitRange item ``bounds`` the container breaks (LimitRanger's checks)."""
    resources = container.get("resources") or {}
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    broken = []
    for name, low in bounds["min"].items():
        if name not in requests or _quantity(requests[name]) < _quantity(low):
            broken.append(f"min {name}")
    for name, high in bounds["max"].items():
        if name not in limits or _quantity(limits[name]) > _quantity(high):
            broken.append(f"max {name}")
    for name, ratio in bounds["maxLimitRequestRatio"].items():
        declared = name in requests and name in limits
        if not declared or _quantity(limits[name]) / _quantity(requests[name]) > _quantity(ratio):
            broken.append(f"ratio {name}")
    return broken


@pytest.mark.parametrize("shape", sorted(ENGINE_SHAPES))
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_an_engine_pod_that_fits_a_limit_range_is_admitted_wired(
    kube_api_client: client.ApiClient, namespaces: dict[str, str], shape: str, engine: str
) -> None:
    """Rule (the Pod webhook never turns an admissible pod into a refused one): in a
    restricted namespace with a quota on requests and limits and a LimitRange of
    per-container min, max, default limits and requests and maxLimitRequestRatio,
    every GPU and CPU engine pod the API server admits on its own is admitted wired,
    and every container the webhook added (subscriber, kernel check, MP worker) is
    within the LimitRange."""
    ns = namespaces["limitrange"]
    name = f"{engine}-{uuid.uuid4().hex[:5]}"
    pod = _vllm_pod(name) if engine == "vllm" else _sglang_pod(name)
    pod["spec"]["containers"][0]["resources"] = copy.deepcopy(ENGINE_SHAPES[shape])
    if not _admitted_unwired(kube_api_client, ns, pod):
        # Control: a shape whose request is over the namespace's default limit (no
        # limit declared) is invalid once defaulted, wired or not.
        assert shape == "gpu-requests", shape
        with pytest.raises(ApiError):
            _create(kube_api_client, ns, pod)
        return
    created = _create(kube_api_client, ns, pod)
    assert c.ANNOTATION_INJECTED_BY in created["metadata"]["annotations"]
    added = [
        ct
        for ct in [*created["spec"]["containers"], *(created["spec"].get("initContainers") or [])]
        if ct["name"] != engine
    ]
    expected = {"kvevent-subscriber"} | (
        {"lmcache-kernel-check"} if engine == "vllm" else {"lmcache-mp-worker"}
    )
    assert {ct["name"] for ct in added} == expected
    for container in added:
        assert _fits(container, LIMIT_RANGE) == [], (container["name"], container["resources"])
