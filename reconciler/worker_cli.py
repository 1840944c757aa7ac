"""`icache worker`: a Celery worker running reconciles off the Redis work queue."""

from __future__ import annotations

import argparse
import os
import socket

from icache_cli import arg_types as cli_types
from kubeio import access as kubeaccess
from reconciler import health, metrics, tasks, worker_runtime
from reconciler.celery_app import QUEUE_NAME, make_app
from reconciler.cli_common import add_common_arguments, readiness, redis_timeouts, setup_logging
from reconciler.redis_conn import redis_client
from reconciler.server_client import ServerClient
from reconciler.snapshot import SnapshotPoller
from reconciler.worker_health import CONSUMER_LOOP, install_consumer_heartbeat
from reconciler.workqueue import QueueSettings


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


def run(args: argparse.Namespace) -> int:
    setup_logging(args.log_level)
    # Reconciles connect lazily (per forked process); check the configuration now so a
    # worker without one fails at start, naming what it tried, not on every task.
    kubeaccess.load_configuration(args.kubeconfig)
    worker_runtime.configure(
        worker_runtime.WorkerConfig(
            kubeconfig=args.kubeconfig,
            redis_url=args.redis_url,
            redis_timeouts=redis_timeouts(args),
            server_url=args.server_url,
            token_path=args.token_path,
            probe_window_seconds=args.probe_interval,
            reads=args.reads,
            queue=QueueSettings(
                prefix=args.queue_prefix,
                base_delay=args.backoff_base,
                max_delay=args.backoff_max,
                lease_seconds=args.lease_seconds,
            ),
        )
    )
    metrics.register_metrics(metrics.WORKER)
    metrics.MAX_CONCURRENT.set(args.concurrency)
    heartbeat = health.Heartbeat()
    # Beaten once now: a consumer that never gets going (broker unreachable at start)
    # goes stale after the bound instead of counting as alive with no heartbeat.
    heartbeat.beat(CONSUMER_LOOP)
    if args.metrics_port:
        health.serve(args.metrics_port, heartbeat, args.liveness_timeout, readiness(args))
    if args.pool != "prefork":
        # Reconciles run in this process: build its clients and start its watch caches
        # now, so they have listed by the first task (a prefork child builds its own).
        worker_runtime.runtime()
    if args.server_url:
        # The poller projects /snapshot into status.indexParticipation, which the
        # KV-event readiness gate reads.
        # With the threads pool the reconciles run in this process: the poller reads
        # their watch caches. A prefork pool's caches live in its children, so the
        # poller there reads the API server (scoped, metadata only).
        cache = (
            worker_runtime.runtime().cache
            if args.reads == worker_runtime.READS_CACHE and args.pool != "prefork"
            else None
        )
        SnapshotPoller(
            kubeaccess.connect(args.kubeconfig),
            ServerClient(args.server_url, token_path=args.token_path),
            redis_client(args.redis_url, redis_timeouts(args)),
            interval=args.snapshot_interval,
            cache=cache,
        ).start()
    app = make_app(args.redis_url, redis_timeouts(args))
    tasks.register_tasks(app)
    # A few beats per bound, so one late timer never fails the probe.
    install_consumer_heartbeat(app, heartbeat, max(args.liveness_timeout / 6.0, 0.2))
    app.worker_main(
        [
            "worker",
            f"--pool={args.pool}",
            f"--concurrency={args.concurrency}",
            f"--queues={QUEUE_NAME}",
            f"--loglevel={args.log_level.upper()}",
            f"--hostname=icache-worker-{os.getpid()}@{socket.gethostname()}",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
    )
    return 0
