"""Which backend's key a watched object concerns: the mapping the dispatcher and the
workers' caches both use to turn a change into a work-queue add."""

from __future__ import annotations

from typing import Any, Final

from shared import constants as c
from shared.storage_providers.render import LABEL_CACHEBACKEND, LABEL_MANAGED_BY, MANAGED_BY

# The label selector of every object the reconciler creates for a backend: the watches
# of owned objects (the dispatcher's and the workers' caches) list by it.
OWNED_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGED_BY}"


def namespaced_key(namespace: str, name: str) -> str:
    """``namespace/name``: a backend's work-queue key, and the value of the injected-by
    annotation the webhook writes on a Pod it wires."""
    return f"{namespace}/{name}"


def object_name(obj: dict[str, Any]) -> tuple[str, str]:
    """(namespace, name) of an object ("" for a field it lacks): a store's key."""
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def object_key(obj: dict[str, Any]) -> str:
    """``namespace/name`` of the object itself (a CacheBackend's own key)."""
    return namespaced_key(*object_name(obj))


def owner_key(obj: dict[str, Any]) -> str | None:
    """``namespace/name`` of the CacheBackend controlling ``obj``, if any."""
    meta = obj.get("metadata") or {}
    for ref in meta.get("ownerReferences") or []:
        if ref.get("kind") == "CacheBackend" and ref.get("controller"):
            return namespaced_key(str(meta.get("namespace")), str(ref.get("name")))
    return None


def pod_backend_key(pod: dict[str, Any]) -> str | None:
    """The backend whose status a change of this pod may move: the one an engine pod
    was injected by (same namespace only), or the one a managed cache-server pod
    belongs to (its inferencecache.io/cachebackend label)."""
    meta = pod.get("metadata") or {}
    namespace = meta.get("namespace")
    injected = str((meta.get("annotations") or {}).get(c.ANNOTATION_INJECTED_BY) or "")
    ns, sep, name = injected.partition("/")
    if sep and name and ns == namespace:
        return injected
    labels = meta.get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY and labels.get(LABEL_CACHEBACKEND):
        return namespaced_key(str(namespace), str(labels[LABEL_CACHEBACKEND]))
    return None


def match_labels(obj: dict[str, Any]) -> dict[str, str]:
    """spec.engineSelector.matchLabels of a CacheBackend ({}: claims nothing)."""
    sel = ((obj.get("spec") or {}).get("engineSelector") or {}).get("matchLabels") or {}
    return {str(k): str(v) for k, v in sel.items()} if isinstance(sel, dict) else {}
