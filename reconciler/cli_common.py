"""Flags and logging shared by `icache dispatcher` and `icache worker`.

Both processes meet in the same Redis work queue, so its address, key prefix and
backoff must be spelled (and defaulted) the same way in both.
"""

from __future__ import annotations

import argparse

from reconciler.celery_app import redis_url_from_env
from reconciler.redis_settings import redis_url
from shared import jsonlog
from shared.kubeaccess import add_kubeconfig_argument


def add_common_arguments(parser: argparse.ArgumentParser) -> None:
    add_kubeconfig_argument(parser)
    parser.add_argument(
        "--redis-url",
        default=redis_url_from_env(),
        # The password (env ICACHE_REDIS_PASSWORD) and TLS defaults join any URL.
        type=redis_url,
        help="Redis URL of the broker and work queue (env ICACHE_REDIS_URL; password "
        "from env ICACHE_REDIS_PASSWORD unless the URL has one)",
    )
    parser.add_argument(
        "--queue-prefix", default="icache:wq", help="Redis key prefix of the work queue"
    )
    parser.add_argument("--backoff-base", type=float, default=0.5, help="first error backoff (s)")
    parser.add_argument(
        "--backoff-max", type=float, default=300.0, help="maximum error backoff (s)"
    )
    parser.add_argument("--metrics-port", type=int, default=0, help="Prometheus port (0: off)")
    parser.add_argument("--log-level", default="INFO")


def setup_logging(level: str) -> None:
    """JSON lines on stderr, like the webhook's."""
    jsonlog.setup(level)
