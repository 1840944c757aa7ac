"""`icache dispatcher`: leader-elected watcher that feeds the reconcile work queue."""

from __future__ import annotations

import argparse
import os
import signal
import socket
from dataclasses import dataclass
from types import FrameType

from cli_support import arg_types as cli_types
from cli_support.habits import UsageError
from kubeio import access as kubeaccess
from reconciler import health, metrics
from reconciler.cli_common import (
    CommonSettings,
    add_common_arguments,
    common_settings_from,
    readiness,
    setup_logging,
)
from reconciler.dispatch.dispatcher import Dispatcher, DispatcherSettings
from reconciler.dispatch.leader import ElectionSettings
from reconciler.queue.celery_app import make_app
from reconciler.queue.redis_conn import redis_client
from reconciler.queue.workqueue import QueueSettings, WorkQueue
from shared.constants import DISPATCHER_LEASE, INSTALL_NAMESPACE


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_common_arguments(parser)
    parser.add_argument(
        "--lease-namespace",
        type=cli_types.dns_label,
        default=os.environ.get("POD_NAMESPACE") or INSTALL_NAMESPACE,
        metavar="NAMESPACE",
        help="namespace of the leader-election Lease (default: $POD_NAMESPACE, else "
        f"{INSTALL_NAMESPACE})",
    )
    parser.add_argument(
        "--lease-name",
        type=cli_types.dns_subdomain,
        default=DISPATCHER_LEASE,
        metavar="NAME",
        help="name of the leader-election Lease",
    )
    parser.add_argument(
        "--identity",
        default=f"{socket.gethostname()}_{os.getpid()}",
        help="this candidate's identity in the Lease (default: <hostname>_<pid>)",
    )
    parser.add_argument(
        "--lease-duration",
        type=cli_types.positive_float,
        default=15.0,
        metavar="SECONDS",
        help="how long a leader's Lease holds without renewal; candidates take over after it",
    )
    parser.add_argument(
        "--renew-deadline",
        type=cli_types.positive_float,
        default=10.0,
        metavar="SECONDS",
        help="the leader steps down when it could not renew the Lease for this long",
    )
    parser.add_argument(
        "--retry-period",
        type=cli_types.positive_float,
        default=2.0,
        metavar="SECONDS",
        help="seconds between attempts to acquire or renew the Lease",
    )
    parser.add_argument(
        "--resync-period",
        type=cli_types.positive_float,
        default=30.0,
        metavar="SECONDS",
        help="seconds between re-enqueues of every CacheBackend",
    )
    parser.add_argument(
        "--watch-timeout",
        type=cli_types.positive_int,
        default=300,
        metavar="SECONDS",
        help="server-side timeout of each watch request",
    )
    parser.add_argument(
        "--dispatch-timeout",
        type=cli_types.positive_float,
        default=60.0,
        metavar="SECONDS",
        help="re-dispatch a key whose Celery message has not started after this",
    )


def check_election(lease_duration: float, renew_deadline: float, retry_period: float) -> None:
    """The leader-election timings client-go requires: a leader gives up its Lease
    (renew deadline) before candidates may take it (lease duration), and tries to renew
    more than once within the deadline (retry period)."""
    if not renew_deadline < lease_duration:
        raise UsageError(
            f"--renew-deadline ({renew_deadline:g}s) must be shorter than --lease-duration "
            f"({lease_duration:g}s): a leader must step down before another may take over"
        )
    if not retry_period < renew_deadline:
        raise UsageError(
            f"--retry-period ({retry_period:g}s) must be shorter than --renew-deadline "
            f"({renew_deadline:g}s): the leader must get to retry a failed renewal"
        )


@dataclass(frozen=True)
class DispatcherProcessSettings:
    """Every flag of `icache dispatcher`, as its logic receives them."""

    common: CommonSettings
    election: ElectionSettings
    watches: DispatcherSettings
    dispatch_timeout: float


def settings_from(args: argparse.Namespace) -> DispatcherProcessSettings:
    """The one place the dispatcher's flags leave the parsed command line."""
    return DispatcherProcessSettings(
        common=common_settings_from(args),
        election=ElectionSettings(
            namespace=args.lease_namespace,
            name=args.lease_name,
            identity=args.identity,
            lease_duration=args.lease_duration,
            renew_deadline=args.renew_deadline,
            retry_period=args.retry_period,
        ),
        watches=DispatcherSettings(
            resync_period=args.resync_period, watch_timeout=args.watch_timeout
        ),
        dispatch_timeout=args.dispatch_timeout,
    )


def run(args: argparse.Namespace) -> int:
    return _run_dispatcher(settings_from(args))


def _run_dispatcher(settings: DispatcherProcessSettings) -> int:
    common, election = settings.common, settings.election
    check_election(election.lease_duration, election.renew_deadline, election.retry_period)
    setup_logging(common.log_level)
    metrics.register_metrics(metrics.DISPATCHER)
    queue = WorkQueue(
        redis_client(common.redis_url, common.redis_timeouts),
        QueueSettings(
            prefix=common.queue_prefix,
            base_delay=common.backoff_base,
            max_delay=common.backoff_max,
            dispatch_timeout=settings.dispatch_timeout,
            lease_seconds=common.lease_seconds,
        ),
    )
    dispatcher = Dispatcher(
        kubeaccess.connect(common.kubeconfig),
        queue,
        make_app(common.redis_url, common.redis_timeouts),
        election,
        settings.watches,
    )

    if common.metrics_port:
        health.serve(
            common.metrics_port,
            dispatcher.liveness_beats,
            common.liveness_timeout,
            readiness(common),
        )

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        dispatcher.stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    dispatcher.run()
    return 0
