"""Engine Deployments as their ReplicaSets describe them: pure functions.

The engine rules (engineSelectorMessage, the 5 s churn cadence) need, for each
Deployment whose pod template a backend's selector matches, its desired replicas and
its pod-template labels. The API server cannot select Deployments by their pod
template, but it can select their ReplicaSets: the deployment controller gives every
ReplicaSet it makes the pod template's labels plus ``pod-template-hash``, a controller
owner reference to its Deployment, the Deployment's revision at the time
(``deployment.kubernetes.io/revision``, the newest ReplicaSet holding the current
template) and the Deployment's ``spec.replicas`` (``deployment.kubernetes.io/
desired-replicas``, rewritten whenever the controller scales that ReplicaSet, and so
kept in step on the newest one). A metadata-only ReplicaSet watch selected like the
engine-pod watches therefore describes exactly the Deployments that can matter, without
reading any other Deployment. docs/architecture.md ("Reads") has the limits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from reconciler.watch.watch_cache import reduced_metadata
from shared.objects import meta, metadata

LABEL_POD_TEMPLATE_HASH: Final = "pod-template-hash"
ANNOTATION_REVISION: Final = "deployment.kubernetes.io/revision"
ANNOTATION_DESIRED_REPLICAS: Final = "deployment.kubernetes.io/desired-replicas"
REPLICASET_ANNOTATIONS: Final = (ANNOTATION_REVISION, ANNOTATION_DESIRED_REPLICAS)

Obj = dict[str, Any]


def _int_or_none(value: object) -> int | None:
    try:
        return int(str(value))
    except ValueError:
        return None


def replicaset_metadata(obj: Obj) -> Obj:
    """What a ReplicaSet contributes: identity, labels, the deployment controller's two
    annotations and its controller reference."""
    return reduced_metadata(obj, REPLICASET_ANNOTATIONS)


def replicaset_template_labels(replicaset: Obj) -> dict[str, str]:
    """The pod-template labels of the Deployment that made ``replicaset``."""
    labels = meta(replicaset).labels
    return {k: v for k, v in labels.items() if k != LABEL_POD_TEMPLATE_HASH}


def _deployment_owner(replicaset: Obj) -> dict[str, Any] | None:
    for ref in meta(replicaset).owner_references:
        if ref.get("kind") == "Deployment" and ref.get("controller"):
            return dict(ref)
    return None


def replicaset_shape(replicaset: Obj) -> tuple[object, ...]:
    """What the derivation reads of one ReplicaSet: a change of anything else (its
    status, its resourceVersion) changes no Deployment derived from it."""
    view = meta(replicaset)
    owner = _deployment_owner(replicaset) or {}
    return (
        tuple(sorted(view.labels.items())),
        tuple(sorted(view.annotations.items())),
        owner.get("name"),
        owner.get("uid"),
    )


def deployments_from_replicasets(replicasets: Iterable[Obj]) -> list[Obj]:
    """Each Deployment owning one of ``replicasets`` (by controller reference), in the
    shape ``reconciler.steps.reads.ClusterReads.engine_deployments`` promises: replicas from
    its newest ReplicaSet's desired-replicas annotation (newest by revision), pod
    template labels from that ReplicaSet's labels less ``pod-template-hash``.

    A ReplicaSet without a revision, or a newest one without desired-replicas, was not
    made by a deployment controller, and says nothing about a Deployment: skipped."""
    newest: dict[tuple[str, str], tuple[int, Obj]] = {}
    for rs in replicasets:
        owner = _deployment_owner(rs)
        view = meta(rs)
        revision = _int_or_none(view.annotations.get(ANNOTATION_REVISION))
        if owner is None or revision is None:
            continue
        key = (view.namespace, str(owner.get("name")))
        held = newest.get(key)
        if held is None or revision > held[0]:
            newest[key] = (revision, rs)
    out = []
    for (namespace, name), (_, rs) in sorted(newest.items()):
        raw = metadata(rs)
        replicas = _int_or_none(meta(rs).annotations.get(ANNOTATION_DESIRED_REPLICAS))
        if replicas is None:
            continue
        owner = _deployment_owner(rs) or {}
        out.append(
            {
                "metadata": {
                    "name": name,
                    "namespace": namespace,
                    "uid": owner.get("uid"),
                    "resourceVersion": raw.get("resourceVersion"),
                },
                "spec": {
                    "replicas": replicas,
                    "template": {"metadata": {"labels": replicaset_template_labels(rs)}},
                },
            }
        )
    return out
