"""The reconcile task and the per-process worker runtime behind it."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import redis
from celery import Celery

from kubeio import access as kubeaccess
from kubeio.client import JSON_ACCEPT, Kube
from reconciler import metrics
from reconciler.cascade import CASCADE_WINDOW_SECONDS
from reconciler.celery_app import RECONCILE_TASK
from reconciler.cluster_cache import CachedReads, ClusterCache
from reconciler.reads import ClusterReads, LiveReads
from reconciler.reconcile import CascadeClaim, Reconciler
from reconciler.redis_conn import RedisTimeouts, redis_client
from reconciler.server_client import DEFAULT_TOKEN_PATH, ServerClient
from reconciler.workqueue import DONE, QueueSettings, WorkQueue

log = logging.getLogger(__name__)
# One DEBUG line when a reconcile starts and one when it ends, with the lease token
# and a system-wide monotonic timestamp: enough to prove from the logs of several
# worker processes that no key ever ran in two places at once. Off unless this
# logger is turned on (ICACHE_DEBUG_LOGGERS=reconciler.trace).
trace = logging.getLogger("reconciler.trace")


@dataclass(frozen=True)
class WorkerConfig:
    kubeconfig: str | None
    redis_url: str
    server_url: str = ""
    token_path: str = DEFAULT_TOKEN_PATH
    queue: QueueSettings = QueueSettings()
    probe_window_seconds: float = 30.0
    redis_timeouts: RedisTimeouts = RedisTimeouts()
    # "cache": reconciles read the process's watch caches (reconciler.cluster_cache);
    # "api": every read goes to the API server, scoped by label selectors.
    reads: str = "cache"


class LeaseExpiredError(RuntimeError):
    """The work-queue lease of the key being reconciled may have lapsed."""


# The (queue, key, token) of the reconcile running on this thread, for FencedKube.
_running = threading.local()


class FencedKube(Kube):
    """A Kube that refuses to write for a reconcile whose work-queue lease could not
    be renewed in time (Redis unreachable, the process starved): once the lease may
    have expired the reaper may hand the key to another worker, and two workers must
    never write for one key at once. Reads go through; the reconcile fails on its
    next write and the key is retried (or has already been handed on)."""

    def request(
        self,
        method: str,
        path: str,
        *,
        query: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str | None = None,
        accept: str = JSON_ACCEPT,
    ) -> dict[str, Any]:
        if method != "GET":
            check_lease()
        return super().request(
            method, path, query=query, body=body, content_type=content_type, accept=accept
        )


def check_lease() -> None:
    """Raise LeaseExpiredError when this thread's reconcile may no longer hold its key:
    less than a sixth of the lease is left since the last renewal Redis confirmed
    (with renewals every third, that is one and a half missed renewals)."""
    lease = getattr(_running, "lease", None)
    if lease is None:
        return
    queue, key, token = lease
    until = queue.lease_valid_until(key, token)
    if until is not None and time.monotonic() > until - queue.settings.lease_seconds / 6:
        raise LeaseExpiredError(f"{key}: work-queue lease not renewed in time; not writing")


READS_CACHE: Final = "cache"
READS_API: Final = "api"
READS_CHOICES: Final = (READS_CACHE, READS_API)


@dataclass
class Runtime:
    queue: WorkQueue
    reconciler: Reconciler
    pid: int
    cache: ClusterCache | None = None


_config: WorkerConfig | None = None
_runtime: Runtime | None = None
_lock = threading.Lock()


def configure(config: WorkerConfig) -> None:
    global _config, _runtime
    with _lock:
        _config = config
        _runtime = None


def runtime() -> Runtime:
    """This process's clients, built on first use (and rebuilt after a fork)."""
    global _runtime
    with _lock:
        if _runtime is not None and _runtime.pid == os.getpid():
            return _runtime
        if _config is None:
            raise RuntimeError("worker not configured: call reconciler.tasks.configure() first")
        client = redis_client(_config.redis_url, _config.redis_timeouts)
        queue = WorkQueue(client, _config.queue)
        server = (
            ServerClient(_config.server_url, token_path=_config.token_path)
            if _config.server_url
            else None
        )
        kube = FencedKube(kubeaccess.api_client(_config.kubeconfig))
        cache: ClusterCache | None = None
        reads: ClusterReads = LiveReads(kube)
        if _config.reads == READS_CACHE:
            # One cache per process: a prefork pool's children each build their own
            # (threads do not survive a fork), from the API server, on their first task.
            cache = ClusterCache(
                _cache_client(_config.kubeconfig), enqueue=_cache_enqueue(queue)
            ).start()
            reads = CachedReads(cache, LiveReads(kube))
        reconciler = Reconciler(
            kube,
            server=server,
            probe_rate_limiter=redis_probe_rate_limiter(client, _config.probe_window_seconds),
            probe_window=_config.probe_window_seconds,
            cascade_limiter=RedisCascadeLimiter(client, CASCADE_WINDOW_SECONDS),
            reads=reads,
        )
        _runtime = Runtime(queue=queue, reconciler=reconciler, pid=os.getpid(), cache=cache)
        return _runtime


# Every cache watch holds a connection for as long as it streams; reconciles' requests
# must not wait behind them, so the cache has its own pool. Engine watches are per
# namespace (two per namespace and selector key in use), so the pool keeps room for a
# few hundred: a watch that re-opens past the pool's size still connects, but urllib3
# then discards the connection with a warning on every re-open.
CACHE_CONNECTIONS: Final = 256


def _cache_client(kubeconfig: str | None) -> Kube:
    from kubernetes.client import ApiClient

    configuration = kubeaccess.load_configuration(kubeconfig).configuration
    configuration.connection_pool_maxsize = CACHE_CONNECTIONS
    return Kube(ApiClient(configuration))


def _cache_enqueue(queue: WorkQueue) -> Callable[[str], None]:
    """The cache's adds: a change it now holds wakes the backends it concerns."""

    def enqueue(key: str) -> None:
        queue.add(key)

    return enqueue


def redis_probe_rate_limiter(client: redis.Redis, window: float) -> Callable[[str], float | None]:
    """At most one /probe per backend per window across every worker process."""

    def limiter(key: str) -> float | None:
        name = f"icache:probe:{key}"
        if client.set(name, "1", nx=True, px=int(window * 1000)):
            return None
        ttl = client.pttl(name)
        return max(float(ttl) / 1000.0, 0.1) if isinstance(ttl, int) and ttl > 0 else window

    return limiter


class RedisCascadeLimiter:
    """At most one engine cascade per backend per window across every worker process.
    The key holds the identifier the cascade ran for, so a reconcile retried after a
    lost status write recognises its own cascade instead of waiting out the window
    and rolling the engines twice."""

    def __init__(self, client: redis.Redis, window: float) -> None:
        self.client = client
        self.window = window

    @staticmethod
    def _name(key: str) -> str:
        return f"icache:cascade:{key}"

    def claim(self, key: str, value: str) -> CascadeClaim:
        name = self._name(key)
        if self.client.set(name, value, nx=True, px=int(self.window * 1000)):
            return "go", 0.0
        current = self.client.get(name)
        if isinstance(current, bytes):
            current = current.decode()
        if current == value:
            return "done", 0.0
        ttl = self.client.pttl(name)
        return "wait", max(float(ttl) / 1000.0, 0.1) if isinstance(ttl, int) and ttl > 0 else 0.1

    def release(self, key: str) -> None:
        self.client.delete(self._name(key))


def _finish(
    queue: WorkQueue, key: str, token: str, *, error: bool, requeue_after: float | None
) -> None:
    """Record the outcome, riding out a short Redis outage. If Redis stays away the
    lease simply expires and the key is re-run (or re-listed): nothing is lost."""
    deadline = time.monotonic() + queue.settings.lease_seconds
    while True:
        try:
            outcome, delay = queue.done(key, token, error=error, requeue_after=requeue_after)
            if outcome != DONE:
                log.warning(
                    "lease was taken over while running; outcome dropped", extra={"key": key}
                )
            elif error:
                log.info("retrying after an error", extra={"key": key, "delay_s": delay})
            return
        except redis.RedisError as exc:
            if time.monotonic() > deadline:
                log.error("could not record the outcome", extra={"key": key, "error": str(exc)})
                return
            time.sleep(0.5)


def _trace_end(key: str, token: str) -> None:
    trace.debug("reconcile end", extra={"key": key, "token": token, "mono": time.monotonic()})


def run_key(key: str) -> str:
    """Run one reconcile of ``key`` under the work queue's lease."""
    rt = runtime()
    try:
        with rt.queue.leased(key) as token:
            if token is None:
                return "skipped"
            started = time.monotonic()
            trace.debug("reconcile start", extra={"key": key, "token": token, "mono": started})
            _running.lease = (rt.queue, key, token)
            try:
                result = rt.reconciler.reconcile(key)
            except Exception as exc:
                _running.lease = None
                _trace_end(key, token)
                if isinstance(exc, LeaseExpiredError):
                    log.warning(
                        "reconcile fenced: lease not renewed in time, not writing",
                        extra={"key": key},
                    )
                else:
                    log.exception("reconcile failed", extra={"key": key})
                outcome = "error"
                _finish(rt.queue, key, token, error=True, requeue_after=None)
            else:
                _running.lease = None
                _trace_end(key, token)
                outcome = "requeue" if result.requeue_after else "success"
                _finish(rt.queue, key, token, error=False, requeue_after=result.requeue_after)
                if result.writes:
                    log.info(
                        "reconciled",
                        extra={"key": key, "mode": result.mode, "writes": result.writes},
                    )
            elapsed = time.monotonic() - started
            metrics.reconciled(metrics.REQUEUE_AFTER if outcome == "requeue" else outcome, elapsed)
            return outcome
    except redis.RedisError as exc:
        # Could not even claim the key: it stays queued and the dispatcher's reaper
        # (or the resync after a Redis restart) hands it out again.
        log.warning("work queue unavailable", extra={"key": key, "error": str(exc)})
        return "unavailable"


def register(app: Celery) -> None:
    def reconcile_task(key: str) -> str:
        return run_key(key)

    # Registered by a call, not as a decorator: celery is untyped, and an untyped
    # decorator would erase the function's type (mypy --strict).
    app.task(name=RECONCILE_TASK, ignore_result=True)(reconcile_task)
