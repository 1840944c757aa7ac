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

Each change the cache takes in is also turned into a work-queue add for the backends
it concerns (:class:`reconciler.watch.enqueue_keys.ChangeRouter`): the dispatcher's watch
may see an event before this cache does, and a reconcile woken by it could read the older view; the add made here,
after the cache holds the change, guarantees a run that sees it (adds collapse, so
this costs a Redis call, not a reconcile).

:class:`CachedReads` answers :class:`reconciler.steps.reads.ClusterReads` from these stores
and falls back to the scoped API-server reads of :class:`reconciler.steps.reads.LiveReads`
while a store has not synced (start-up, or a watch that keeps failing) or an engine
selector is not covered yet (a backend just created). docs/architecture.md ("Reads")
has the reasoning on staleness.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubeio import client as k
from reconciler import metrics
from reconciler.steps.reads import LISTED_OWNED_RESOURCES, LiveReads, template_labels, with_kind
from reconciler.watch import enqueue_keys
from reconciler.watch.engine_deployments import (
    deployments_from_replicasets,
    replicaset_metadata,
)
from reconciler.watch.enqueue_keys import (
    ChangeRouter,
    engine_selector_labels,
)
from reconciler.watch.watch_cache import Reflector, WatchSpec, reduced_metadata, resource_version
from shared import constants as c
from shared.labels import labels_match, valid_selector
from shared.storage_providers.render import (
    LABEL_CACHEBACKEND,
    safe_label_value,
)

log = logging.getLogger(__name__)

# How long a read waits for a store's first list, or for a new engine selector to be
# covered, before it asks the API server instead.
SYNC_WAIT_SECONDS: Final = 5.0
# A store whose watch has failed for this long is not trusted: reads go to the API
# server until the watch is back.
STALE_AFTER_SECONDS: Final = 30.0
# A store whose watch has delivered nothing, no event and no bookmark, for this long is
# not trusted either: the API server sends a watch that asks for bookmarks one every
# minute or two, so four minutes of silence mean a stream that is open but no longer
# delivering (the client's read timeout would end it only after the watch timeout).
SILENT_AFTER_SECONDS: Final = 240.0
# After a write, how long a reconcile waits for its own change to show in the cache.
WRITE_VISIBLE_SECONDS: Final = 2.0
# Engine-pod watches are re-established at most this often when selectors change.
SELECTOR_SETTLE_SECONDS: Final = 0.5

Obj = dict[str, Any]


# ------------------------------------------------------------------ reduced objects


def without_managed_fields(obj: Obj) -> Obj:
    meta = obj.get("metadata") or {}
    if "managedFields" not in meta:
        return obj
    return {**obj, "metadata": {k_: v for k_, v in meta.items() if k_ != "managedFields"}}


ENGINE_POD_ANNOTATIONS: Final = (c.ANNOTATION_INJECTED_BY, c.ANNOTATION_INJECTED_BY_UID)


def engine_pod_metadata(obj: Obj) -> Obj:
    """What an engine pod contributes: identity, labels, the decision annotations and
    the controller reference (to find the Deployment that owns it)."""
    return reduced_metadata(obj, ENGINE_POD_ANNOTATIONS)


# ------------------------------------------------------------------ engine selectors

# A grouped watch: one namespace, one label key.
GroupKey = tuple[str, str]


def selector_group_key(labels: Mapping[str, str]) -> str | None:
    """The label key a backend's engine pods are watched by: its first key (sorted)
    with a non-empty value. None: not watchable (read from the API server)."""
    if not labels or not valid_selector(labels):
        return None
    return next((key for key in sorted(labels) if labels[key]), None)


def selector_groups(
    selectors: Iterable[tuple[str, Mapping[str, str]]],
) -> dict[GroupKey, frozenset[str]]:
    """(namespace, label key) → the values that namespace's backends select on it, from
    (namespace, engine selector) pairs: one ``key in (values)`` watch of that namespace
    each holds every object any of these selectors can match, and nothing from a
    namespace without a backend."""
    out: dict[GroupKey, set[str]] = {}
    for namespace, labels in selectors:
        key = selector_group_key(labels)
        if key is not None and namespace:
            out.setdefault((namespace, key), set()).add(labels[key])
    return {group: frozenset(values) for group, values in out.items()}


def set_selector(key: str, values: Iterable[str]) -> str:
    return f"{key} in ({','.join(sorted(values))})"


def regroup_needed(serving: frozenset[str], wanted: frozenset[str]) -> bool:
    """A group's watch is re-established when a backend selects a value it does not
    cover, or when more than a quarter of what it covers is no longer selected."""
    if not wanted <= serving:
        return True
    return len(serving - wanted) * 4 > len(serving)


@dataclass
class _Group:
    values: frozenset[str]
    reflector: Reflector


class SelectorWatches:
    """Metadata-only watches of one resource that follow the backends' engine
    selectors: one per (namespace, selector key), ``key in (values)``.

    A changed value set starts a new watch beside the one serving; the new one serves
    once it has listed, so coverage never drops while a watch is replaced."""

    def __init__(
        self,
        kube: k.KubeClient,
        res: k.Resource,
        name: str,
        *,
        transform: Callable[[Obj], Obj],
        on_change: Callable[[str, Obj | None, Obj | None], None],
        watch_timeout: int,
    ) -> None:
        self.kube = kube
        self.res = res
        self.name = name
        self.transform = transform
        self.on_change = on_change
        self.watch_timeout = watch_timeout
        self._lock = threading.Condition()
        self._serving: dict[GroupKey, _Group] = {}
        self._pending: dict[GroupKey, _Group] = {}
        self._wanted: dict[GroupKey, frozenset[str]] = {}
        self._dirty = threading.Event()
        self._stop = threading.Event()
        # Set once every selector wanted at start is served: from then on a selector
        # not covered yet (a new backend) is read from the API server at once rather
        # than waited for.
        self.serving = threading.Event()
        self._asked = False
        self._thread = threading.Thread(target=self._run, name=f"cache-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._dirty.set()
        with self._lock:
            for group in [*self._serving.values(), *self._pending.values()]:
                group.reflector.stop()

    def want(self, groups: dict[GroupKey, frozenset[str]]) -> None:
        with self._lock:
            self._wanted = groups
            self._asked = True
        self._dirty.set()

    def covering(
        self, namespace: str, labels: Mapping[str, str], timeout: float
    ) -> Reflector | None:
        """The synced watch that holds every object of ``namespace`` that ``labels``
        can match, waiting up to ``timeout`` for one (a backend created a moment ago)."""
        key = selector_group_key(labels)
        if key is None:
            return None
        deadline = time.monotonic() + timeout
        with self._lock:
            while True:
                group = self._serving.get((namespace, key))
                if group is not None and labels[key] in group.values and fresh(group.reflector):
                    return group.reflector
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return None
                self._lock.wait(min(left, 0.5))

    def reflectors(self) -> list[Reflector]:
        """The watches serving now."""
        with self._lock:
            return [group.reflector for group in self._serving.values()]

    def _run(self) -> None:
        while not self._stop.is_set():
            self._dirty.wait(1.0)
            self._dirty.clear()
            self._stop.wait(SELECTOR_SETTLE_SECONDS)
            self._regroup()
            self._promote()

    def _regroup(self) -> None:
        with self._lock:
            if self._stop.is_set():
                return  # stop() has ended every watch: start none after it
            wanted = dict(self._wanted)
            for group_key, values in wanted.items():
                serving = self._serving.get(group_key)
                pending = self._pending.get(group_key)
                if serving is not None and not regroup_needed(serving.values, values):
                    if pending is not None:
                        pending.reflector.stop()
                        del self._pending[group_key]
                    continue
                if pending is not None:
                    # Let a watch that is still listing finish and serve first: replaced
                    # on every new backend, none would ever get to serve.
                    if pending.values == values or not pending.reflector.synced.is_set():
                        continue
                    pending.reflector.stop()
                self._pending[group_key] = _Group(values, self._start(group_key, values))
            for group_key in [g for g in self._serving if g not in wanted]:
                self._serving.pop(group_key).reflector.stop()
            for group_key in [g for g in self._pending if g not in wanted]:
                self._pending.pop(group_key).reflector.stop()

    def _promote(self) -> None:
        with self._lock:
            for group_key, group in list(self._pending.items()):
                if group.reflector.synced.is_set():
                    old = self._serving.get(group_key)
                    self._serving[group_key] = group
                    del self._pending[group_key]
                    if old is not None:
                        old.reflector.stop()
                    self._lock.notify_all()
            if self._pending:
                self._dirty.set()  # look again shortly
            elif self._asked:
                self.serving.set()

    def _start(self, group_key: GroupKey, values: frozenset[str]) -> Reflector:
        namespace, key = group_key
        spec = WatchSpec(
            self.res, set_selector(key, values), metadata_only=True, namespace=namespace
        )
        return Reflector(
            self.kube,
            spec,
            transform=self.transform,
            on_change=self.on_change,
            on_restart=_count_restart(self.name),
            watch_timeout=self.watch_timeout,
        ).start()


def fresh(reflector: Reflector) -> bool:
    """Listed, its watch not failing for longer than STALE_AFTER_SECONDS, and not
    silent (no event, no bookmark) for longer than SILENT_AFTER_SECONDS."""
    if not reflector.synced.is_set():
        return False
    now = time.monotonic()
    heard = reflector.last_progress
    if heard is not None and now - heard > SILENT_AFTER_SECONDS:
        return False
    since = reflector.failing_since
    return since is None or now - since < STALE_AFTER_SECONDS


def _count_restart(watch: str) -> Callable[[str], None]:
    def count(cause: str) -> None:
        metrics.CACHE_WATCH_RESTARTS.labels(watch, cause).inc()

    return count


def _labels(obj: Obj | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


# ------------------------------------------------------------------ the cache


class ClusterCache:
    """The watch caches of one worker process (see the module docstring)."""

    def __init__(
        self,
        kube: k.KubeClient,
        *,
        enqueue: Callable[[str], None] | None = None,
        watch_timeout: int = 300,
    ) -> None:
        self.kube = kube
        self._enqueue = enqueue or _no_enqueue
        self.backends = Reflector(
            kube,
            WatchSpec(k.CACHEBACKENDS),
            on_change=self._backend_changed,
            on_listed=self._follow_selectors,
            on_restart=_count_restart(k.CACHEBACKENDS.plural),
            watch_timeout=watch_timeout,
        )
        router = ChangeRouter(self.backends.store, self._add)
        self.router = router
        self.owned = {
            res.kind: Reflector(
                kube,
                WatchSpec(res, enqueue_keys.OWNED_SELECTOR),
                transform=_owned_transform(res),
                on_change=router.owned,
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
            on_change=router.pod,
            on_restart=_count_restart("server-pods"),
            watch_timeout=watch_timeout,
        )
        self.injected_pods = Reflector(
            kube,
            WatchSpec(k.PODS, c.LABEL_INJECTED_BY_UID),
            transform=without_managed_fields,
            on_change=router.pod,
            on_restart=_count_restart("injected-pods"),
            watch_timeout=watch_timeout,
        )
        self.engine_pods = SelectorWatches(
            kube,
            k.PODS,
            "engine-pods",
            transform=engine_pod_metadata,
            on_change=router.engine_pod,
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
            on_change=router.replicaset,
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

    def _add(self, key: str) -> None:
        try:
            self._enqueue(key)
        except Exception as exc:  # Redis away: the dispatcher's resync covers it
            log.debug("could not enqueue from the cache", extra={"key": key, "error": str(exc)})

    def _backend_changed(self, kind: str, old: Obj | None, new: Obj | None) -> None:
        if old is None or new is None or engine_selector_labels(old) != engine_selector_labels(new):
            self._follow_selectors()
        self.router.backend(kind, old, new)

    def _follow_selectors(self) -> None:
        """Watch the engine pods and ReplicaSets of every cached backend's selector, in
        that backend's namespace."""
        groups = selector_groups(
            (str((cb.get("metadata") or {}).get("namespace") or ""), engine_selector_labels(cb))
            for cb in self.backends.store.all()
        )
        self.engine_pods.want(groups)
        self.engine_replicasets.want(groups)


def _no_enqueue(_key: str) -> None:
    """A cache without a work queue (tests, tools)."""


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
                if _labels(obj).get(LABEL_CACHEBACKEND) == label
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
            p for p in reflector.store.in_namespace(namespace) if labels_match(labels, _labels(p))
        ]

    def injected_pods(self, namespace: str, uid: str) -> list[Obj]:
        if not self._ready(self.cache.injected_pods, "injected-pods"):
            return self.live.injected_pods(namespace, uid)
        return [
            p
            for p in self.cache.injected_pods.store.in_namespace(namespace)
            if _labels(p).get(c.LABEL_INJECTED_BY_UID) == uid
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
            if labels_match(selector, _labels(p))
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
