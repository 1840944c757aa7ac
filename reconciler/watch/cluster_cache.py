"""A worker process's watch caches, and the reconcile reads served from them.

One :class:`ClusterCache` per worker process (a prefork pool builds one per child, on
its first task). It is built from the API server when the process starts, rebuilt
after every watch gap, and never a source of truth: the worker stays stateless, and
what it holds is what the API server said a moment ago. It watches only what
reconciles can need, so its size and its traffic follow the
objects that belong to backends, not the rest of the cluster:

===========================  ====================================================
watch                        for
===========================  ====================================================
CacheBackends                the backend a reconcile is handed
NetworkPolicies,             owned objects (label ``managed-by=inference-cache``);
Deployments, StatefulSets,   owned Secrets are not watched: RBAC cannot scope a
Services, HPAs               watch to our labels, so they are read by name
pods, by label               cache-server pods (``inferencecache.io/cachebackend``,
                             a key of every managed workload's selector)
pods, by label               injected pods (``inferencecache.io/injected-by-uid``)
pods, metadata only          engine pods: one watch per (namespace, selector key),
                             ``<key> in (<the values that namespace's backends
                             select>)``
ReplicaSets, metadata only   engine Deployments, derived from their ReplicaSets
                             (``reconciler.watch.engine_deployments``), watched as the
                             engine pods are
===========================  ====================================================

The cache never adds to the work queue: the leading dispatcher alone does, with a
fence beside each key naming the change that woke it, and :meth:`ClusterCache.caught_up`
says whether this cache has seen that change yet (reconciler.watch.freshness).

:class:`CachedReads` answers :class:`reconciler.steps.reads.ClusterReads` from these stores
and falls back to the scoped API-server reads of :class:`reconciler.steps.reads.LiveReads`
while a store has not synced (start-up, or a watch that keeps failing) or an engine
selector is not covered yet (a backend just created). docs/architecture.md ("Reads")
has the reasoning on staleness.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from kubeio import client as k
from reconciler import metrics
from reconciler.steps.reads import LISTED_OWNED_RESOURCES, LiveReads, template_labels, with_kind
from reconciler.watch import enqueue_keys
from reconciler.watch.engine_deployments import (
    deployments_from_replicasets,
    replicaset_metadata,
)
from reconciler.watch.enqueue_keys import engine_selector_labels
from reconciler.watch.freshness import Fence
from reconciler.watch.selector_watches import (
    SelectorWatches,
    fresh,
    selector_groups,
)
from reconciler.watch.watch_cache import Reflector, WatchSpec, reduced_metadata, resource_version
from shared import constants as c
from shared.labels import labels_match, selector_string_matches
from shared.objects import meta, metadata
from shared.storage_providers.render import (
    LABEL_CACHEBACKEND,
    safe_label_value,
)

log = logging.getLogger(__name__)

# How long a read waits for a store's first list, or for a new engine selector to be
# covered, before it asks the API server instead.
SYNC_WAIT_SECONDS: Final = 5.0
# After a write, how long a reconcile waits for its own change to show in the cache.
WRITE_VISIBLE_SECONDS: Final = 2.0

Obj = dict[str, Any]


# ------------------------------------------------------------------ reduced objects


def without_managed_fields(obj: Obj) -> Obj:
    raw_meta = metadata(obj)
    if "managedFields" not in raw_meta:
        return obj
    return {**obj, "metadata": {k_: v for k_, v in raw_meta.items() if k_ != "managedFields"}}


# The decline record too: EngineOffloading counts the selected pods that carry it.
ENGINE_POD_ANNOTATIONS: Final = (
    c.ANNOTATION_INJECTED_BY,
    c.ANNOTATION_INJECTED_BY_UID,
    c.ANNOTATION_INJECT_DECLINED,
    c.ANNOTATION_INJECT_DECLINED_BY,
)


def engine_pod_metadata(obj: Obj) -> Obj:
    """What an engine pod contributes: identity, labels, the decision annotations and
    the controller reference (to find the Deployment that owns it)."""
    return reduced_metadata(obj, ENGINE_POD_ANNOTATIONS)


def _count_restart(watch: str) -> Callable[[str], None]:
    def count(cause: str) -> None:
        metrics.CACHE_WATCH_RESTARTS.labels(watch, cause).inc()

    return count


# ------------------------------------------------------------------ the cache


class ClusterCache:
    """The watch caches of one worker process (see the module docstring)."""

    def __init__(self, kube: k.KubeClient, *, watch_timeout: int = 300) -> None:
        self.kube = kube
        self.backends = Reflector(
            kube,
            WatchSpec(k.CACHEBACKENDS),
            on_change=self._backend_changed,
            on_listed=self._follow_selectors,
            on_restart=_count_restart(k.CACHEBACKENDS.plural),
            watch_timeout=watch_timeout,
        )
        self.owned = {
            res.kind: Reflector(
                kube,
                WatchSpec(res, enqueue_keys.OWNED_SELECTOR),
                transform=_owned_transform(res),
                on_restart=_count_restart(res.plural),
                watch_timeout=watch_timeout,
            )
            for res in LISTED_OWNED_RESOURCES
        }
        # Every managed workload's selector has the cachebackend label, so the pods
        # carrying that label hold every pod a workload can select.
        self.server_pods = Reflector(
            kube,
            WatchSpec(k.PODS, LABEL_CACHEBACKEND),
            transform=without_managed_fields,
            on_restart=_count_restart("server-pods"),
            watch_timeout=watch_timeout,
        )
        self.injected_pods = Reflector(
            kube,
            WatchSpec(k.PODS, c.LABEL_INJECTED_BY_UID),
            transform=without_managed_fields,
            on_restart=_count_restart("injected-pods"),
            watch_timeout=watch_timeout,
        )
        self.engine_pods = SelectorWatches(
            kube,
            k.PODS,
            "engine-pods",
            transform=engine_pod_metadata,
            on_change=None,
            on_restart=_count_restart("engine-pods"),
            watch_timeout=watch_timeout,
        )
        # Engine Deployments through their ReplicaSets (reconciler.watch.engine_deployments):
        # a ReplicaSet carries its Deployment's pod-template labels, so the engine
        # selectors select it; the Deployments themselves cannot be selected that way.
        self.engine_replicasets = SelectorWatches(
            kube,
            k.REPLICASETS,
            "engine-replicasets",
            transform=replicaset_metadata,
            on_change=None,
            on_restart=_count_restart("engine-deployments"),
            watch_timeout=watch_timeout,
        )
        self._started = False

    def reflectors(self) -> list[Reflector]:
        return [
            self.backends,
            *self.owned.values(),
            self.server_pods,
            self.injected_pods,
        ]

    def start(self) -> ClusterCache:
        if not self._started:
            self._started = True
            for reflector in self.reflectors():
                reflector.start()
            self.engine_pods.start()
            self.engine_replicasets.start()
        return self

    def stop(self) -> None:
        for reflector in self.reflectors():
            reflector.stop()
        self.engine_pods.stop()
        self.engine_replicasets.stop()

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        return all(r.wait_synced(max(deadline - time.monotonic(), 0)) for r in self.reflectors())

    def _backend_changed(self, _kind: str, old: Obj | None, new: Obj | None) -> None:
        if old is None or new is None or engine_selector_labels(old) != engine_selector_labels(new):
            self._follow_selectors()

    def stores_holding(self, fence: Fence) -> list[Reflector]:
        """The stores whose view of the fenced object its change moves: those
        whose watch selects the object as the change left it, and those that hold it
        (a change that takes it out of a selector reaches them as a deletion)."""
        candidates: list[Reflector] = []
        if fence.resource == k.CACHEBACKENDS.plural:
            candidates = [self.backends]
        elif fence.resource == k.PODS.plural:
            engine = self.engine_pods.reflectors(listing=True)
            candidates = [self.server_pods, self.injected_pods, *engine]
        elif fence.resource == k.REPLICASETS.plural:
            candidates = self.engine_replicasets.reflectors(listing=True)
        else:
            candidates = [r for r in self.owned.values() if r.spec.res.plural == fence.resource]
        return [
            r
            for r in candidates
            if r.spec.namespace in (None, fence.namespace)
            and (
                selector_string_matches(r.spec.label_selector, fence.labels)
                or r.store.get(fence.namespace, fence.name) is not None
            )
        ]

    def caught_up(self, fences: Iterable[Fence], timeout: float) -> bool:
        """Whether, within ``timeout`` seconds, every store a fenced change moves has
        delivered it (reconciler.watch.freshness). A store that is not fresh is left
        out: its reads go to the API server anyway (CachedReads). One still listing is
        waited for: its list may predate the change."""
        deadline = time.monotonic() + timeout
        for fence in fences:
            for reflector in self.stores_holding(fence):
                if reflector.synced.is_set() and not fresh(reflector):
                    continue
                left = max(deadline - time.monotonic(), 0.0)
                if not reflector.wait_delivered(fence.resource_version, left):
                    return False
        return True

    def _follow_selectors(self) -> None:
        """Watch the engine pods and ReplicaSets of every cached backend's selector, in
        that backend's namespace."""
        groups = selector_groups(
            (str(metadata(cb).get("namespace") or ""), engine_selector_labels(cb))
            for cb in self.backends.store.all()
        )
        self.engine_pods.want(groups)
        self.engine_replicasets.want(groups)


def _owned_transform(res: k.Resource) -> Callable[[Obj], Obj]:
    def transform(obj: Obj) -> Obj:
        return with_kind(res, without_managed_fields(obj))

    return transform


# ------------------------------------------------------------------ the reads


class CachedReads:
    """:class:`reconciler.steps.reads.ClusterReads` from a :class:`ClusterCache`, with the
    scoped API-server reads as the fallback for a store that cannot answer yet."""

    def __init__(self, cache: ClusterCache, live: LiveReads) -> None:
        self.cache = cache
        self.live = live

    def _ready(self, reflector: Reflector, read: str) -> bool:
        if fresh(reflector):
            return True
        reflector.wait_synced(SYNC_WAIT_SECONDS)
        if fresh(reflector):
            return True
        metrics.CACHE_LIVE_READS.labels(read).inc()
        return False

    def backend(self, namespace: str, name: str) -> Obj | None:
        if not self._ready(self.cache.backends, "cachebackend"):
            return self.live.backend(namespace, name)
        return self.cache.backends.store.get(namespace, name)

    def backends_in(self, namespace: str) -> list[Obj]:
        if not self._ready(self.cache.backends, "cachebackend"):
            return self.live.backends_in(namespace)
        return self.cache.backends.store.in_namespace(namespace)

    def owned_secrets(self, namespace: str, name: str) -> list[Obj]:
        # Never cached (reconciler.steps.reads.NAMED_OWNED_RESOURCES): read by name.
        return self.live.owned_secrets(namespace, name)

    def owned(self, namespace: str, name: str) -> list[Obj]:
        label = safe_label_value(name)
        out: list[Obj] = []
        for res in LISTED_OWNED_RESOURCES:
            reflector = self.cache.owned[res.kind]
            if not self._ready(reflector, "owned"):
                return self.live.owned(namespace, name)
            out.extend(
                obj
                for obj in reflector.store.in_namespace(namespace)
                if meta(obj).labels.get(LABEL_CACHEBACKEND) == label
            )
        return out

    @staticmethod
    def _covering(
        watches: SelectorWatches, namespace: str, labels: Mapping[str, str]
    ) -> Reflector | None:
        wait = 0.0 if watches.serving.is_set() else SYNC_WAIT_SECONDS
        return watches.covering(namespace, labels, wait)

    def engine_pods(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        reflector = self._covering(self.cache.engine_pods, namespace, labels)
        if reflector is None:
            metrics.CACHE_LIVE_READS.labels("engine-pods").inc()
            return self.live.engine_pods(namespace, labels)
        return [
            p
            for p in reflector.store.in_namespace(namespace)
            if labels_match(labels, meta(p).labels)
        ]

    def injected_pods(self, namespace: str, uid: str) -> list[Obj]:
        if not self._ready(self.cache.injected_pods, "injected-pods"):
            return self.live.injected_pods(namespace, uid)
        return [
            p
            for p in self.cache.injected_pods.store.in_namespace(namespace)
            if meta(p).labels.get(c.LABEL_INJECTED_BY_UID) == uid
        ]

    def workload_pods(self, namespace: str, selector: Mapping[str, str]) -> list[Obj]:
        if not selector:
            return []
        if LABEL_CACHEBACKEND not in selector or not self._ready(
            self.cache.server_pods, "server-pods"
        ):
            return self.live.workload_pods(namespace, selector)
        return [
            p
            for p in self.cache.server_pods.store.in_namespace(namespace)
            if labels_match(selector, meta(p).labels)
        ]

    def engine_deployments(self, namespace: str, labels: Mapping[str, str]) -> list[Obj]:
        reflector = self._covering(self.cache.engine_replicasets, namespace, labels)
        if reflector is None:
            metrics.CACHE_LIVE_READS.labels("engine-deployments").inc()
            return self.live.engine_deployments(namespace, labels)
        return [
            d
            for d in deployments_from_replicasets(reflector.store.in_namespace(namespace))
            if labels_match(labels, template_labels(d))
        ]

    def after_write(
        self, res: k.Resource, namespace: str, name: str, before: str, after: str | None
    ) -> None:
        """Wait (briefly) until the cache shows this write, so the run that follows it
        (a write wakes its own backend again) does not decide on the older object."""
        reflector = self._reflector_for(res)
        if reflector is None or not reflector.synced.is_set():
            return

        def shows(obj: Obj | None) -> bool:
            if after is None:  # deleted
                return obj is None or resource_version(obj) != before
            # Ours, or a later version (resourceVersions are compared for equality only).
            if obj is None:
                return False
            rv = resource_version(obj)
            return rv == after or rv != before

        if not reflector.store.wait_until(namespace, name, shows, WRITE_VISIBLE_SECONDS):
            log.debug(
                "own write not yet in the cache",
                extra={"resource": res.plural, "namespace": namespace, "object": name},
            )

    def _reflector_for(self, res: k.Resource) -> Reflector | None:
        if res is k.CACHEBACKENDS:
            return self.cache.backends
        return self.cache.owned.get(res.kind)
