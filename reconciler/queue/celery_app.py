"""The Celery application: Redis broker, late acks, one message in flight per process.

Celery carries only wake-up messages ("reconcile this key"); the work queue in
Redis (:mod:`reconciler.queue.workqueue`) is the source of truth for what must run, so a
lost or duplicated message never loses or doubles a reconcile.
"""

from __future__ import annotations

import os
from typing import Final

from celery import Celery

from reconciler.queue import redis_settings
from reconciler.queue.broker import TRANSPORT
from reconciler.queue.redis_conn import RedisTimeouts, celery_redis_settings

QUEUE_NAME: Final = "icache-reconcile"
RECONCILE_TASK: Final = "icache.reconcile"
DEFAULT_REDIS_URL: Final = "redis://127.0.0.1:6379/0"


def redis_url_from_env() -> str:
    # ICACHE_REDIS_URL joined with ICACHE_REDIS_PASSWORD (see redis_settings).
    return redis_settings.redis_url(os.environ.get("ICACHE_REDIS_URL") or DEFAULT_REDIS_URL)


def make_app(redis_url: str | None = None, timeouts: RedisTimeouts | None = None) -> Celery:
    url = redis_url or redis_url_from_env()
    app = Celery("inference-cache", broker=url, backend=url)
    bounded = celery_redis_settings(timeouts)
    app.conf.update(
        # kombu's Redis transport, with acks that a Redis timeout cannot wedge.
        broker_transport=TRANSPORT,
        # Ack after the task body ran, and give the message back if the worker
        # process dies mid-task (prefork pool): crash-safe delivery.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        # One message per process at a time: a slow reconcile cannot hoard keys.
        worker_prefetch_multiplier=1,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        # Outcomes live in the work queue and metrics, not in result keys.
        task_ignore_result=True,
        task_default_queue=QUEUE_NAME,
        task_routes={RECONCILE_TASK: {"queue": QUEUE_NAME}},
        broker_connection_retry_on_startup=True,
        broker_connection_max_retries=None,
        # Unacked messages of a dead worker come back after this; the work queue's
        # own reaper usually recovers the key long before.
        broker_transport_options={
            "visibility_timeout": 600,
            **bounded.pop("broker_transport_options"),
        },
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        **bounded,
    )
    return app
