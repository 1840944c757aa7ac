"""Which backends a watched object concerns: the one mapping from a change to the
work-queue keys it wakes, for the leading dispatcher's watches, the one process that
adds to the work queue (:class:`SelectorIndex` holds what the rules need to remember).

- an owned object (Deployment, Service, ...): the backend its controller reference
  names (:func:`owner_key`);
- an injected engine pod or a managed cache-server pod: its backend
  (:func:`pod_backend_key`);
- a pod whose labels start or stop satisfying a backend's spec.engineSelector: that
  backend (:func:`backends_selecting`, matched by :func:`shared.labels.labels_match`);
- an engine ReplicaSet whose pod template a backend selects, when what an engine
  Deployment is derived from changes (:func:`replicaset_change_keys`).

Keys are the work queue's text form, built by :class:`shared.backend_keys.BackendKey`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from reconciler.watch.engine_deployments import replicaset_shape, replicaset_template_labels
from reconciler.watch.selector_watches import GroupKey, selector_groups
from shared.backend_keys import BackendKey, injected_by_key, object_key
from shared.labels import labels_match
from shared.objects import meta, metadata
from shared.storage_providers.render import LABEL_CACHEBACKEND, LABEL_MANAGED_BY, MANAGED_BY

# The label selector of every object the reconciler creates for a backend: the watches
# of owned objects (the dispatcher's and the workers' caches) list by it.
OWNED_SELECTOR: Final = f"{LABEL_MANAGED_BY}={MANAGED_BY}"

Obj = dict[str, Any]


def owner_key(obj: Obj) -> str | None:
    """``namespace/name`` of the CacheBackend controlling ``obj``, if any."""
    raw_meta = metadata(obj)
    for ref in raw_meta.get("ownerReferences") or []:
        if ref.get("kind") == "CacheBackend" and ref.get("controller"):
            return str(BackendKey(str(raw_meta.get("namespace")), str(ref.get("name"))))
    return None


def pod_backend_key(pod: Obj) -> str | None:
    """The backend whose status a change of this pod may move: the one an engine pod
    was injected by (same namespace only), or the one a managed cache-server pod
    belongs to (its inferencecache.io/cachebackend label)."""
    injected = injected_by_key(pod)
    if injected is not None:
        return str(injected)
    raw_meta = metadata(pod)
    labels = raw_meta.get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) == MANAGED_BY and labels.get(LABEL_CACHEBACKEND):
        return str(BackendKey(str(raw_meta.get("namespace")), str(labels[LABEL_CACHEBACKEND])))
    return None


def engine_selector_labels(obj: Obj) -> dict[str, str]:
    """spec.engineSelector.matchLabels of a CacheBackend ({}: claims nothing)."""
    sel = ((obj.get("spec") or {}).get("engineSelector") or {}).get("matchLabels") or {}
    return {str(k): str(v) for k, v in sel.items()} if isinstance(sel, dict) else {}


def backends_selecting(
    selectors: Iterable[tuple[str, Mapping[str, str]]], labels: Mapping[str, str] | None
) -> frozenset[str]:
    """The keys, among (key, engine selector) pairs, whose selector ``labels`` satisfy."""
    return frozenset(key for key, selector in selectors if labels_match(selector, labels))


def pod_change_keys(
    before: frozenset[str], after: frozenset[str], named_by: Iterable[Obj | None]
) -> frozenset[str]:
    """The one rule for a pod change, wherever it is seen: the backends whose engine
    selector the pod entered or left (``before`` ∆ ``after``: its
    matchedEnginePods count moves), and the backend each pod of ``named_by`` names (an
    injected engine pod's, a managed cache-server pod's: :func:`pod_backend_key`)."""
    keys = set(before ^ after)
    keys.update(key for pod in named_by if pod is not None and (key := pod_backend_key(pod)))
    return frozenset(keys)


def replicaset_change_keys(
    selecting: Callable[[str, Mapping[str, str]], frozenset[str]],
    old: Obj | None,
    new: Obj | None,
) -> frozenset[str]:
    """The rule for an engine ReplicaSet change (metadata): the backends selecting its
    pod template, before or after, when what an engine Deployment is derived from
    changes (its replicas or template labels: the churn cadence and the message), not
    on a status change. ``selecting(namespace, labels)``: the backends whose engine
    selector those labels satisfy."""
    if old is not None and new is not None and replicaset_shape(old) == replicaset_shape(new):
        return frozenset()
    keys: set[str] = set()
    for obj in (old, new):
        if obj is not None:
            keys |= selecting(object_key(obj).namespace, replicaset_template_labels(obj))
    return frozenset(keys)


# ------------------------------------------------------------------ the dispatcher's


class SelectorIndex:
    """Which backends' engine selectors each pod satisfies, to enqueue a backend when a
    pod starts or stops matching it (its matchedEnginePods count changes) — not on
    every status change of an already-matching pod."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # namespace -> backend key -> matchLabels (non-empty only)
        self._selectors: dict[str, dict[str, dict[str, str]]] = {}
        # pod (namespace, name) -> backend keys it matched when last seen
        self._matched: dict[BackendKey, frozenset[str]] = {}

    def set_backend(self, obj: Obj, deleted: bool = False) -> bool:
        """Remember a backend's engine selector; True when it changed."""
        key = object_key(obj)
        labels = {} if deleted else engine_selector_labels(obj)
        with self._lock:
            per_ns = self._selectors.setdefault(key.namespace, {})
            before = per_ns.get(str(key))
            if labels:
                per_ns[str(key)] = labels
            else:
                per_ns.pop(str(key), None)
            return before != (labels or None)

    def reset_backends(self, items: list[Obj]) -> None:
        with self._lock:
            self._selectors = {}
        for obj in items:
            self.set_backend(obj)

    def clear(self) -> None:
        with self._lock:
            self._selectors = {}
            self._matched = {}

    def selecting(self, namespace: str, labels: Mapping[str, str]) -> frozenset[str]:
        """The backends of ``namespace`` whose engine selector ``labels`` satisfy."""
        with self._lock:
            selectors = list((self._selectors.get(namespace) or {}).items())
        return backends_selecting(selectors, labels)

    def groups(self) -> dict[GroupKey, frozenset[str]]:
        """The (namespace, selector key) watches the engine selectors need
        (reconciler.watch.selector_watches)."""
        with self._lock:
            pairs = [
                (namespace, labels)
                for namespace, per_ns in self._selectors.items()
                for labels in per_ns.values()
            ]
        return selector_groups(pairs)

    def replicaset_changed(self, old: Obj | None, new: Obj | None) -> frozenset[str]:
        """The backends an engine ReplicaSet change concerns (:func:`replicaset_change_keys`)."""
        return replicaset_change_keys(self.selecting, old, new)

    def pod_changed(self, kind: str, pod: Obj) -> frozenset[str]:
        """The backends this pod event concerns (:func:`pod_change_keys`), the pod's
        previous matches read from this index."""
        key = object_key(pod)
        with self._lock:
            if kind == "DELETED":
                now: frozenset[str] = frozenset()
            else:
                selectors = (self._selectors.get(key.namespace) or {}).items()
                now = backends_selecting(selectors, meta(pod).labels)
            before = self._matched.get(key, frozenset())
            if now:
                self._matched[key] = now
            else:
                self._matched.pop(key, None)
        return pod_change_keys(before, now, [pod])
