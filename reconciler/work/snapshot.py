"""The index-participation poller: project the server's /snapshot onto backends.

Pure core: :func:`project_index_participation` attributes every replica of the
snapshot to exactly one CacheBackend (the webhook's injected-by annotation wins,
else the first backend by name whose non-empty matchLabels select the pod) and
aggregates per backend. The loop around it writes status.indexParticipation only
where the projection changed, so an idle poll writes nothing.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections import defaultdict
from collections.abc import Callable
from typing import Any, Final

import redis

from kubeio import client as k
from reconciler.steps.server_client import ServerClient
from reconciler.watch.cluster_cache import ClusterCache
from reconciler.watch.enqueue_keys import engine_selector_labels
from reconciler.watch.selector_watches import fresh, selector_groups, set_selector
from shared import constants as c
from shared.backend_keys import injected_by_key, object_key
from shared.conditions import format_time, parse_time
from shared.labels import labels_match, valid_selector
from shared.objects import meta, metadata

log = logging.getLogger(__name__)

_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
POLL_LOCK: Final = "icache:snapshot-poller"


def owning_backend(pod: dict[str, Any], backends_in_namespace: list[dict[str, Any]]) -> str | None:
    """``ns/name`` of the one CacheBackend that claims ``pod``.

    The injected-by annotation is authoritative (the engine was wired to exactly
    that backend); otherwise the first backend by name whose non-empty selector is a
    subset of the pod's labels — the pod webhook's first-match rule. Backends with
    no selector never claim by vacuous truth.

    Decision: a claim naming another namespace is ignored (the selector rule decides).
    The webhook only selects backends in the pod's own namespace, so such a claim was
    not written by it, and honouring it would let a pod in one namespace make another
    namespace's backend look fed (and pass its KV-event gate).
    """
    claim = injected_by_key(pod)
    if claim is not None:
        return str(claim)
    labels = metadata(pod).get("labels")
    for cb in sorted(backends_in_namespace, key=lambda o: meta(o).name):
        if labels_match(engine_selector_labels(cb), labels):
            return str(object_key(cb))
    return None


def _format_rate(rate: float) -> str:
    text = f"{rate:.4f}".rstrip("0").rstrip(".")
    return text or "0"


def project_index_participation(
    snapshot: dict[str, Any],
    pods: dict[tuple[str, str], dict[str, Any]],
    backends: list[dict[str, Any]],
) -> dict[str, dict[str, Any]]:
    """indexParticipation per backend key, for every backend the poller should write.

    A backend whose replicas appear gets prefixCount (sum), lastEventAt (max, unset
    when no replica has a non-zero one) and t2HitRate (query-weighted, unset without
    queries). A backend that had a projection but no replica now is reset to
    prefixCount 0 (a drain must not leave stale positive values). Backends never
    seen stay unset.
    """
    by_ns: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for cb in backends:
        by_ns[meta(cb).namespace].append(cb)
    agg: dict[str, dict[str, Any]] = {}
    for replica in snapshot.get("replicas") or []:
        ns, pod_name = str(replica.get("tenant") or ""), str(replica.get("replicaId") or "")
        pod = pods.get((ns, pod_name))
        if pod is None:
            continue  # drained since; it still counts in the cluster-wide CacheIndex
        key = owning_backend(pod, by_ns.get(ns, []))
        if key is None:
            continue
        a = agg.setdefault(key, {"prefix": 0, "last": None, "hits": 0, "queries": 0})
        a["prefix"] += int(replica.get("prefixCount") or 0)
        when = parse_time(replica.get("lastEventAt"))
        if when is not None and when > _EPOCH and (a["last"] is None or when > a["last"]):
            a["last"] = when
        a["hits"] += int(replica.get("t2HitTokens") or 0)
        a["queries"] += int(replica.get("t2QueryTokens") or 0)

    out: dict[str, dict[str, Any]] = {}
    for cb in backends:
        key = str(object_key(cb))
        seen = agg.get(key)
        if seen is None:
            if (cb.get("status") or {}).get("indexParticipation") is not None:
                out[key] = {"prefixCount": 0}
            continue
        proj: dict[str, Any] = {"prefixCount": seen["prefix"]}
        if seen["last"] is not None:
            proj["lastEventAt"] = format_time(seen["last"])
        if seen["queries"] > 0:
            proj["t2HitRate"] = _format_rate(seen["hits"] / seen["queries"])
        out[key] = proj
    return out


class SnapshotPoller(threading.Thread):
    """Polls /snapshot every ``interval`` s; one poller per interval cluster-wide
    (a Redis lock), however many worker processes run one.

    It reads only the pods a replica can be attributed to — those labelled
    injected-by-uid, and those a backend's engine selector matches — from the worker's
    ``cache`` when it has one, else from the API server, metadata only, a few lists per
    namespace. (A pod injected before the webhook stamped the label, and matching no
    selector, is not attributed.)"""

    def __init__(
        self,
        kube: k.KubeClient,
        server: ServerClient,
        client: redis.Redis,
        *,
        interval: float = 10.0,
        stop: threading.Event | None = None,
        on_error: Callable[[Exception], None] | None = None,
        cache: ClusterCache | None = None,
    ) -> None:
        super().__init__(name="icache-snapshot-poller", daemon=True)
        self.kube = kube
        self.server = server
        self.redis = client
        self.interval = interval
        self.stop_event = stop or threading.Event()
        self.on_error = on_error
        self.cache = cache

    def run(self) -> None:
        while not self.stop_event.wait(self.interval):
            try:
                if self.redis.set(POLL_LOCK, "1", nx=True, px=int(self.interval * 900)):
                    self.poll_once()
            except Exception as exc:  # a failing scrape preserves state (soft state)
                log.warning("snapshot poll failed", extra={"error": str(exc)})
                if self.on_error:
                    self.on_error(exc)

    def _backends(self) -> list[dict[str, Any]]:
        if self.cache is not None and fresh(self.cache.backends):
            return list(self.cache.backends.store.all())
        return self.kube.list(k.CACHEBACKENDS).get("items") or []

    def _attributable_pods(
        self, namespace: str, backends: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        """Pods of ``namespace`` a replica can be attributed to (metadata is enough)."""
        selectors = [
            sel for cb in backends if (sel := engine_selector_labels(cb)) and valid_selector(sel)
        ]
        cache = self.cache
        if cache is not None and fresh(cache.injected_pods):
            watches = [cache.engine_pods.covering(namespace, sel, 0.0) for sel in selectors]
            if all(w is not None for w in watches):
                out = cache.injected_pods.store.in_namespace(namespace)
                for watch in {id(w): w for w in watches if w is not None}.values():
                    out.extend(watch.store.in_namespace(namespace))
                return out
        out = (
            self.kube.list(
                k.PODS, namespace, label_selector=c.LABEL_INJECTED_BY_UID, metadata_only=True
            ).get("items")
            or []
        )
        groups = selector_groups((namespace, sel) for sel in selectors)
        for (_, key), values in sorted(groups.items()):
            out.extend(
                self.kube.list(
                    k.PODS,
                    namespace,
                    label_selector=set_selector(key, values),
                    metadata_only=True,
                ).get("items")
                or []
            )
        return out

    def poll_once(self) -> int:
        snapshot = self.server.snapshot()
        backends = self._backends()
        namespaces = {
            str(r.get("tenant")) for r in snapshot.get("replicas") or [] if r.get("tenant")
        }
        pods: dict[tuple[str, str], dict[str, Any]] = {}
        for ns in sorted(namespaces):
            in_ns = [cb for cb in backends if meta(cb).namespace == ns]
            for pod in self._attributable_pods(ns, in_ns):
                pods[(ns, meta(pod).name)] = pod
        writes = 0
        projection = project_index_participation(snapshot, pods, backends)
        for cb in backends:
            cb_meta = meta(cb)
            key = str(object_key(cb))
            want = projection.get(key)
            status = dict(cb.get("status") or {})
            if want is None or status.get("indexParticipation") == want:
                continue
            prev = dict(status.get("indexParticipation") or {})
            # hitRate is not ours to aggregate (always unset today); keep what is there.
            if "hitRate" in prev:
                want = {**want, "hitRate": prev["hitRate"]}
                if prev == want:
                    continue
            status["indexParticipation"] = want
            try:
                self.kube.replace_status(
                    k.CACHEBACKENDS, cb_meta.namespace, cb_meta.name, {**cb, "status": status}
                )
                writes += 1
            except k.ApiError as exc:
                if not exc.conflict:
                    raise
                # The reconciler wrote meanwhile: the next poll re-projects.
        return writes
