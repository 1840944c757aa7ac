"""Watches that follow the backends' engine selectors, and when a watch is trusted.

The engine pods and engine ReplicaSets a backend selects cannot be watched by one
selector for every backend, and a cluster-wide watch would grow with the cluster. So
they are watched per (namespace, selector key), ``key in (the values that namespace's
backends select)``: :class:`SelectorWatches`, used by the workers' caches (to read) and
by the leading dispatcher (to enqueue, for the engine ReplicaSets). :func:`fresh` says
when a watch's store may be read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubeio import client as k
from reconciler.watch.watch_cache import Change, Reflector, WatchSpec, changes_between
from shared.labels import valid_selector

log = logging.getLogger(__name__)

# A store whose watch has failed for this long is not trusted: reads go to the API
# server until the watch is back.
STALE_AFTER_SECONDS: Final = 30.0
# A store whose watch has delivered nothing, no event and no bookmark, for this long is
# not trusted either: the API server sends a watch that asks for bookmarks one every
# minute or two, so four minutes of silence mean a stream that is open but no longer
# delivering (the client's read timeout would end it only after the watch timeout).
SILENT_AFTER_SECONDS: Final = 240.0
# Engine-pod watches are re-established at most this often when selectors change.
SELECTOR_SETTLE_SECONDS: Final = 0.5

Obj = dict[str, Any]


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
    once it has listed, so coverage never drops while a watch is replaced.
    ``on_change`` hears every change: a watch's events, and when a watch starts to
    serve, what its list holds that the watch it replaces did not
    (:func:`promotion_changes`)."""

    def __init__(
        self,
        kube: k.KubeClient,
        res: k.Resource,
        name: str,
        *,
        transform: Callable[[Obj], Obj],
        on_change: Callable[[str, Obj | None, Obj | None], None] | None,
        on_restart: Callable[[str], None],
        watch_timeout: int,
    ) -> None:
        self.kube = kube
        self.res = res
        self.name = name
        self.transform = transform
        self.on_change = on_change
        self.on_restart = on_restart
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

    def reflectors(self, *, listing: bool = False) -> list[Reflector]:
        """The watches serving now (``listing``: and those about to serve)."""
        with self._lock:
            groups = [*self._serving.values(), *(self._pending.values() if listing else ())]
            return [group.reflector for group in groups]

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
        changes: list[Change] = []
        with self._lock:
            for group_key, group in list(self._pending.items()):
                if group.reflector.synced.is_set():
                    old = self._serving.get(group_key)
                    self._serving[group_key] = group
                    del self._pending[group_key]
                    if old is not None:
                        old.reflector.stop()
                    changes += promotion_changes(old.reflector if old else None, group.reflector)
                    self._lock.notify_all()
            if self._pending:
                self._dirty.set()  # look again shortly
            elif self._asked:
                self.serving.set()
        handler = self.on_change
        if handler is None:
            return
        for kind, before, after in changes:
            try:
                handler(kind, before, after)
            except Exception:  # a handler bug must not stop the watches
                log.exception("selector watch change handler failed", extra={"watch": self.name})

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
            on_restart=self.on_restart,
            watch_timeout=self.watch_timeout,
        ).start()


def promotion_changes(serving: Reflector | None, listed: Reflector) -> list[Change]:
    """What a watch that starts to serve a group holds that the one it replaces (None:
    a new group) did not say. A reflector stays silent on its first list, and the
    objects in it may have changed after the backend that asked for the watch was
    last read: ``on_change`` hears them here, so no change falls between the two."""
    return changes_between(serving.store.all() if serving else (), listed.store.all())


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
