"""Per-engine-pod checks: wired, stale uid, wired to a deleted backend, and unwired with
its likely reason. Pure functions of the pod's metadata, the namespace's backends and
what is known of the webhook's availability."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from icache_install.doctor.backends import key_of, pod_labels, ref_of
from icache_install.doctor.findings import Finding, ObjectRef, finding
from icache_install.doctor.install import _time
from shared import constants as c
from shared.api.backend import read_backend_for_wiring
from shared.backend_mode import Mode, backend_mode
from shared.objects import meta, metadata
from shared.pod_wiring import (
    BindingError,
    backend_selects_pod,
    resolve_binding,
    select_backend,
    skip_inject_requested,
)

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class WebhookState:
    """What the cluster records of the Pod webhook's availability."""

    available: bool  # its Deployment is available now
    available_since: dt.datetime | None  # when it last became available
    known: bool = True  # False: its Deployment could not be read


def pod_ref(pod: Obj) -> ObjectRef:
    view = meta(pod)
    return ObjectRef("Pod", view.name, view.namespace)


def roll_hint(pod: Obj) -> str:
    """How to re-create the pod so the webhook admits it again."""
    ns = meta(pod).namespace
    owners = metadata(pod).get("ownerReferences") or []
    owner = owners[0] if owners else None
    if isinstance(owner, Mapping):
        kind, name = str(owner.get("kind", "")), str(owner.get("name", ""))
        template_hash = pod_labels(pod).get("pod-template-hash")
        if kind == "ReplicaSet" and template_hash and name.endswith(f"-{template_hash}"):
            return f"kubectl -n {ns} rollout restart deployment/{name[: -len(template_hash) - 1]}"
        if kind in ("StatefulSet", "DaemonSet", "Deployment"):
            return f"kubectl -n {ns} rollout restart {kind.lower()}/{name}"
        return f"delete the pod; its {kind} {name} re-creates it"
    return f"delete and re-create the pod: kubectl -n {ns} delete pod {meta(pod).name}"


def _needs_endpoint_now(cb: Obj) -> str | None:
    """Why the Pod webhook would fail open for this backend now for want of an
    endpoint (None: it has what it needs)."""
    try:
        backend = read_backend_for_wiring(dict(cb)).model
        resolve_binding(backend)
    except BindingError as exc:
        return str(exc)
    except ValidationError:
        return None
    return None


def _remote_managed(cb: Obj) -> bool:
    """The backend runs a tier we provision (the worker's mode rule)."""
    try:
        return backend_mode(read_backend_for_wiring(dict(cb)).model) == Mode.MANAGED
    except ValidationError:
        return False


def _ready_since(cb: Obj) -> dt.datetime | None:
    for cond in (cb.get("status") or {}).get("conditions") or []:
        if cond.get("type") == c.COND_READY and cond.get("status") == "True":
            return _time(cond.get("lastTransitionTime"))
    return None


def check_pod(pod: Obj, backends: Sequence[Obj], webhook: WebhookState) -> list[Finding]:
    """``backends``: the CacheBackends of the pod's namespace."""
    ref = pod_ref(pod)
    annotations = meta(pod).annotations
    injected_by = annotations.get(c.ANNOTATION_INJECTED_BY)
    injected_uid = annotations.get(c.ANNOTATION_INJECTED_BY_UID)
    by_key = {key_of(b): b for b in backends}
    winner = select_backend([dict(b) for b in backends], ref.namespace, pod_labels(pod))
    roll = roll_hint(pod)
    if injected_by:
        return [_wired(ref, injected_by, injected_uid, by_key, winner, roll)]
    if winner is None:
        return []  # not an engine pod of any backend
    backend = key_of(winner)
    if skip_inject_requested(dict(pod)):
        return [
            finding(
                "pod.SkipInject",
                ref,
                f"selected by {backend} but opted out with {c.ANNOTATION_SKIP_INJECT}",
                "remove the annotation from the pod template and roll the workload to wire it",
                selectedBy=backend,
            )
        ]
    if annotations.get(c.ANNOTATION_INJECT_DECLINED) == c.REASON_ENGINE_OFFLOADING_CONFLICT:
        return [_engine_offloading(ref, backend, roll)]
    return [_unwired(pod, winner, webhook, roll)]


def _engine_offloading(ref: ObjectRef, backend: str, roll: str) -> Finding:
    """A pod the webhook declined: vLLM's own offloading would overwrite the connector."""
    return finding(
        "pod.EngineOffloadingConflict",
        ref,
        f"selected by {backend} but unwired: the engine sets vLLM's own --kv-offloading-size, "
        "which overwrites any KV connector, so the webhook left its flags untouched and did "
        "not wire it",
        "remove --kv-offloading-size (and --kv-offloading-backend) from the engine to use the "
        f"CacheBackend, then roll the workload: {roll}",
        selectedBy=backend,
    )


def _wired(
    ref: ObjectRef,
    injected_by: Any,
    injected_uid: Any,
    by_key: Mapping[str, Obj],
    winner: Obj | None,
    roll: str,
) -> Finding:
    """A pod the webhook stamped: is its backend the live one that selects it now?"""
    live = by_key.get(str(injected_by))
    if live is None:
        return finding(
            "pod.InjectedByMissingBackend",
            ref,
            f"wired by CacheBackend {injected_by}, which no longer exists: the engine "
            "still points at its endpoint",
            f"roll the workload to re-wire it to a live backend: {roll}",
            injectedBy=injected_by,
        )
    live_uid = meta(live).uid
    if not injected_uid:
        return finding(
            "pod.InjectedWithoutUID",
            ref,
            f"names CacheBackend {injected_by} but carries no {c.ANNOTATION_INJECTED_BY_UID}: "
            "the webhook did not stamp this pair (copied annotations?)",
            f"roll the workload so the webhook wires it: {roll}",
            injectedBy=injected_by,
        )
    if injected_uid != live_uid:
        return finding(
            "pod.StaleUID",
            ref,
            f"wired by an earlier CacheBackend {injected_by} (uid {injected_uid}); the "
            f"live one was re-created (uid {live_uid}): the pod may point at an endpoint "
            "that is gone",
            f"roll the workload: {roll}",
            injectedBy=injected_by,
            injectedUID=injected_uid,
            liveUID=live_uid,
        )
    if winner is not None and key_of(winner) != injected_by:
        return finding(
            "pod.WiredToAnotherBackend",
            ref,
            f"wired by {injected_by}, but {key_of(winner)} selects it now (selectors "
            "changed since it was created)",
            f"roll the workload if it should move: {roll}",
            injectedBy=injected_by,
            selectedBy=key_of(winner),
        )
    return finding(
        "pod.Wired",
        ref,
        f"wired by {injected_by} (uid matches the live backend)",
        injectedBy=injected_by,
    )


def _unwired(pod: Obj, cb: Obj, webhook: WebhookState, roll: str) -> Finding:
    ref = pod_ref(pod)
    backend = key_of(cb)
    created = _time(metadata(pod).get("creationTimestamp"))
    cb_created = _time(metadata(cb).get("creationTimestamp"))
    details: dict[str, Any] = {"selectedBy": backend}
    if created:
        details["podCreated"] = created.isoformat()
    if created and cb_created and created < cb_created:
        return finding(
            "pod.UnwiredCreatedBeforeBackend",
            ref,
            f"unwired: created at {created:%H:%M:%S}, before {backend} existed "
            f"({cb_created:%H:%M:%S}); the webhook only wires pods at creation",
            f"roll the workload: {roll}",
            backendCreated=cb_created.isoformat(),
            **details,
        )
    missing = _needs_endpoint_now(cb)
    if missing:
        return finding(
            "pod.UnwiredNoEndpoint",
            ref,
            f"unwired: {backend} has no endpoint yet ({missing}), so the webhook admits its "
            "pods unwired",
            f"wait for {backend} to report its endpoint (see its conditions), then roll: {roll}",
            **details,
        )
    ready = _ready_since(cb)
    if created and ready and _remote_managed(cb) and created < ready:
        return finding(
            "pod.UnwiredCreatedBeforeEndpoint",
            ref,
            f"unwired: created at {created:%H:%M:%S}, before {backend} had its endpoint (Ready "
            f"since {ready:%H:%M:%S})",
            f"roll the workload now that the backend is Ready: {roll}",
            backendReady=ready.isoformat(),
            **details,
        )
    if not webhook.available or (
        created and webhook.available_since and created < webhook.available_since
    ):
        since = (
            f"available only since {webhook.available_since:%H:%M:%S}"
            if webhook.available and webhook.available_since
            else "not available now"
        )
        return finding(
            "pod.UnwiredWebhookDown",
            ref,
            f"unwired: created while the Pod webhook was down (the webhook is {since}; "
            "failurePolicy Ignore admitted the pod unwired)",
            f"roll the workload once the webhook is available: {roll}",
            **details,
        )
    return finding(
        "pod.Unwired",
        ref,
        f"unwired although {backend} selects it and the cluster records no reason: the "
        "webhook failed open for it (a list timeout, an adapter rejection, an events-only "
        "backend without a subscriber image, ...)",
        "check the webhook's logs and inference_cache fail-open metrics (reason label) around "
        "the pod's creation; icache admit-pod on its workload shows the verdict; then roll: "
        + roll,
        **details,
    )


def engine_pods(pods: Sequence[Obj], backends: Sequence[Obj]) -> list[Obj]:
    """The pods a check concerns: selected by a backend of their namespace, or carrying
    the webhook's injected-by annotation."""
    out = []
    for pod in pods:
        annotations = meta(pod).annotations
        ns = meta(pod).namespace
        if annotations.get(c.ANNOTATION_INJECTED_BY) or any(
            ref_of(b).namespace == ns and backend_selects_pod(dict(b), pod_labels(pod))
            for b in backends
        ):
            out.append(pod)
    return out
