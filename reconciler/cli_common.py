"""Flags and logging shared by `icache dispatcher` and `icache worker`.

Both processes meet in the same Redis work queue, so its address, key prefix and
backoff must be spelled (and defaulted) the same way in both.
"""

from __future__ import annotations

import argparse
import logging
import os
from dataclasses import dataclass

from cli_support import arg_types as cli_types
from kubeio import access as kubeaccess
from kubeio.access import add_kubeconfig_argument
from reconciler.health import DEFAULT_LIVENESS_TIMEOUT, Readiness
from reconciler.queue.celery_app import DEFAULT_REDIS_URL
from reconciler.queue.redis_conn import DEFAULT_TIMEOUT, RedisTimeouts, redis_client
from reconciler.queue.redis_settings import redis_url
from shared import jsonlog


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    add_kubeconfig_argument(parser)
    parser.add_argument(
        "--redis-url",
        # A string default goes through `type` too: the password (env
        # ICACHE_REDIS_PASSWORD) and the TLS defaults join any URL, and --help shows
        # the URL without the password.
        default=DEFAULT_REDIS_URL,
        type=cli_types.checked(redis_url),
        metavar="URL",
        help="Redis URL of the broker and work queue (password from env "
        "ICACHE_REDIS_PASSWORD unless the URL has one)",
    )
    parser.add_argument(
        "--redis-timeout",
        type=cli_types.positive_float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help="connect and read timeout of every Redis connection, broker included",
    )
    parser.add_argument(
        "--queue-prefix", default="icache:wq", help="Redis key prefix of the work queue"
    )
    parser.add_argument(
        "--lease-seconds",
        type=cli_types.positive_float,
        default=30.0,
        metavar="SECONDS",
        help="work-queue lease per running key, renewed every third of it; after Redis "
        "lost its data the dispatcher dispatches nothing for this long (give both the "
        "dispatcher and the workers the same value)",
    )
    parser.add_argument(
        "--backoff-base",
        type=cli_types.positive_float,
        default=0.5,
        metavar="SECONDS",
        help="first error backoff",
    )
    parser.add_argument(
        "--backoff-max",
        type=cli_types.positive_float,
        default=300.0,
        metavar="SECONDS",
        help="maximum error backoff",
    )
    parser.add_argument(
        "--metrics-port",
        type=cli_types.port,
        default=0,
        help="port of /metrics, /healthz (liveness) and /readyz (readiness); 0: off",
    )
    parser.add_argument(
        "--liveness-timeout",
        type=cli_types.positive_float,
        default=DEFAULT_LIVENESS_TIMEOUT,
        metavar="SECONDS",
        help="/healthz fails when the main loop made no progress for this long",
    )
    parser.add_argument(
        "--log-level",
        type=cli_types.log_level,
        default="info",
        metavar="LEVEL",
        help=f"log level ({', '.join(cli_types.LOG_LEVELS)})",
    )


@dataclass(frozen=True)
class CommonSettings:
    """The flags `add_common_arguments` declares, as the processes' logic receives them."""

    kubeconfig: str | None
    redis_url: str
    redis_timeout: float
    queue_prefix: str
    lease_seconds: float
    backoff_base: float
    backoff_max: float
    metrics_port: int
    liveness_timeout: float
    log_level: str

    @property
    def redis_timeouts(self) -> RedisTimeouts:
        return RedisTimeouts(connect=self.redis_timeout, read=self.redis_timeout)


def common_settings_from(args: argparse.Namespace) -> CommonSettings:
    """The one place the common flags leave the parsed command line."""
    return CommonSettings(
        kubeconfig=args.kubeconfig,
        redis_url=args.redis_url,
        redis_timeout=args.redis_timeout,
        queue_prefix=args.queue_prefix,
        lease_seconds=args.lease_seconds,
        backoff_base=args.backoff_base,
        backoff_max=args.backoff_max,
        metrics_port=args.metrics_port,
        liveness_timeout=args.liveness_timeout,
        log_level=args.log_level,
    )


def readiness(settings: CommonSettings) -> Readiness:
    """Ready once Redis answers a PING and the API server answers GET /version, each
    on a client of its own with short timeouts (a probe must not hang)."""
    quick = RedisTimeouts(connect=2.0, read=2.0)
    client = redis_client(settings.redis_url, quick)
    kube = kubeaccess.connect(settings.kubeconfig, timeout=2.0)
    return Readiness(
        {"redis": client.ping, "apiserver": lambda: kube.request("GET", "/version")}
    ).start()


def setup_logging(level: str) -> None:
    """JSON lines on stderr, like the webhook's. ``ICACHE_DEBUG_LOGGERS`` (comma
    separated logger names) turns single loggers to DEBUG without the noise of a
    global DEBUG level."""
    jsonlog.setup(level)
    for name in os.environ.get("ICACHE_DEBUG_LOGGERS", "").split(","):
        if name.strip():
            logging.getLogger(name.strip()).setLevel(logging.DEBUG)
