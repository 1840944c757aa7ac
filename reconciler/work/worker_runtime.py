"""A worker process's composition root: its clients, built once per process.

``icache worker`` calls :func:`configure` at start; the reconcile task asks
:func:`runtime` for the clients, which are built on first use in the process that
runs the task (a prefork pool's children each build their own after the fork:
sockets and threads do not survive one). The Kubernetes configuration is loaded once
per process and serves both the reconciles' client and the watch caches' pool.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
from dataclasses import dataclass
from typing import Final

from kubeio import access as kubeaccess
from kubeio.client import Kube
from reconciler import metrics
from reconciler.queue.redis_conn import RedisTimeouts, redis_client
from reconciler.queue.workqueue import QueueSettings, WorkQueue
from reconciler.status.cascade import CASCADE_WINDOW_SECONDS
from reconciler.steps.reads import ClusterReads, LiveReads
from reconciler.steps.reconcile import Reconciler
from reconciler.steps.server_client import DEFAULT_TOKEN_PATH, ServerClient
from reconciler.watch.cluster_cache import CachedReads, ClusterCache
from reconciler.watch.freshness import Fence
from reconciler.work.lease_fence import FencedKube
from reconciler.work.rate_limits import RedisCascadeLimiter, redis_probe_rate_limiter

log = logging.getLogger(__name__)

READS_CACHE: Final = "cache"
READS_API: Final = "api"
READS_CHOICES: Final = (READS_CACHE, READS_API)

# Every cache watch holds a connection for as long as it streams; reconciles' requests
# must not wait behind them, so the cache has its own pool. Engine watches are per
# namespace (two per namespace and selector key in use), so the pool keeps room for a
# few hundred: a watch that re-opens past the pool's size still connects, but urllib3
# then discards the connection with a warning on every re-open.
CACHE_CONNECTIONS: Final = 256
# How long a run waits for its caches to hold the change the dispatcher woke it for
# before it reads the API server instead: caches hear a change within milliseconds of
# the dispatcher, so only a cache that is behind (a watch re-listing) waits this long.
FENCE_WAIT_SECONDS: Final = 2.0


@dataclass(frozen=True)
class WorkerConfig:
    kubeconfig: str | None
    redis_url: str
    server_url: str = ""
    token_path: str = DEFAULT_TOKEN_PATH
    queue: QueueSettings = QueueSettings()
    probe_window_seconds: float = 30.0
    redis_timeouts: RedisTimeouts = RedisTimeouts()
    # "cache": reconciles read the process's watch caches (reconciler.watch.cluster_cache);
    # "api": every read goes to the API server, scoped by label selectors.
    reads: str = READS_CACHE


@dataclass
class Runtime:
    queue: WorkQueue
    reconciler: Reconciler
    pid: int
    cache: ClusterCache | None = None
    # The reconciles' API-server reads, for a run whose caches are behind the change
    # that woke it (reconciler.watch.freshness).
    live: ClusterReads | None = None

    def reads_for(self, fences: list[Fence] | None) -> ClusterReads | None:
        """Where a run woken for ``fences`` reads: None for the reconciler's own reads
        (the caches, once they hold every fenced change, or reading live anyway); the
        API server when a cache is still behind after FENCE_WAIT_SECONDS, or a fence
        cannot be read (None)."""
        if self.cache is None or fences == []:
            return None
        if fences is not None and self.cache.caught_up(fences, FENCE_WAIT_SECONDS):
            return None
        metrics.CACHE_LIVE_READS.labels("behind-dispatcher").inc()
        log.debug("caches behind the change that woke this run: reading the API server")
        return self.live


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
            raise RuntimeError(
                "worker not configured: call reconciler.work.worker_runtime.configure() first"
            )
        _runtime = build(_config)
        return _runtime


def build(config: WorkerConfig) -> Runtime:
    """The work queue, the reconciler and (reading from caches) the watch caches."""
    client = redis_client(config.redis_url, config.redis_timeouts)
    queue = WorkQueue(client, config.queue)
    loaded = kubeaccess.load_configuration(config.kubeconfig)
    log.info(
        "kubernetes configuration loaded",
        extra={"source": loaded.source, "server": loaded.configuration.host},
    )
    kube = FencedKube.from_configuration(loaded.configuration)
    cache: ClusterCache | None = None
    reads: ClusterReads = LiveReads(kube)
    if config.reads == READS_CACHE:
        # One cache per process: a prefork pool's children each build their own
        # (threads do not survive a fork), from the API server, on their first task.
        cache = ClusterCache(_cache_client(loaded)).start()
        reads = CachedReads(cache, LiveReads(kube))
    reconciler = Reconciler(
        kube,
        server=(
            ServerClient(config.server_url, token_path=config.token_path)
            if config.server_url
            else None
        ),
        probe_rate_limiter=redis_probe_rate_limiter(client, config.probe_window_seconds),
        probe_window=config.probe_window_seconds,
        cascade_limiter=RedisCascadeLimiter(client, CASCADE_WINDOW_SECONDS),
        reads=reads,
    )
    return Runtime(
        queue=queue, reconciler=reconciler, pid=os.getpid(), cache=cache, live=LiveReads(kube)
    )


def _cache_client(loaded: kubeaccess.Loaded) -> Kube:
    """A client of its own for the watch caches, with room for every watch: a shallow
    copy of the loaded configuration, so it shares the credentials (and their
    refresh) with the reconciles' client."""
    configuration = copy.copy(loaded.configuration)
    configuration.connection_pool_maxsize = CACHE_CONNECTIONS
    return Kube.from_configuration(configuration)
