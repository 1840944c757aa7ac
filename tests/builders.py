"""Builders of the objects many test modules need, defined once.

Plain JSON-shaped dicts, as the API server and the webhook see them. A module that
needs a variation composes these rather than redefining them. At the end, the
injection context the wiring tests use and the readers and checks of a wired pod
that the wiring and runtime-adapter tests share.
"""

from __future__ import annotations

import copy
import datetime as dt
import re
from typing import Any

from reconciler.conditions import find
from shared import constants as c
from shared.api.models import CacheBackend
from shared.pod_wiring import WiringResult, wire_pod
from shared.runtime_adapters.base import InjectContext
from shared.runtime_adapters.podcheck import pod_problems
from webhook_svc.admission_review import json_patch


def runtime_for(provider: str) -> str:
    """A runtime whose adapter dials ``provider``: SGLang for Redis (its MP worker's
    L2), vLLM otherwise."""
    return c.RUNTIME_SGLANG if provider == c.PROVIDER_REDIS else c.RUNTIME_VLLM


# --------------------------------------------------------------------------- remoteStorage


def managed(provider: str = c.PROVIDER_LMCACHE_SERVER, **extra: Any) -> dict[str, Any]:
    """A Managed ``spec.remoteStorage`` block."""
    return {"provider": provider, "ownership": c.OWNERSHIP_MANAGED, **extra}


def external(provider: str, endpoint: Any, **extra: Any) -> dict[str, Any]:
    """An External ``spec.remoteStorage`` block; ``endpoint=None`` leaves it out."""
    block: dict[str, Any] = {"provider": provider, "ownership": c.OWNERSHIP_EXTERNAL, **extra}
    if endpoint is not None:
        block["endpoint"] = endpoint
    return block


def managed_spec(provider: str, **extra: Any) -> dict[str, Any]:
    """A spec whose runtime dials a Managed ``provider`` (``extra``: more spec fields)."""
    return {"runtime": runtime_for(provider), "remoteStorage": managed(provider), **extra}


def external_spec(provider: str, endpoint: Any) -> dict[str, Any]:
    """A spec whose runtime dials an External ``provider`` at ``endpoint``."""
    return {"runtime": runtime_for(provider), "remoteStorage": external(provider, endpoint)}


# --------------------------------------------------------------------------- CacheBackend

NS = "team-a"


def cb(
    spec: Any = None,
    name: str = "cache",
    *,
    namespace: str = NS,
    no_spec: bool = False,
    **meta: Any,
) -> dict[str, Any]:
    """A CacheBackend object as JSON; ``meta``: more metadata fields (uid, annotations,
    generation, ...); ``no_spec`` leaves .spec out entirely."""
    obj: dict[str, Any] = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, "namespace": namespace, **meta},
    }
    if not no_spec:
        obj["spec"] = spec
    return obj


def new_cb(name: str, selector: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A CacheBackend as a test creates it through the API server: metadata.name only
    (the request names the namespace); runtime VLLM unless ``runtime`` is given;
    ``selector``: spec.engineSelector.matchLabels; ``spec``: more spec fields."""
    body: dict[str, Any] = {"runtime": c.RUNTIME_VLLM}
    if selector is not None:
        body["engineSelector"] = {"matchLabels": selector}
    body.update(spec)
    return {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": {"name": name}, "spec": body}


MODEL = "Qwen/Qwen3-8B"
UID = "0c8f5a0e-1111-4c3a-9d55-5f4f6c1e2a01"
ENGINE_LABELS = {"app": "engine"}


def backend(
    name: str = "cache",
    *,
    runtime: str = c.RUNTIME_VLLM,
    type_: str | None = None,
    namespace: str | None = NS,
    selector: dict[str, str] | None = None,
    no_selector: bool = False,
    remote: dict[str, Any] | None = None,
    status_endpoint: str | None = None,
    integration: dict[str, Any] | None = None,
    model_id: str | None = MODEL,
    annotations: dict[str, str] | None = None,
    uid: str | None = UID,
    **spec: Any,
) -> dict[str, Any]:
    """A CacheBackend that selects engine pods (``selector``, default app=engine),
    as the Pod webhook reads it: ``status_endpoint`` is a Managed backend's published
    endpoint (with Ready=True); ``spec``: more spec fields."""
    body: dict[str, Any] = {"runtime": runtime}
    if type_:
        body["type"] = type_
    if not no_selector:
        body["engineSelector"] = {"matchLabels": ENGINE_LABELS if selector is None else selector}
    if remote is not None:
        body["remoteStorage"] = remote
    if integration is not None:
        body["integration"] = integration
    if model_id:
        body["observation"] = {"modelID": model_id}
    body.update(spec)
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid:
        metadata["uid"] = uid
    if annotations:
        metadata["annotations"] = annotations
    out: dict[str, Any] = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": metadata,
        "spec": body,
    }
    if status_endpoint is not None:
        out["status"] = {
            "endpoint": status_endpoint,
            "conditions": [
                {
                    "type": c.COND_READY,
                    "status": "True",
                    "reason": c.REASON_BACKEND_READY,
                    "message": "ok",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    return out


def parsed_backend(**kw: Any) -> CacheBackend:
    """:func:`backend` (same arguments) parsed into the model the runtime adapters take."""
    return CacheBackend.model_validate(backend(**kw))


# ------------------------------------------------------- CacheBackend, as status sees it

# The time the status tests reconcile at.
T0 = dt.datetime(2026, 1, 1, 12, 0, 0, tzinfo=dt.UTC)
MANAGED_SPEC: dict[str, Any] = {
    "runtime": "VLLM",
    "remoteStorage": {"provider": "LMCacheServer", "ownership": "Managed"},
}
# The endpoint a Managed backend's cache-server Service publishes.
ENDPOINT = "cb-lmcache-server.ns.svc:65432"
# The annotation that turns the KV-event gate off.
NO_GATE = {"inferencecache.io/require-kv-events": "false"}


def status_backend(
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    generation: int = 1,
) -> dict[str, Any]:
    """CacheBackend ns/cb (uid u) as compute_status reads it: a Managed LMCacheServer
    spec unless ``spec`` is given."""
    o: dict[str, Any] = {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": {"name": "cb", "namespace": "ns", "uid": "u", "generation": generation},
        "spec": spec if spec is not None else dict(MANAGED_SPEC),
    }
    if annotations:
        o["metadata"]["annotations"] = annotations
    if status is not None:
        o["status"] = status
    return o


def condition_of(status: dict[str, Any], type_: str) -> tuple[str, str] | None:
    """(status, reason) of the condition ``type_`` in a CacheBackend status, or None."""
    found = find(status.get("conditions"), type_)
    return (found["status"], found["reason"]) if found else None


# --------------------------------------------------------------------------- engine pods

VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"
# The owner a Deployment's ReplicaSet stamps on the pods it creates.
REPLICASET_OWNER = {
    "apiVersion": "apps/v1",
    "kind": "ReplicaSet",
    "name": "engine-7d9f8b6c5",
    "uid": "rs-uid",
    "controller": True,
    "blockOwnerDeletion": True,
}


def container(name: str = "vllm", image: str = VLLM_IMAGE, **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": image, **extra}


def pod(
    *containers: dict[str, Any],
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    namespace: str | None = NS,
    generate_name: str = "engine-",
    owner: dict[str, Any] | None = None,
    name: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """An engine pod as the Pod webhook sees it at CREATE: generateName, no name or
    uid yet; labels default to app=engine, containers to one vLLM container;
    ``owner``: an ownerReference (``REPLICASET_OWNER`` for a Deployment's pod);
    ``name``: a fixed name instead of generateName (a pod a test creates itself);
    ``spec``: more pod spec fields."""
    metadata: dict[str, Any] = {
        **({"name": name} if name is not None else {"generateName": generate_name}),
        "labels": dict(ENGINE_LABELS) if labels is None else labels,
    }
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = annotations
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": list(containers) or [container()], **spec},
    }


# --------------------------------------------------------------------- AdmissionReview


def admission_review(
    obj: Any,
    *,
    kind: str = "Pod",
    operation: str = "CREATE",
    namespace: str = "default",
    uid: str = "uid-1",
    name: str | None = None,
) -> dict[str, Any]:
    """An admission.k8s.io/v1 AdmissionReview asking about ``obj`` (any JSON value, so
    a hostile one too), of core group kind ``kind``; ``name`` is left out unless given."""
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": kind},
        "operation": operation,
        "namespace": namespace,
    }
    if name is not None:
        request["name"] = name
    request["object"] = obj
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


# ------------------------------------- a backend and its engine pods, as a worker reads them


def selecting_backend(name: str, uid: str, selector: dict[str, str]) -> dict[str, Any]:
    """A host-only vLLM backend: it publishes the engine-side advisory conditions."""
    return {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "generation": 1,
            "resourceVersion": "1",
            "annotations": {"inferencecache.io/require-kv-events": "false"},
        },
        "spec": {"runtime": "VLLM", "engineSelector": {"matchLabels": selector}},
    }


def engine_pod(
    name: str,
    labels: dict[str, str],
    *,
    by: str | None = None,
    uid: str | None = None,
    label_uid: str | None = None,
    crash: bool = False,
) -> dict[str, Any]:
    """An engine pod; ``by``/``uid``: the webhook's annotations, ``label_uid``: its label."""
    annotations = {}
    if by is not None:
        annotations[c.ANNOTATION_INJECTED_BY] = f"{NS}/{by}"
    if uid is not None:
        annotations[c.ANNOTATION_INJECTED_BY_UID] = uid
    pod_labels = dict(labels)
    if label_uid is not None:
        pod_labels[c.LABEL_INJECTED_BY_UID] = label_uid
    status: dict[str, Any] = {}
    if crash:
        status["containerStatuses"] = [
            {"name": "vllm", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
        ]
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"pod-{name}",
            "resourceVersion": "1",
            "labels": pod_labels,
            "annotations": annotations,
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {"containers": [{"name": "vllm", "image": "vllm:1"}]},
        "status": status,
    }


# --------------------------------------------------- wiring a pod, and reading it back

SUBSCRIBER_IMAGE = "ghcr.io/inference-cache/kvevent-subscriber:v1"
CTX = InjectContext(kvevent_subscriber_image=SUBSCRIBER_IMAGE, server_address="icache:50051")
NO_SUB_CTX = InjectContext()


def containers_of(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {ct["name"]: ct for ct in pod["spec"]["containers"]}


def init_containers_of(pod: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {ct["name"]: ct for ct in pod["spec"].get("initContainers") or []}


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def annotations_of(pod: dict[str, Any]) -> dict[str, str]:
    return dict(pod["metadata"].get("annotations") or {})


_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?([KMGTPE]i|[kMGTPE]|m)?$")


def assert_valid_pod(pod: dict[str, Any]) -> None:
    """Kubernetes Pod validation basics the wired pod must pass."""
    assert pod_problems(pod) == set()
    names = [ct["name"] for ct in pod["spec"]["containers"] + pod["spec"].get("initContainers", [])]
    assert len(names) == len(set(names)), names
    volumes = [v["name"] for v in pod["spec"].get("volumes") or []]
    assert len(volumes) == len(set(volumes)), volumes
    for ct in pod["spec"]["containers"] + pod["spec"].get("initContainers", []):
        paths = [m["mountPath"] for m in ct.get("volumeMounts") or []]
        assert len(paths) == len(set(paths)), (ct["name"], paths)
        for mount in ct.get("volumeMounts") or []:
            assert mount["name"] in volumes
        for var in ct.get("env") or []:
            assert re.match(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$", var["name"])
            assert ("value" in var) != ("valueFrom" in var)
            if "value" in var:
                assert isinstance(var["value"], str)
        assert all(isinstance(t, str) for t in ct.get("args") or [])
        assert all(isinstance(t, str) for t in ct.get("command") or [])
        for section in ("limits", "requests"):
            for value in ((ct.get("resources") or {}).get(section) or {}).values():
                assert _QUANTITY.match(str(value)), value
    for vol in pod["spec"].get("volumes") or []:
        size = (vol.get("emptyDir") or {}).get("sizeLimit")
        if size is not None:
            assert _QUANTITY.match(str(size)), size


def assert_idempotent(
    result: WiringResult, backends: list[dict[str, Any]], ctx: InjectContext
) -> None:
    """Re-admitting the wired pod yields an identical pod: an empty JSON patch."""
    again = wire_pod(copy.deepcopy(result.pod), backends, ctx)
    assert again.outcome == result.outcome
    assert json_patch(result.pod, again.pod) == []


def stale_annotations() -> dict[str, str]:
    return {
        c.ANNOTATION_INJECTED_BY: f"{NS}/forged",
        c.ANNOTATION_INJECTED_BY_UID: "forged-uid",
        c.ANNOTATION_INJECT_SKIPPED: c.INJECT_SKIPPED_VALUE,
        "team/keep": "me",
    }


def assert_decision_annotations_stripped(pod: dict[str, Any]) -> None:
    annotations = annotations_of(pod)
    for key in (
        c.ANNOTATION_INJECTED_BY,
        c.ANNOTATION_INJECTED_BY_UID,
        c.ANNOTATION_INJECT_SKIPPED,
    ):
        assert key not in annotations
    assert annotations.get("team/keep") == "me"
