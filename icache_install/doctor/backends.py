"""Per-CacheBackend checks: conditions, observedGeneration, selectors (none matching,
overlapping), Mooncake without engineHostNetwork, failOpen: false. Pure functions."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from icache_install.doctor import conditions
from icache_install.doctor.findings import Finding, ObjectRef, finding
from icache_install.doctor.pod_creation import check_pod_creation
from shared import constants as c
from shared.backend_keys import object_key
from shared.objects import meta, metadata
from shared.pod_wiring import backend_selects_pod, select_backend

Obj = Mapping[str, Any]


def ref_of(cb: Obj) -> ObjectRef:
    view = meta(cb)
    return ObjectRef(c.KIND, view.name, view.namespace)


def key_of(obj: Obj) -> str:
    """The object's ``ns/name`` text (the worker's key form)."""
    return str(object_key(obj))


def _spec(cb: Obj) -> Mapping[str, Any]:
    spec = cb.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _block(cb: Obj, key: str) -> Mapping[str, Any]:
    value = _spec(cb).get(key)
    return value if isinstance(value, Mapping) else {}


def selector_of(cb: Obj) -> dict[str, str]:
    selector = _spec(cb).get("engineSelector") or {}
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, Mapping) else {}


def pod_labels(pod: Obj) -> dict[str, str]:
    return {str(k): str(v) for k, v in meta(pod).labels.items()}


def check_conditions(cb: Obj) -> list[Finding]:
    ref = ref_of(cb)
    ns, name = ref.namespace, ref.name
    status = cb.get("status") or {}
    conds = status.get("conditions") or []
    if not conds:
        return [
            finding(
                "backend.NotReconciled",
                ref,
                "the backend has no status conditions: the controller has not reconciled it",
                "check the install findings above (dispatcher Lease, worker Deployment), then "
                "the workers' logs",
            )
        ]
    out: list[Finding] = []
    for cond in conds:
        type_, reason = str(cond.get("type", "")), str(cond.get("reason", ""))
        message = str(cond.get("message") or "").strip()
        explained = conditions.explain(type_, reason)
        details = {
            "type": type_,
            "status": cond.get("status"),
            "reason": reason,
            "conditionMessage": message,
        }
        if explained is None:
            out.append(
                finding(
                    "backend.UnknownCondition",
                    ref,
                    f"{type_}={cond.get('status')} with reason {reason!r}, which the spec does "
                    f"not define{': ' + message if message else ''}",
                    "check that the controller and icache are the same release",
                    **details,
                )
            )
            continue
        text = f"{type_}={cond.get('status')} ({reason}): {explained.sentence}"
        if message:
            text += f". {message}"
        out.append(
            Finding(
                f"backend.{type_}.{reason}",
                explained.severity,
                ref,
                text,
                explained.next_step.format(ns=ns, name=name),
                details,
            )
        )
    return out


def check_generation(cb: Obj) -> list[Finding]:
    generation = metadata(cb).get("generation")
    observed = (cb.get("status") or {}).get("observedGeneration")
    if not isinstance(generation, int) or not isinstance(observed, int) or observed >= generation:
        return []
    return [
        finding(
            "backend.ObservedGenerationLagging",
            ref_of(cb),
            f"status describes generation {observed}, the spec is at {generation}: the "
            "conditions above may be out of date",
            "wait a reconcile (30s); if it persists, check the dispatcher Lease and the workers",
            generation=generation,
            observedGeneration=observed,
        )
    ]


def check_spec(cb: Obj) -> list[Finding]:
    ref = ref_of(cb)
    integration = _block(cb, "integration")
    remote = _block(cb, "remoteStorage")
    out: list[Finding] = []
    if (
        remote.get("provider") == c.PROVIDER_MOONCAKE
        and integration.get("engineHostNetwork") is not True
    ):
        out.append(
            finding(
                "backend.MooncakeWithoutHostNetwork",
                ref,
                "Mooncake without spec.integration.engineHostNetwork: engine pods stay on the "
                "overlay network and transfer zero KV while the backend reports Ready",
                "set spec.integration.engineHostNetwork: true, then roll the engine workloads",
            )
        )
    if integration.get("failOpen") is False:
        out.append(
            finding(
                "backend.FailClosed",
                ref,
                "failOpen: false: the cache is a serving dependency; an unreachable cache "
                "stops the engines instead of falling back to local prefill",
                "set spec.integration.failOpen: true unless fail-closed serving is intended",
            )
        )
    return out


def check_selector(cb: Obj, pods: Sequence[Obj]) -> list[Finding]:
    """``pods``: the pods of the backend's namespace."""
    ref = ref_of(cb)
    selector = selector_of(cb)
    if not selector:
        return [
            finding(
                "backend.NoEngineSelector",
                ref,
                "no spec.engineSelector.matchLabels: the backend claims no pod (an empty selector "
                "never matches)",
                "set spec.engineSelector.matchLabels to the engine pods' template labels",
            )
        ]
    if any(backend_selects_pod(dict(cb), pod_labels(p)) for p in pods):
        return []
    shown = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
    return [
        finding(
            "backend.SelectorMatchesNoPod",
            ref,
            f"no pod in {ref.namespace} matches spec.engineSelector.matchLabels ({shown})",
            f"compare with the engine pods' labels: kubectl -n {ref.namespace} get pods "
            "--show-labels (the selector matches the pod template's labels)",
            selector=selector,
        )
    ]


def _could_both_match(a: Mapping[str, str], b: Mapping[str, str]) -> bool:
    """Some pod's labels satisfy both selectors (no key asks for two values)."""
    return bool(a) and bool(b) and all(b.get(k, v) == v for k, v in a.items())


def check_overlaps(backends: Sequence[Obj], pods: Sequence[Obj]) -> list[Finding]:
    """Backends of one namespace whose selectors claim the same pods. The Pod webhook
    wires a pod to the first match in the API server's list order (by name)."""
    ordered = sorted(backends, key=lambda b: meta(b).name)
    out: list[Finding] = []
    for i, first in enumerate(ordered):
        for later in ordered[i + 1 :]:
            sa, sb = selector_of(first), selector_of(later)
            if not _could_both_match(sa, sb):
                continue
            shared = [
                p
                for p in pods
                if backend_selects_pod(dict(first), pod_labels(p))
                and backend_selects_pod(dict(later), pod_labels(p))
            ]
            namespace = ref_of(first).namespace
            chosen = (
                select_backend([dict(b) for b in ordered], namespace, pod_labels(shared[0]))
                if shared
                else None
            )
            winner = ref_of(chosen).name if chosen else ref_of(first).name
            names = [meta(p).name for p in shared[:3]]
            pods_text = (
                f"{len(shared)} pod(s) ({', '.join(names)}{', ...' if len(shared) > 3 else ''})"
                if shared
                else "no pod yet, but any pod matching one of them matches both"
            )
            out.append(
                finding(
                    "backend.SelectorOverlap",
                    ref_of(later),
                    f"its selector and {ref_of(first).name}'s claim the same pods: {pods_text}. "
                    f"The first match wins, in the API server's list order (by name): "
                    f"{winner} wires them, {ref_of(later).name} gets none of them",
                    "make the selectors disjoint (add a distinguishing label to one), then roll "
                    "the engine workloads",
                    winner=winner,
                    loser=ref_of(later).name,
                    sharedPods=len(shared),
                )
            )
    return out


def check_backend(cb: Obj, pods: Sequence[Obj]) -> list[Finding]:
    return (
        check_conditions(cb)
        + check_pod_creation(cb)
        + check_generation(cb)
        + check_spec(cb)
        + check_selector(cb, pods)
    )
