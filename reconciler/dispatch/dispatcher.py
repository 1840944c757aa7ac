"""The dispatcher: watches, enqueues keys, and pumps due keys to the Celery workers.

Only the elected leader (Lease) watches and enqueues; it is the one process that adds
to the work queue (the workers' caches only serve their reads). Each add carries a
fence, the change that woke the key, so the worker that runs it reads its caches only
once they hold that change (reconciler.watch.freshness). While leading it runs:

* one watch per resource — CacheBackends, and the Deployments, StatefulSets,
  Services and HPAs we manage (mapped to their owner's key) — each resuming from
  its last resourceVersion and re-listing on 410 Gone;
* the engine ReplicaSets (metadata only), watched as the workers' caches watch them,
  per (namespace, selector key) of the backends' engine selectors: a change of what an
  engine Deployment is derived from enqueues the backends selecting it;
* a watch on pods (metadata only), for three things: a change of an injected engine pod (or of a
  managed cache-server pod) enqueues its backend, so kernel-check verdicts,
  crash-loops and server restarts are seen without waiting for the resync; a pod
  that starts or stops matching a backend's spec.engineSelector (created, deleted,
  relabelled) enqueues that backend, so status.matchedEnginePods follows at once; and the
  engine-pod events controller (:mod:`reconciler.dispatch.pod_events`) records
  InjectedByCacheBackend / SkippedByOperator on the pods the webhook decided on;
* the ``inferencecache_backend_t2_hit_rate{backend}`` and
  ``inferencecache_backend_condition{backend,type,status,reason}`` gauges, from the
  status of every CacheBackend the watch sees (the leader is the one process with
  every backend's current value);
* a resync that enqueues every known CacheBackend every ``resync_period``;
* the pump: moves due keys from the work queue to Celery, reaps expired worker
  leases and lost dispatches, and re-adds every key when Redis lost its data.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis
from celery import Celery

from kubeio import client as k
from reconciler import metrics
from reconciler.dispatch.leader import ElectionSettings, LeaderElector
from reconciler.dispatch.pod_events import EnginePodEvents
from reconciler.queue.celery_app import QUEUE_NAME, RECONCILE_TASK
from reconciler.queue.workqueue import QueueDataLostError, WorkQueue
from reconciler.steps.reads import DISPATCHER_OWNED_RESOURCES
from reconciler.watch import enqueue_keys
from reconciler.watch.engine_deployments import replicaset_metadata
from reconciler.watch.enqueue_keys import SelectorIndex, owner_key
from reconciler.watch.freshness import Fence, fence_for
from reconciler.watch.selector_watches import SelectorWatches
from reconciler.watch.watch_cache import WatchSpec, list_then_watch
from shared.backend_keys import BackendKey, object_key
from shared.stop_signal import StopSignal

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DispatcherSettings:
    resync_period: float = 30.0
    watch_timeout: int = 300
    reap_interval: float = 1.0
    pump_batch: int = 500


def t2_hit_rate(obj: dict[str, Any]) -> float | None:
    """status.indexParticipation.t2HitRate as a number; None when unset or unreadable."""
    raw = ((obj.get("status") or {}).get("indexParticipation") or {}).get("t2HitRate")
    if raw is None or raw == "":
        return None
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None


def dispatch_fence_after_data_loss(
    detected_at: float, lease_seconds: float, reap_interval: float
) -> float:
    """Until when (monotonic) nothing is dispatched after Redis lost its data.

    The loss took the ``processing`` hash with it, so a worker still running a key from
    before it looks like no one to the queue. That worker keeps believing its lease
    for at most ``lease_seconds`` after its last confirmed renewal (which came before
    the loss) and stops writing before then (reconciler.work.lease_fence.check_lease); the loss
    was seen at most one reap interval after it happened. Waiting that long means no
    two workers ever run one key at once."""
    return detected_at + lease_seconds + reap_interval


def pump_stalled(last_beat: float, now: float, renew_deadline: float) -> bool:
    """A leader whose pump has not reached Redis for longer than the renew deadline
    gives its Lease up: holding it while dispatching nothing would keep a standby
    that can reach Redis from taking over."""
    return now - last_beat > renew_deadline


class Dispatcher(StopSignal):
    def __init__(
        self,
        kube: k.KubeClient,
        queue: WorkQueue,
        app: Celery,
        election: ElectionSettings,
        settings: DispatcherSettings | None = None,
    ) -> None:
        self.kube = kube
        self.queue = queue
        self.app = app
        self.settings = settings or DispatcherSettings()
        self.elector = LeaderElector(kube, election)
        self.known: set[str] = set()
        self._known_lock = threading.Lock()
        self._stop = threading.Event()
        self._leading: threading.Event | None = None
        self._threads: list[threading.Thread] = []
        self._redis_run_id: str | None = None
        self._fence_until = 0.0  # monotonic: nothing is dispatched before it
        self._epoch_marked = False  # this leader set the queue's data-loss marker
        self._resync_requested = threading.Event()
        self.pod_events = EnginePodEvents(kube, instance=election.identity)
        self.selectors = SelectorIndex()
        self._engine_replicasets: SelectorWatches | None = None
        # time.monotonic() of the last pass of the election loop and of the last
        # pump iteration that reached Redis: what the liveness check and the
        # give-up-the-lease rule look at.
        self.loop_beat = time.monotonic()
        self.pump_beat = time.monotonic()

    # ------------------------------------------------------------ lifecycle

    def liveness_beats(self) -> dict[str, float]:
        """Heartbeats of the loops that must keep turning: the election loop always,
        the pump while leading. (A pump stalled on Redis normally makes this process
        give the Lease up long before the liveness bound.)"""
        beats = {"election-loop": self.loop_beat}
        if self._leading is not None:
            beats["pump"] = self.pump_beat
        return beats

    def run(self) -> None:
        """Campaign for the Lease until stopped; lead while holding it."""
        s = self.elector.s
        log.info(
            "campaigning for the leader lease",
            extra={"identity": s.identity, "lease": str(BackendKey(s.namespace, s.name))},
        )
        try:
            while not self._stop.is_set():
                self.loop_beat = time.monotonic()
                if self._leading is not None and pump_stalled(
                    self.pump_beat, time.monotonic(), s.renew_deadline
                ):
                    log.warning(
                        "pump made no progress within the renew deadline: "
                        "giving up the lease until Redis answers again",
                        extra={
                            "stalled_s": round(time.monotonic() - self.pump_beat, 1),
                            "renew_deadline_s": s.renew_deadline,
                        },
                    )
                    self._stop_leading(release=True)
                    self._wait_for_redis()
                    continue
                renewed = self.elector.try_acquire_or_renew()
                if renewed and self._leading is None:
                    self._start_leading()
                elif not renewed and self._leading is not None and not self.elector.holds_lease:
                    log.warning("lost the lease: stepping down")
                    self._stop_leading(release=False)
                self._stop.wait(s.retry_period)
        finally:
            if self._leading is not None:
                self._stop_leading(release=True)

    def _wait_for_redis(self) -> None:
        """Block until Redis answers a PING (on a fresh connection: the pool dropped
        the ones that timed out), so a dispatcher that cannot pump does not take the
        Lease back from a standby that can."""
        while not self._stop.is_set():
            self.loop_beat = time.monotonic()
            try:
                if self.queue.redis.ping():
                    log.info("Redis answers again: campaigning for the lease")
                    return
            except Exception as exc:  # timeout, refused, LOADING...
                log.debug("Redis still unreachable", extra={"error": str(exc)})
            self._stop.wait(self.elector.s.retry_period)

    def _start_leading(self) -> None:
        log.info("became leader")
        metrics.set_leader(True, self.elector.s.name)
        leading = threading.Event()
        leading.set()
        self._leading = leading
        self.pump_beat = time.monotonic()
        self._resync_requested.set()
        specs: list[tuple[str, Callable[[], None]]] = [
            ("watch-cachebackends", lambda: self._watch_loop(k.CACHEBACKENDS, None, leading)),
            *[
                (
                    f"watch-{res.plural}",
                    lambda res=res: self._watch_loop(res, enqueue_keys.OWNED_SELECTOR, leading),
                )
                for res in DISPATCHER_OWNED_RESOURCES
            ],
            # Metadata only: the pod events controller and the enqueue rules read
            # labels, annotations and identity, never spec or status.
            ("watch-pods", lambda: self._watch_loop(k.PODS, None, leading, metadata_only=True)),
            ("pump", lambda: self._pump_loop(leading)),
            ("resync", lambda: self._resync_loop(leading)),
        ]
        self._threads = [threading.Thread(target=fn, name=name, daemon=True) for name, fn in specs]
        self._engine_replicasets = SelectorWatches(
            self.kube,
            k.REPLICASETS,
            "engine-replicasets",
            transform=replicaset_metadata,
            on_change=self._handle_replicaset,
            on_restart=lambda cause: metrics.WATCH_RESTARTS.labels(
                k.REPLICASETS.plural, cause
            ).inc(),
            watch_timeout=self.settings.watch_timeout,
        )
        self._engine_replicasets.start()
        for t in self._threads:
            t.start()

    def _stop_leading(self, *, release: bool) -> None:
        # A standby exports no backend gauges nor queue state: the new leader does.
        metrics.set_leader(False, self.elector.s.name)
        self.pod_events.reset()
        self.selectors.clear()
        if self._engine_replicasets is not None:
            self._engine_replicasets.stop()
            self._engine_replicasets = None
        if self._leading is not None:
            self._leading.clear()
        self._leading = None
        if release:
            # Before joining: a pump stuck on a dead Redis may take a socket timeout
            # to notice, and the standby should not wait for that.
            self.elector.release()
        # Watch threads may be blocked on a read; they check `leading` before acting
        # and exit at the next event or stream timeout. A pump thread still blocked
        # after the join finds `leading` cleared and exits; at worst it dispatches
        # one more batch, which the work queue's atomic claims make harmless.
        for t in self._threads:
            if t.name in ("pump", "resync"):
                t.join(timeout=5)
        self._threads = []

    # ------------------------------------------------------------ enqueue

    def _is_leading(self) -> bool:
        """This process holds the Lease now. The watch, pump and resync loops are bound
        to the term that started them (they stop when its event clears); what they call
        asks the current term here."""
        leading = self._leading
        return leading is not None and leading.is_set()

    def enqueue(self, key: str, fence: Fence | None = None) -> None:
        """Add ``key``; ``fence``: the change it is added for (None: a resync)."""
        if not self._is_leading():
            return
        try:
            self.queue.add(key, fence=(fence.field, fence.encode()) if fence else None)
        except redis.RedisError as exc:
            # Redis is away: remember to re-add everything once it is back.
            log.warning("could not enqueue", extra={"key": key, "error": str(exc)})
            self._resync_requested.set()

    def _enqueue_all(self) -> None:
        with self._known_lock:
            keys = sorted(self.known)
        for key in keys:
            self.enqueue(key)

    # ------------------------------------------------------------ watches

    def _handle_cachebackend(self, kind: str, obj: dict[str, Any]) -> None:
        key = str(object_key(obj))
        with self._known_lock:
            if kind == "DELETED":
                self.known.discard(key)
            else:
                self.known.add(key)
        if self.selectors.set_backend(obj, deleted=kind == "DELETED"):
            self._follow_selectors()
        self._export_t2(key, None if kind == "DELETED" else obj)
        self.enqueue(key, fence_for(k.CACHEBACKENDS.plural, obj))

    def _follow_selectors(self) -> None:
        """Watch the engine ReplicaSets of every known backend's engine selector."""
        watches = self._engine_replicasets
        if watches is not None:
            watches.want(self.selectors.groups())

    @staticmethod
    def _export_t2(key: str, obj: dict[str, Any] | None) -> None:
        """The per-backend gauges of ``key``: its tier-2 hit rate and its conditions
        (``obj`` None: the backend is gone)."""
        metrics.LEADER_SERIES.backend(key, obj, t2_hit_rate(obj) if obj is not None else None)

    def _handle_pod(self, kind: str, pod: dict[str, Any]) -> None:
        if not self._is_leading():
            return
        self.pod_events.observe(kind, pod)
        changed = self.selectors.pod_changed(kind, pod)
        if kind == "LIST":
            return  # the CacheBackend (re-)list enqueues every backend anyway
        self._enqueue_known(changed, fence_for(k.PODS.plural, pod))

    def _handle_replicaset(
        self, _kind: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        obj = new or old
        if obj is None or not self._is_leading():
            return
        self._enqueue_known(
            self.selectors.replicaset_changed(old, new), fence_for(k.REPLICASETS.plural, obj)
        )

    def _enqueue_known(self, keys: frozenset[str], fence: Fence | None) -> None:
        with self._known_lock:
            known = keys & self.known
        for key in sorted(known):
            self.enqueue(key, fence)

    def _handle_owned(self, res: k.Resource, obj: dict[str, Any]) -> None:
        key = owner_key(obj)
        if key is not None:
            self.enqueue(key, fence_for(res.plural, obj))

    def _watch_loop(
        self,
        res: k.Resource,
        selector: str | None,
        leading: threading.Event,
        *,
        metadata_only: bool = False,
    ) -> None:
        is_cb = res is k.CACHEBACKENDS
        is_pod = res is k.PODS

        def on_list(items: list[dict[str, Any]]) -> None:
            if is_cb:
                current = {str(object_key(o)) for o in items}
                with self._known_lock:
                    vanished = self.known - current
                    self.known = current
                self.selectors.reset_backends(items)
                self._follow_selectors()
                for o in items:
                    self._export_t2(str(object_key(o)), o)
                for key in vanished:
                    self._export_t2(key, None)
                # Deleted while we were not watching: one last (no-op) pass.
                for key in sorted(vanished | current):
                    self.enqueue(key)
            elif is_pod:
                for o in items:
                    self._handle_pod("LIST", o)
            else:
                for o in items:
                    self._handle_owned(res, o)

        def on_event(kind: str, obj: dict[str, Any]) -> None:
            if is_cb:
                self._handle_cachebackend(kind, obj)
            elif is_pod:
                self._handle_pod(kind, obj)
            else:
                self._handle_owned(res, obj)

        list_then_watch(
            self.kube,
            WatchSpec(res, selector, metadata_only=metadata_only),
            on_list=on_list,
            on_event=on_event,
            running=lambda: leading.is_set() and not self._stop.is_set(),
            timeout_seconds=self.settings.watch_timeout,
            on_restart=lambda cause: metrics.WATCH_RESTARTS.labels(res.plural, cause).inc(),
        )

    # ------------------------------------------------------------ resync + pump

    def _resync_loop(self, leading: threading.Event) -> None:
        while leading.is_set() and not self._stop.wait(self.settings.resync_period):
            if not leading.is_set():
                return
            self._enqueue_all()
            self.pod_events.retry()

    def _queue_data_lost(self, why: str) -> None:
        """Redis lost the queue: re-add every key, and dispatch nothing until any lease
        from before the loss has lapsed (dispatch_fence_after_data_loss)."""
        self._fence_until = dispatch_fence_after_data_loss(
            time.monotonic(), self.queue.settings.lease_seconds, self.settings.reap_interval
        )
        log.warning(
            "the work queue lost its data: re-adding every known key, dispatching again "
            "once any lease from before has lapsed",
            extra={
                "why": why,
                "fence_s": self.queue.settings.lease_seconds + self.settings.reap_interval,
            },
        )
        self.queue.mark_epoch()
        self._resync_requested.set()

    def _check_redis_restart(self) -> None:
        """A Redis that restarted without persistence lost the queue: re-add every key."""
        run_id = str(self.queue.redis.info("server").get("run_id"))
        restarted = self._redis_run_id is not None and run_id != self._redis_run_id
        if restarted and time.monotonic() >= self._fence_until:  # not already handled
            self._queue_data_lost("Redis restarted (run_id changed)")
        self._redis_run_id = run_id
        if not self._epoch_marked:
            self.queue.mark_epoch()
            self._epoch_marked = True
        if self._resync_requested.is_set():
            self._resync_requested.clear()
            self._enqueue_all()

    def _pump_loop(self, leading: threading.Event) -> None:
        last_reap = 0.0
        while leading.is_set() and not self._stop.is_set():
            try:
                fenced = time.monotonic() < self._fence_until
                due: list[str] = []
                if not fenced:
                    try:
                        due = self.queue.pop_due(
                            self.settings.pump_batch, require_epoch=self._epoch_marked
                        )
                    except QueueDataLostError:
                        # Seen before the next run_id check: keys added since the loss
                        # (watch events) must not be dispatched either.
                        self._queue_data_lost("the queue's marker is gone")
                        fenced = True
                for key in due:
                    # ignore_result: outcomes live in the work queue. Without it the
                    # worker writes a result key and this process subscribes to it,
                    # two more Redis waits per key (unbounded retries on a dead Redis).
                    self.app.send_task(
                        RECONCILE_TASK, args=[key], queue=QUEUE_NAME, ignore_result=True
                    )
                now = self.pump_beat = time.monotonic()
                if now - last_reap >= self.settings.reap_interval:
                    last_reap = now
                    self._check_redis_restart()
                    backlog = int(self.queue.redis.llen(QUEUE_NAME))
                    self.queue.reap(broker_backlog=backlog)
                    self.queue.update_depth_metrics()
                due_in = self.queue.next_due_in()
                wait = (
                    self.settings.reap_interval
                    if due_in is None
                    else min(due_in, self.settings.reap_interval)
                )
                if fenced:  # due keys wait for the fence, not in a busy loop
                    wait = max(wait, min(self._fence_until - now, self.settings.reap_interval))
                if wait > 0:
                    self.queue.wait_for_work(wait)
                self.pump_beat = time.monotonic()
            except Exception as exc:  # Redis away, broker hiccup: keep pumping
                log.warning("pump failed", extra={"error": str(exc)})
                with contextlib.suppress(Exception):
                    self._resync_requested.set()
                time.sleep(0.5)
