"""What the rollout and cascade e2e modules share: the LMCacheServer backend they
create, the real Pod webhook registered for a namespace (``wired``), the vLLM engine
Deployment it wires, the admission policies that inject extra containers
(``sidecar_policies``), and readers of the cascade's effects (the restart trigger, the
worker's writes to the engine Deployment, ``observedServerInstance``).

The fixtures here are bound under their own names in each test module that requests
them (``wired = cascade.wired``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kubeio import client as k
from shared.constants import ANNOTATION_CACHE_SERVER_RESTART_TRIGGER as RESTART_TRIGGER
from tests.builders import NO_GATE
from tests.e2e.conftest import WORKER_USER, Cluster, poll
from tests.e2e.workloads import pods_of, wait_rolled_out, workload
from tests.webhook_process import TEST_NAMESPACE_LABEL, WebhookProcess, registered, run_webhook

SERVER = "cb-lmcache-server"


def lmcache_server(**extra: Any) -> dict[str, Any]:
    return {
        "runtime": "VLLM",
        "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
        **extra,
    }


@pytest.fixture
def wired(cluster: Cluster) -> Iterator[str]:
    """A namespace where the real `icache webhook` is registered with the API server:
    engine pods are wired (and stamped injected-by) at admission, as in a cluster."""
    suffix = f"rollouts-{uuid.uuid4().hex[:6]}"
    api = cluster.cp.api_client()
    hook: WebhookProcess
    try:
        with run_webhook(cluster.cp.kubeconfig_path) as hook, registered(api, hook, suffix):
            yield cluster.namespace(labels={TEST_NAMESPACE_LABEL: suffix})
    finally:
        api.close()


ENGINE = "vllm"
ENGINE_LABELS = {"app": "vllm"}
WIRED_SPEC = lmcache_server(engineSelector={"matchLabels": ENGINE_LABELS})
# No kernel-check init container on the GPU engine pods: kwok runs no check to report.
WIRED_ANNOTATIONS = {**NO_GATE, "inferencecache.io/lmcache-kernel-check": "off"}


def engine_deployment(replicas: int = 2) -> dict[str, Any]:
    """A vLLM Deployment on the GPU pool (one nvidia.com/gpu per pod)."""
    container = {
        "name": ENGINE,
        "image": "vllm/vllm-openai:v0.11.0",
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": ENGINE},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": ENGINE_LABELS},
            "template": {
                "metadata": {"labels": ENGINE_LABELS},
                "spec": {"containers": [container]},
            },
        },
    }


def wait_webhook_wires(cluster: Cluster, ns: str, cb: str) -> None:
    """Poll with dry-run pod creations until the webhook wires an engine pod to ``cb``
    (it needs the backend's endpoint in its view first)."""
    template = engine_deployment()["spec"]["template"]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", **template["metadata"]},
            "spec": template["spec"]}  # fmt: skip

    def wired() -> bool:
        pod = cluster.kube.request(
            "POST", k.PODS.collection(ns), query={"dryRun": "All"}, body=body
        )
        annotations = pod["metadata"].get("annotations") or {}
        return annotations.get("inferencecache.io/injected-by") == f"{ns}/{cb}"

    poll(wired, timeout=30, what=f"the webhook wiring engine pods to {ns}/{cb}")


def start_wired_engine(cluster: Cluster, ns: str, cb: dict[str, Any]) -> dict[str, Any]:
    wait_webhook_wires(cluster, ns, cb["metadata"]["name"])
    cluster.kube.create(k.DEPLOYMENTS, ns, engine_deployment())
    dep = wait_rolled_out(cluster, ns, "Deployment", ENGINE)
    for pod in pods_of(cluster, ns, dep):
        annotations = pod["metadata"].get("annotations") or {}
        assert annotations.get("inferencecache.io/injected-by") == f"{ns}/{cb['metadata']['name']}"
        assert annotations.get("inferencecache.io/injected-by-uid") == cb["metadata"]["uid"]
        assert pod["spec"]["nodeName"] in {"kwok-gpu-0", "kwok-gpu-1"}
    return dep


def restart_trigger(cluster: Cluster, ns: str) -> str | None:
    dep = workload(cluster, ns, "Deployment", ENGINE)
    annotations = dep["spec"]["template"]["metadata"].get("annotations") or {}
    return annotations.get(RESTART_TRIGGER)


def engine_writes(cluster: Cluster, ns: str, mark: int) -> list[str]:
    return [
        e.verb
        for e in cluster.cp.write_events(
            mark, user=WORKER_USER, resource="deployments", namespace=ns, name=ENGINE
        )
    ]


def server_instance(obj: dict[str, Any]) -> str:
    return str((obj.get("status") or {}).get("observedServerInstance") or "")


MAP_API = "/apis/admissionregistration.k8s.io/v1beta1"
SIDECAR = "mesh-proxy"


@pytest.fixture
def sidecar_policies(cluster: Cluster) -> Iterator[list[str]]:
    """Names of the (cluster-scoped) sidecar policies a test created; deleted after it."""
    names: list[str] = []
    yield names
    for name in names:
        for kind in ("mutatingadmissionpolicybindings", "mutatingadmissionpolicies"):
            try:
                cluster.kube.request("DELETE", f"{MAP_API}/{kind}/{name}")
            except k.ApiError as exc:
                if not exc.not_found:
                    raise


def inject_sidecar(
    cluster: Cluster, ns: str, match_labels: dict[str, str], created: list[str]
) -> None:
    """A MutatingAdmissionPolicy adding a ``mesh-proxy`` container to the pods of
    ``ns`` carrying ``match_labels``, as a service mesh's webhook would."""
    inject_container(
        cluster, ns, match_labels, created,
        policy_name=f"sidecar-{ns}", field="containers",
        container=f'name: "{SIDECAR}", image: "mesh/proxy:1"',
        container_name=SIDECAR,
    )  # fmt: skip


def inject_container(
    cluster: Cluster,
    ns: str,
    match_labels: dict[str, str],
    created: list[str],
    *,
    policy_name: str,
    field: str,
    container: str,
    container_name: str,
) -> None:
    """A MutatingAdmissionPolicy adding one container (``container``: its CEL fields)
    to ``spec.<field>`` of the pods of ``ns`` carrying ``match_labels``, as another
    admission plugin would; waits until the API server applies it (dry-run pod
    creations)."""
    labels = " && ".join(
        f"{key!r} in object.metadata.labels && object.metadata.labels[{key!r}] == {value!r}"
        for key, value in match_labels.items()
    )
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": policy_name},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"],
                                                    "resources": ["pods"]}]},
            "matchConditions": [{"name": "server-pods",
                                 "expression": f"has(object.metadata.labels) && {labels}"}],
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "mutations": [{"patchType": "ApplyConfiguration", "applyConfiguration": {
                "expression": f"Object{{spec: Object.spec{{{field}: ["
                              f"Object.spec.{field}{{{container}}}]}}}}"}}],
        },
    }  # fmt: skip
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1beta1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": policy_name},
        "spec": {
            "policyName": policy_name,
            "matchResources": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
            },
        },
    }
    created.append(policy_name)
    cluster.kube.request("POST", f"{MAP_API}/mutatingadmissionpolicies", body=policy)
    cluster.kube.request("POST", f"{MAP_API}/mutatingadmissionpolicybindings", body=binding)
    probe = {"apiVersion": "v1", "kind": "Pod",
             "metadata": {"name": f"{policy_name}-probe", "labels": match_labels},
             "spec": {"containers": [{"name": "c", "image": "x"}]}}  # fmt: skip

    def applied() -> bool:
        pod = cluster.kube.request(
            "POST", k.PODS.collection(ns), query={"dryRun": "All"}, body=probe
        )
        return container_name in {c["name"] for c in pod["spec"].get(field) or []}

    poll(applied, timeout=30, what=f"the {policy_name} policy in effect")
