"""`icache worker`: a Celery worker running reconciles off the Redis work queue."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass

from cli_support import arg_types as cli_types
from kubeio import access as kubeaccess
from reconciler import health, metrics
from reconciler.cli_common import (
    CommonSettings,
    add_common_arguments,
    common_settings_from,
    readiness,
    setup_logging,
)
from reconciler.queue.celery_app import QUEUE_NAME, make_app
from reconciler.queue.redis_conn import redis_client
from reconciler.queue.workqueue import QueueSettings
from reconciler.steps.server_client import ServerClient
from reconciler.work import tasks, worker_runtime
from reconciler.work.snapshot import SnapshotPoller
from reconciler.work.worker_health import CONSUMER_LOOP, install_consumer_heartbeat


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "--server-url",
        type=cli_types.optional_http_url,
        default="",
        metavar="URL",
        help="cache-index server base URL for /probe; empty turns the functional-probe gate off",
    )
    parser.add_argument(
        "--token-path",
        default=worker_runtime.WorkerConfig.token_path,
        metavar="PATH",
        help="projected ServiceAccount token sent to the server",
    )
    parser.add_argument(
        "--concurrency",
        type=cli_types.positive_int,
        default=4,
        metavar="N",
        help="reconciles in parallel",
    )
    parser.add_argument(
        "--pool",
        default="threads",
        choices=["threads", "prefork", "solo"],
        help="Celery pool (reconciles are I/O bound: threads by default)",
    )
    parser.add_argument(
        "--probe-interval",
        type=cli_types.positive_float,
        default=30.0,
        metavar="SECONDS",
        help="at most one /probe per backend per this many seconds",
    )
    parser.add_argument(
        "--reads",
        default=worker_runtime.READS_CACHE,
        choices=worker_runtime.READS_CHOICES,
        help="where reconciles read from: this process's watch caches (cache), or the "
        "API server, scoped by label selectors (api)",
    )
    parser.add_argument(
        "--snapshot-interval",
        type=cli_types.positive_float,
        default=10.0,
        metavar="SECONDS",
        help="seconds between /snapshot polls (with --server-url; one poller "
        "per interval across all workers)",
    )


@dataclass(frozen=True)
class WorkerSettings:
    """Every flag of `icache worker`, as its logic receives them: what the reconciles
    need (``runtime``, handed to each process that runs them) and what only this
    process's Celery consumer and snapshot poller use."""

    common: CommonSettings
    runtime: worker_runtime.WorkerConfig
    concurrency: int
    pool: str
    snapshot_interval: float


def settings_from(args: argparse.Namespace) -> WorkerSettings:
    """The one place the worker's flags leave the parsed command line."""
    common = common_settings_from(args)
    return WorkerSettings(
        common=common,
        runtime=worker_runtime.WorkerConfig(
            kubeconfig=common.kubeconfig,
            redis_url=common.redis_url,
            redis_timeouts=common.redis_timeouts,
            server_url=args.server_url,
            token_path=args.token_path,
            probe_window_seconds=args.probe_interval,
            reads=args.reads,
            queue=QueueSettings(
                prefix=common.queue_prefix,
                base_delay=common.backoff_base,
                max_delay=common.backoff_max,
                lease_seconds=common.lease_seconds,
            ),
        ),
        concurrency=args.concurrency,
        pool=args.pool,
        snapshot_interval=args.snapshot_interval,
    )


def run(args: argparse.Namespace) -> int:
    return _run_worker(settings_from(args))


def _run_worker(settings: WorkerSettings) -> int:
    common, config = settings.common, settings.runtime
    setup_logging(common.log_level)
    # Reconciles connect lazily (per forked process); check the configuration now so a
    # worker without one fails at start, naming what it tried, not on every task.
    kubeaccess.load_configuration(config.kubeconfig)
    worker_runtime.configure(config)
    metrics.register_metrics(metrics.WORKER)
    metrics.MAX_CONCURRENT.set(settings.concurrency)
    heartbeat = health.Heartbeat()
    # Beaten once now: a consumer that never gets going (broker unreachable at start)
    # goes stale after the bound instead of counting as alive with no heartbeat.
    heartbeat.beat(CONSUMER_LOOP)
    if common.metrics_port:
        health.serve(common.metrics_port, heartbeat, common.liveness_timeout, readiness(common))
    if settings.pool != "prefork":
        # Reconciles run in this process: build its clients and start its watch caches
        # now, so they have listed by the first task (a prefork child builds its own).
        worker_runtime.runtime()
    if config.server_url:
        # The poller projects /snapshot into status.indexParticipation, which the
        # KV-event readiness gate reads.
        # With the threads pool the reconciles run in this process: the poller reads
        # their watch caches. A prefork pool's caches live in its children, so the
        # poller there reads the API server (scoped, metadata only).
        cache = (
            worker_runtime.runtime().cache
            if config.reads == worker_runtime.READS_CACHE and settings.pool != "prefork"
            else None
        )
        SnapshotPoller(
            kubeaccess.connect(config.kubeconfig),
            ServerClient(config.server_url, token_path=config.token_path),
            redis_client(config.redis_url, config.redis_timeouts),
            interval=settings.snapshot_interval,
            cache=cache,
        ).start()
    app = make_app(config.redis_url, config.redis_timeouts)
    tasks.register_tasks(app)
    # A few beats per bound, so one late timer never fails the probe.
    install_consumer_heartbeat(app, heartbeat, max(common.liveness_timeout / 6.0, 0.2))
    app.worker_main(
        [
            "worker",
            f"--pool={settings.pool}",
            f"--concurrency={settings.concurrency}",
            f"--queues={QUEUE_NAME}",
            f"--loglevel={common.log_level.upper()}",
            f"--hostname=icache-worker-{os.getpid()}@{socket.gethostname()}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )
    return 0
