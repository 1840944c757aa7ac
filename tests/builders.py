"""Builders of the objects many test modules need, defined once.

Plain JSON-shaped dicts, as the API server and the webhook see them. A module that
needs a variation composes these rather than redefining them. At the end, the
injection context the wiring tests use and the readers and checks of a wired pod
that the wiring and runtime-adapter tests share.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from icache_install.doctor.findings import Finding
from reconciler.watch.engine_deployments import ANNOTATION_DESIRED_REPLICAS, ANNOTATION_REVISION
from shared import constants as c
from shared.api import defaults
from shared.api.models import CacheBackend
from shared.bindings import Binding
from shared.conditions import find
from shared.json_diff import json_patch
from shared.jsoncopy import json_copy
from shared.pod_wiring import WiringResult, wire_pod
from shared.runtime_adapters.base import InjectContext, RuntimeAdapter
from shared.runtime_adapters.podcheck import pod_problems
from shared.validation.context import RuleContext, backend_annotations, judged_form, namespace_of
from shared.validation.schema import parse_spec
from tests.harness.kwok import GPU_RESOURCE, RESTARTS_ANNOTATION


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
    namespace: str | None = NS,
    no_spec: bool = False,
    **meta: Any,
) -> dict[str, Any]:
    """A CacheBackend object as JSON; ``meta``: more metadata fields (uid, annotations,
    generation, ...); ``no_spec`` leaves .spec out entirely; ``namespace=None`` leaves
    it out (the request names it)."""
    where = {} if namespace is None else {"namespace": namespace}
    obj: dict[str, Any] = {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "metadata": {"name": name, **where, **meta},
    }
    if not no_spec:
        obj["spec"] = spec
    return obj


def spec_only_cb(name: str, **spec: Any) -> dict[str, Any]:
    """A CacheBackend named ``name`` whose spec is exactly ``spec``, no runtime added
    (so a broken one too), as a client sends it (the request names the namespace)."""
    return cb(dict(spec), name, namespace=None)


def new_cb(
    name: str,
    selector: dict[str, str] | None = None,
    *,
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A CacheBackend as a test creates it through the API server: metadata.name only
    (the request names the namespace); runtime VLLM unless ``runtime`` is given;
    ``selector``: spec.engineSelector.matchLabels; ``labels``: the backend's own
    metadata.labels; ``spec``: more spec fields."""
    body: dict[str, Any] = {"runtime": c.RUNTIME_VLLM}
    if selector is not None:
        body["engineSelector"] = {"matchLabels": selector}
    body.update(spec)
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": c.API_VERSION, "kind": c.KIND, "metadata": metadata, "spec": body}


def selector_cb(
    ns: str, name: str, labels: dict[str, str] | None, ip: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A vLLM backend as the selector indexes and /snapshot read it: namespace, name and
    spec only; ``labels``: its engineSelector.matchLabels (None: no selector);
    ``ip``: its status.indexParticipation."""
    spec: dict[str, Any] = {"runtime": c.RUNTIME_VLLM}
    if labels is not None:
        spec["engineSelector"] = {"matchLabels": labels}
    o: dict[str, Any] = {"metadata": {"namespace": ns, "name": name}, "spec": spec}
    if ip is not None:
        o["status"] = {"indexParticipation": ip}
    return o


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


def hicache_backend(**hi: Any) -> CacheBackend:
    """An SGLang native HiCache backend; ``hi``: spec.hiCache (default ratio 2.0)."""
    return parsed_backend(runtime="SGLang", type_="SGLangHiCache", hiCache=hi or {"ratio": "2.0"})


def rendered_backend(spec: dict[str, Any], name: str = "cb", namespace: str = "ns") -> CacheBackend:
    """A backend (uid uid-1, generation 1) as the storage providers render it."""
    return CacheBackend.model_validate(
        {
            "metadata": {"name": name, "namespace": namespace, "uid": "uid-1", "generation": 1},
            "spec": spec,
        }
    )


def isolated_backend(
    provider: str,
    *,
    selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> CacheBackend:
    """A backend of a Managed ``provider`` that selects engine pods (``selector``,
    default app=engine), as the tier's NetworkPolicies are rendered from it."""
    body = managed_spec(provider, **spec)
    body["engineSelector"] = {"matchLabels": ENGINE_LABELS if selector is None else selector}
    meta: dict[str, Any] = {"name": "cache", "namespace": NS, "uid": "uid-1"}
    if annotations:
        meta["annotations"] = annotations
    return CacheBackend.model_validate({"metadata": meta, "spec": body})


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
# A Managed LMCacheServer backend selecting the e2e engine pods (app=vllm).
MANAGED_VLLM_SPEC: dict[str, Any] = {
    **MANAGED_SPEC,
    "engineSelector": {"matchLabels": {"app": "vllm"}},
}


def status_backend(
    spec: dict[str, Any] | None = None,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    generation: int = 1,
    uid: str = "u",
) -> dict[str, Any]:
    """CacheBackend ns/cb (uid ``uid``) as compute_status and the reconciler read it:
    a Managed LMCacheServer spec unless ``spec`` is given."""
    o: dict[str, Any] = {
        "apiVersion": "inferencecache.io/v1alpha1",
        "kind": "CacheBackend",
        "metadata": {"name": "cb", "namespace": "ns", "uid": uid, "generation": generation},
        "spec": spec if spec is not None else dict(MANAGED_SPEC),
    }
    if annotations:
        o["metadata"]["annotations"] = annotations
    if status is not None:
        o["status"] = status
    return o


def conditioned_backend(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    """Backend ns/cb carrying only these (type, status, reason) conditions, as the
    condition gauge reads it."""
    return {
        "metadata": {"namespace": "ns", "name": "cb"},
        "status": {"conditions": [{"type": t, "status": s, "reason": r} for t, s, r in conditions]},
    }


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


SGLANG_IMAGE = "lmsysorg/sglang:v0.5.13-cu129"


def sglang_container(name: str = "sglang", **extra: Any) -> dict[str, Any]:
    """An SGLang engine container (:data:`SGLANG_IMAGE`); ``extra``: more fields."""
    return container(name, image=SGLANG_IMAGE, **extra)


def vllm_container(**extra: Any) -> dict[str, Any]:
    """The vLLM engine container the Pod spec cases start from: serving :data:`MODEL`."""
    return {
        "name": "vllm",
        "image": VLLM_IMAGE,
        "args": ["--model", MODEL, "--port", "8000"],
        **extra,
    }


def replicaset_pod(
    *containers: dict[str, Any], labels: dict[str, str] | None = None, **kw: Any
) -> dict[str, Any]:
    """A pod as a Deployment's ReplicaSet creates it: generateName only, the
    pod-template-hash label, the ReplicaSet's ownerReference; one
    :func:`vllm_container` by default; ``kw``: more :func:`pod` arguments."""
    return pod(
        *(containers or (vllm_container(),)),
        labels={**ENGINE_LABELS, "pod-template-hash": "7d9f8b6c5"} if labels is None else labels,
        generate_name="engine-7d9f8b6c5-",
        owner=REPLICASET_OWNER,
        **kw,
    )


def named_pod(
    name: str, labels: dict[str, str], container_name: str, image: str, args: list[str]
) -> dict[str, Any]:
    """A pod of one container that the test names itself (the request names the
    namespace)."""
    return pod(
        container(container_name, image, args=args), labels=labels, namespace=None, name=name
    )


def template_pod(
    template: dict[str, Any], name: str, extra_labels: dict[str, str]
) -> dict[str, Any]:
    """A pod made from a workload's pod ``template``, named ``name``, with
    ``extra_labels`` added to the template's."""
    meta = copy.deepcopy(template["metadata"])
    meta["name"] = name
    meta["labels"] = {**meta.get("labels", {}), **extra_labels}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": template["spec"]}


def stored_pod(name: str, labels: dict[str, str], **extra: Any) -> dict[str, Any]:
    """An engine pod as the API server stores it: namespace :data:`NS`, uid uid-<name>,
    one vLLM container; ``extra["meta"]``: more metadata; other ``extra``: more
    top-level fields (status, ...)."""
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "labels": labels}
    meta.update(extra.pop("meta", {}))
    spec = {"containers": [{"name": "vllm", "image": VLLM_IMAGE}]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, **extra}


def gpu_pod(name: str, gpus: int = 0) -> dict[str, Any]:
    """A pod of one container asking for ``gpus`` GPUs (none: no resources), as the
    harness's kwok nodes schedule it: metadata.name and spec only."""
    box: dict[str, Any] = {"name": "main", "image": "engine:1"}
    if gpus:
        box["resources"] = {"limits": {GPU_RESOURCE: str(gpus)}}
    return {"metadata": {"name": name}, "spec": {"containers": [box]}}


def restarted_pod(restarts: dict[str, int], annotation: str | None = None) -> dict[str, object]:
    """Pod p whose containers have restarted ``restarts`` times; ``annotation``: the
    harness's restart annotation, as kwok reads it."""
    meta: dict[str, object] = {"name": "p"}
    if annotation is not None:
        meta["annotations"] = {RESTARTS_ANNOTATION: annotation}
    statuses = [{"name": name, "restartCount": n} for name, n in restarts.items()]
    return {"metadata": meta, "status": {"containerStatuses": statuses}}


def meta_pod(
    name: str | None = None,
    namespace: str = "ns",
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    uid: str | None = None,
    resource_version: str | None = None,
) -> dict[str, Any]:
    """A pod as the watch caches, selector indexes and pod-event filters read it:
    metadata only, each field left out unless given."""
    meta: dict[str, Any] = {"namespace": namespace}
    for key, value in (
        ("name", name),
        ("uid", uid),
        ("resourceVersion", resource_version),
        ("labels", labels),
        ("annotations", annotations),
    ):
        if value is not None:
            meta[key] = value
    return {"metadata": meta}


def listed_pod(name: str, rv: str, ns: str = "ns", **labels: str) -> dict[str, Any]:
    """:func:`meta_pod` at resourceVersion ``rv``, as a LIST or watch event carries it."""
    return meta_pod(name, ns, labels=labels, resource_version=rv)


def selected_pod(
    ns: str, name: str, labels: dict[str, str], injected: str | None = None
) -> dict[str, Any]:
    """:func:`meta_pod` with ``labels``; ``injected``: its injected-by annotation."""
    annotations = {c.ANNOTATION_INJECTED_BY: injected} if injected else None
    return meta_pod(name, ns, labels=labels, annotations=annotations)


def event_pod(
    annotations: dict[str, str], name: str = "engine-0", uid: str = "pod-uid"
) -> dict[str, Any]:
    """:func:`meta_pod` ns/``name`` at resourceVersion 7, as a pod event carries it."""
    return meta_pod(name, "ns", annotations=annotations, uid=uid, resource_version="7")


def claiming_pod(namespace: str, claim: str) -> dict[str, Any]:
    """A pod (no name) whose injected-by annotation names ``claim``."""
    return meta_pod(namespace=namespace, annotations={c.ANNOTATION_INJECTED_BY: claim})


# --------------------------------------------------------------------- AdmissionReview


ADMISSION_API = "admission.k8s.io/v1"
# The request uid of the CacheBackend reviews (an API server's uid has this shape).
REVIEW_UID = "705ab4f5-6393-11e8-b7cc-42010a800002"
CACHEBACKEND_GVK = {"group": c.GROUP, "version": c.VERSION, "kind": c.KIND}
CACHEBACKEND_GVR = {"group": c.GROUP, "version": c.VERSION, "resource": c.PLURAL}
ADMIN = {"username": "kubernetes-admin", "groups": ["system:masters"]}


def review_of(request: dict[str, Any]) -> dict[str, Any]:
    """The admission.k8s.io/v1 AdmissionReview envelope around ``request`` as given."""
    return {"apiVersion": ADMISSION_API, "kind": "AdmissionReview", "request": request}


def admission_review(
    obj: Any,
    *,
    kind: str = "Pod",
    operation: str = "CREATE",
    namespace: str | None = "default",
    uid: str = "uid-1",
    name: str | None = None,
    resource: str | None = None,
) -> dict[str, Any]:
    """An admission.k8s.io/v1 AdmissionReview asking about ``obj`` (any JSON value, so
    a hostile one too), of core group kind ``kind``; ``name`` is left out unless given,
    ``namespace`` when None; ``resource``: the core group resource the request names."""
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "", "version": "v1", "kind": kind},
    }
    if resource is not None:
        request["resource"] = {"group": "", "version": "v1", "resource": resource}
    request["operation"] = operation
    if namespace is not None:
        request["namespace"] = namespace
    if name is not None:
        request["name"] = name
    request["object"] = obj
    return review_of(request)


def cachebackend_review(
    operation: str,
    obj: Any = None,
    old: Any = None,
    namespace: str | None = NS,
    *,
    uid: str = REVIEW_UID,
    sparse: bool = False,
    **extra: Any,
) -> dict[str, Any]:
    """An AdmissionReview of CacheBackend ``cache`` as the API server sends it: kind,
    resource, requestKind, the admin user, object and oldObject (null when not given)
    and dryRun false. ``sparse``: only uid, kind, resource, name, namespace and
    operation, with object/oldObject only when given. ``extra``: more request fields;
    ``namespace=None`` leaves it out."""
    request: dict[str, Any] = {
        "uid": uid,
        "kind": dict(CACHEBACKEND_GVK),
        "resource": dict(CACHEBACKEND_GVR),
        "name": "cache",
    }
    if sparse:
        request["operation"] = operation
        request.update(extra)
        if obj is not None:
            request["object"] = obj
        if old is not None:
            request["oldObject"] = old
    else:
        request.update(
            {
                "requestKind": dict(CACHEBACKEND_GVK),
                "operation": operation,
                "userInfo": dict(ADMIN),
                "object": obj,
                "oldObject": old,
                "dryRun": False,
                **extra,
            }
        )
    if namespace is not None:
        request["namespace"] = namespace
    return review_of(request)


def workload_review(
    obj: dict[str, Any], old: dict[str, Any] | None = None, user: Any = None
) -> dict[str, Any]:
    """A review of backend team-a/cb as the workload authorization reads it: CREATE,
    or UPDATE from ``old``; ``user``: its userInfo (left out when None)."""
    request: dict[str, Any] = {
        "uid": "r-1",
        "operation": "UPDATE" if old else "CREATE",
        "namespace": "team-a",
        "name": "cb",
        "object": obj,
        "oldObject": old,
    }
    if user is not None:
        request["userInfo"] = user
    return review_of(request)


def example_review(
    path: Path, namespace: str, user: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The example AdmissionReview at ``path`` moved into ``namespace`` (the request's and
    each object's that names one); ``user``: its userInfo instead."""
    body: dict[str, Any] = json.loads(path.read_text())
    request = body["request"]
    request["namespace"] = namespace
    for key in ("object", "oldObject"):
        meta = (request.get(key) or {}).get("metadata")
        if isinstance(meta, dict) and "namespace" in meta:
            meta["namespace"] = namespace
    if user is not None:
        request["userInfo"] = user
    return body


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


@dataclass(frozen=True)
class Injector:
    """One runtime adapter's ``inject``, as its unit tests call it: ``inject(pod)`` wires
    the module's default backend, ``inject(pod, cb, binding)`` their own."""

    adapter: RuntimeAdapter
    default_backend: Callable[[], CacheBackend]
    ctx: InjectContext = field(default_factory=InjectContext)

    def __call__(
        self, pod: dict[str, Any], cb: CacheBackend | None = None, binding: Binding | None = None
    ) -> dict[str, Any]:
        return self.adapter.inject(pod, cb or self.default_backend(), binding, self.ctx)


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


# --------------------------------------------------------------------------- validation


def context_for(obj: Mapping[str, Any], namespace: str = "") -> RuleContext:
    """A rule context for one object (schema defaults applied), to run a single rule;
    raises when the spec does not parse."""
    raw = judged_form(obj)
    spec, errors, _ = parse_spec(dict(raw.get("spec") or {}))
    if spec is None or errors:
        raise ValueError(f"spec does not parse: {[str(e) for e in errors]}")
    return RuleContext(spec, raw, namespace_of(raw, namespace), backend_annotations(raw))


def with_schema_defaults(obj: dict[str, Any]) -> dict[str, Any]:
    """A deep copy of a CacheBackend object with every schema default applied, from the
    schema's root (the reference the product's spec-only defaulting is checked against)."""
    out = json_copy(obj)
    plan = defaults._plan("")
    if plan is not None:
        defaults._apply(plan, out)
    return out


def replicaset(
    name: str,
    owner: str,
    labels: dict[str, str],
    *,
    revision: int | None = 1,
    replicas: int | None = None,
    namespace: str = NS,
) -> dict[str, Any]:
    """A ReplicaSet as the deployment controller makes it: the pod template's labels
    plus pod-template-hash, a controller reference, the revision and desired-replicas
    annotations (None: left out, as on a ReplicaSet no controller made)."""
    annotations = {}
    if revision is not None:
        annotations[ANNOTATION_REVISION] = str(revision)
    if replicas is not None:
        annotations[ANNOTATION_DESIRED_REPLICAS] = str(replicas)
    return {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "resourceVersion": "1",
            "labels": {**labels, "pod-template-hash": name.rsplit("-", 1)[-1]},
            "annotations": annotations,
            "ownerReferences": [
                {"kind": "Deployment", "name": owner, "uid": f"uid-{owner}", "controller": True}
            ],
        }
    }


# ------------------------------------------------ a tier's rendered objects, read back


def by_kind(objs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Rendered objects keyed by kind (one object per kind, as a tier renders them)."""
    return {o["kind"]: o for o in objs}


def network_policies(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The NetworkPolicies among rendered objects."""
    return [o for o in objs if o["kind"] == "NetworkPolicy"]


# --------------------------------------------------------------------------- doctor


def findings_with_code(found: list[Finding], code: str) -> list[Finding]:
    """The doctor's findings of one ``code``, in the order it reported them."""
    return [f for f in found if f.code == code]
