"""List-then-watch of one resource, and the in-memory store a worker reads from.

``list_then_watch`` is the loop both the dispatcher and the workers' caches run: list
(paginated), then watch from the list's resourceVersion with bookmarks, resuming from
the newest resourceVersion seen when a stream ends (the server-side timeout, a dropped
connection), and listing again when the API server answers 410 Gone (the version fell
out of its window: events were missed, so only a fresh list is correct).

``Reflector`` runs that loop on a thread and keeps a :class:`Store` of the objects it
sees (optionally reduced by a ``transform``, to keep only the fields its readers use).
On a list after a watch gap it compares the new list with what it held and reports the
differences as changes, so a deletion missed during the gap is seen as one. It is a
cache, never a source of truth: built from the API server on start, rebuilt on every
gap, and nothing is written from it without the checks described in
docs/architecture.md ("Reads").

Why not ``kubernetes.informer.SharedInformer`` (kubernetes 37): it reads ``.items``
and ``.metadata.resource_version`` attributes of generated models, so it cannot hold
the CacheBackend custom resource (a plain dict list), lists without pagination, cannot
ask for metadata-only objects, and has no "has synced" signal to wait on before the
first read.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final

from kubeio import client as k
from reconciler.watch.freshness import reached
from shared.backend_keys import object_key
from shared.objects import meta, metadata
from shared.stop_signal import StopSignal

log = logging.getLogger(__name__)

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"
BOOKMARK: Final = "BOOKMARK"

# Items per page of a list: bounded memory per response on the API server and here.
LIST_PAGE_SIZE: Final = 500
MAX_BACKOFF_SECONDS: Final = 30.0

# (type, old object or None, new object or None) after the store changed.
ChangeHandler = Callable[[str, dict[str, Any] | None, dict[str, Any] | None], None]
Transform = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True)
class WatchSpec:
    """What one list-then-watch covers: one namespace or every one (None), optionally
    by label."""

    res: k.Resource
    label_selector: str | None = None
    metadata_only: bool = False
    namespace: str | None = None

    def describe(self) -> str:
        where = f" in {self.namespace}" if self.namespace else ""
        return (
            self.res.plural + where + (f" ({self.label_selector})" if self.label_selector else "")
        )


def resource_version(obj: dict[str, Any] | None) -> str:
    return meta(obj).resource_version


def reduced_metadata(obj: dict[str, Any], annotations: tuple[str, ...]) -> dict[str, Any]:
    """An object as a metadata-only store keeps it: identity, labels, the named
    annotations and the controller owner reference, nothing else."""
    meta = metadata(obj)
    kept = meta.get("annotations") or {}
    return {
        "metadata": {
            "name": meta.get("name"),
            "namespace": meta.get("namespace"),
            "uid": meta.get("uid"),
            "resourceVersion": meta.get("resourceVersion"),
            "labels": dict(meta.get("labels") or {}),
            "annotations": {a: kept[a] for a in annotations if a in kept},
            "ownerReferences": [
                r for r in meta.get("ownerReferences") or [] if r.get("controller")
            ],
        }
    }


def list_then_watch(
    kube: k.KubeClient,
    spec: WatchSpec,
    *,
    on_list: Callable[[list[dict[str, Any]]], None],
    on_event: Callable[[str, dict[str, Any]], None],
    running: Callable[[], bool],
    wait: Callable[[float], object] = time.sleep,
    timeout_seconds: int = 300,
    on_restart: Callable[[str], None] | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> None:
    """Until ``running()`` is false: list, then watch, calling ``on_list(items)`` after
    each list and ``on_event(type, object)`` for every ADDED/MODIFIED/DELETED event.
    ``on_restart(cause)`` is told why a stream ended: timeout, expired (410 Gone:
    re-listing), error (backing off); ``on_progress(resourceVersion)`` hears every
    list and event, bookmarks included (the stream is alive), after ``on_list`` or
    ``on_event`` has taken it in: the version the stream has now delivered."""
    rv: str | None = None
    backoff = 0.5
    while running():
        try:
            if rv is None:
                listing = kube.list(
                    spec.res,
                    spec.namespace,
                    label_selector=spec.label_selector,
                    limit=LIST_PAGE_SIZE,
                    metadata_only=spec.metadata_only,
                )
                rv = str(metadata(listing).get("resourceVersion") or "")
                on_list(listing.get("items") or [])
                if on_progress:
                    on_progress(rv)
            for event in kube.watch(
                spec.res,
                resource_version=rv,
                label_selector=spec.label_selector,
                timeout_seconds=timeout_seconds,
                metadata_only=spec.metadata_only,
                namespace=spec.namespace,
            ):
                if not running():
                    return
                obj = event.get("object") or {}
                new_rv = resource_version(obj)
                if new_rv:
                    rv = new_rv
                kind = str(event.get("type"))
                if kind != BOOKMARK:
                    on_event(kind, obj)
                if on_progress:
                    on_progress(rv)
            backoff = 0.5
            if on_restart:
                on_restart("timeout")
        except Exception as exc:  # an API error, connection reset, read timeout, bad JSON
            if isinstance(exc, k.ApiError) and exc.gone:
                log.info(
                    "watch resourceVersion expired; re-listing",
                    extra={"resource": spec.describe(), "resource_version": rv},
                )
                if on_restart:
                    on_restart("expired")
                rv = None
                continue
            if not running():
                return  # stopped while its stream was failing: nothing to report
            log.warning("watch failed", extra={"resource": spec.describe(), "error": str(exc)})
            if on_restart:
                on_restart("error")
            wait(backoff)
            backoff = min(backoff * 2, MAX_BACKOFF_SECONDS)


Change = tuple[str, dict[str, Any] | None, dict[str, Any] | None]


def changes_between(
    before: Iterable[dict[str, Any]], after: Iterable[dict[str, Any]]
) -> list[Change]:
    """(kind, old, new) for each object ``after`` adds, changes (another
    resourceVersion) or drops against ``before``, as watch events would say it."""
    held = {object_key(o): o for o in before}
    now = {object_key(o): o for o in after}
    changes: list[Change] = []
    for key, obj in now.items():
        prev = held.get(key)
        if prev is None:
            changes.append((ADDED, None, obj))
        elif resource_version(prev) != resource_version(obj):
            changes.append((MODIFIED, prev, obj))
    changes.extend((DELETED, prev, None) for key, prev in held.items() if key not in now)
    return changes


class Store:
    """Objects by namespace and name; thread-safe; readers get the stored dicts, which
    are replaced, never mutated, so they may be read without copying."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._by_ns: dict[str, dict[str, dict[str, Any]]] = {}

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return (self._by_ns.get(namespace) or {}).get(name)

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        with self._lock:
            return list((self._by_ns.get(namespace) or {}).values())

    def all(self) -> Iterator[dict[str, Any]]:
        with self._lock:
            items = [o for per_ns in self._by_ns.values() for o in per_ns.values()]
        return iter(items)

    def __len__(self) -> int:
        with self._lock:
            return sum(len(per_ns) for per_ns in self._by_ns.values())

    def put(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        ns, name = object_key(obj)
        with self._lock:
            per_ns = self._by_ns.setdefault(ns, {})
            old = per_ns.get(name)
            per_ns[name] = obj
            self._changed.notify_all()
            return old

    def remove(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        ns, name = object_key(obj)
        with self._lock:
            per_ns = self._by_ns.get(ns) or {}
            old = per_ns.pop(name, None)
            if not per_ns:
                self._by_ns.pop(ns, None)
            self._changed.notify_all()
            return old

    def replace(self, items: list[dict[str, Any]]) -> list[Change]:
        """Hold exactly ``items``; returns the changes against what was held before."""
        with self._lock:
            before = [o for per_ns in self._by_ns.values() for o in per_ns.values()]
            self._by_ns = {}
            for obj in items:
                ns, name = object_key(obj)
                self._by_ns.setdefault(ns, {})[name] = obj
            self._changed.notify_all()
        return changes_between(before, items)

    def wait_until(
        self,
        namespace: str,
        name: str,
        check: Callable[[dict[str, Any] | None], bool],
        timeout: float,
    ) -> bool:
        """Block until ``check(object or None)`` holds, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not check((self._by_ns.get(namespace) or {}).get(name)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(left)
            return True


class Reflector(StopSignal):
    """A :class:`Store` kept in step with one :class:`WatchSpec` by a daemon thread.

    ``on_change`` hears every change after the store holds it (never for the first
    list: the resync that follows a worker's start covers those objects), including
    the differences a re-list after a gap found; ``on_listed`` runs after every list.
    ``failing_since`` is when the watch started failing (None while it works);
    ``last_progress`` when it last delivered anything, a list, an event or a bookmark
    (None before the first list); ``delivered`` the resourceVersion it has delivered
    up to, which :meth:`wait_delivered` waits on (reconciler.watch.freshness)."""

    def __init__(
        self,
        kube: k.KubeClient,
        spec: WatchSpec,
        *,
        transform: Transform | None = None,
        on_change: ChangeHandler | None = None,
        on_listed: Callable[[], None] | None = None,
        on_restart: Callable[[str], None] | None = None,
        watch_timeout: int = 300,
    ) -> None:
        self.kube = kube
        self.spec = spec
        self.store = Store()
        self.transform = transform
        self.on_change = on_change
        self.on_listed = on_listed
        self.on_restart = on_restart
        self.watch_timeout = watch_timeout
        self.synced = threading.Event()
        self.failing_since: float | None = None
        self.last_progress: float | None = None
        self.delivered: str | None = None
        self._delivery = threading.Condition()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Reflector:
        self._thread = threading.Thread(
            target=self._run, name=f"cache-{self.spec.res.plural}", daemon=True
        )
        self._thread.start()
        return self

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self.synced.wait(timeout)

    def _run(self) -> None:
        list_then_watch(
            self.kube,
            self.spec,
            on_list=self._on_list,
            on_event=self._on_event,
            running=lambda: not self._stop.is_set(),
            wait=self._stop.wait,
            timeout_seconds=self.watch_timeout,
            on_restart=self._restarted,
            on_progress=self._progressed,
        )

    def _restarted(self, cause: str) -> None:
        if cause == "timeout":
            self.failing_since = None  # the stream was open until the server closed it
        elif self.failing_since is None:
            self.failing_since = time.monotonic()
        if self.on_restart is not None:
            self.on_restart(cause)

    def _progressed(self, rv: str) -> None:
        self.failing_since = None
        self.last_progress = time.monotonic()
        with self._delivery:
            self.delivered = rv or self.delivered
            self._delivery.notify_all()

    def wait_delivered(self, wanted: str, timeout: float) -> bool:
        """Block until the store holds every change of its resource up to the
        resourceVersion ``wanted``, at most ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._delivery:
            while not reached(self.delivered, wanted):
                left = deadline - time.monotonic()
                if left <= 0 or self._stop.is_set():
                    return False
                self._delivery.wait(min(left, 0.5))
            return True

    def _reduce(self, obj: dict[str, Any]) -> dict[str, Any]:
        return self.transform(obj) if self.transform is not None else obj

    def _on_list(self, items: list[dict[str, Any]]) -> None:
        changes = self.store.replace([self._reduce(o) for o in items])
        first = not self.synced.is_set()
        self.synced.set()
        if self.on_listed is not None:
            try:
                self.on_listed()
            except Exception:
                log.exception("cache list handler failed", extra={"resource": self.spec.describe()})
        if first:
            return
        for kind, old, new in changes:
            self._notify(kind, old, new)

    def _on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if kind == DELETED:
            # The object as the deletion left it (its last resourceVersion), not as held.
            self.store.remove(obj)
            self._notify(DELETED, self._reduce(obj), None)
        elif kind in (ADDED, MODIFIED):
            new = self._reduce(obj)
            old = self.store.put(new)
            self._notify(kind, old, new)

    def _notify(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if self.on_change is None:
            return
        try:
            self.on_change(kind, old, new)
        except Exception:  # a handler bug must not stop the cache
            log.exception("cache change handler failed", extra={"resource": self.spec.describe()})
