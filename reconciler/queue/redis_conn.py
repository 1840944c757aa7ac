"""Every Redis connection of the worker and the dispatcher, with bounded waits.

A Redis node that dies without resetting its connections (node loss, a network
partition, a black-holed Service IP) leaves a client blocked forever on a read that
never returns, unless the socket has a timeout. Every redis-py client and the
Celery/kombu broker are therefore built here, from one :class:`RedisTimeouts`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis

DEFAULT_TIMEOUT = 5.0


@dataclass(frozen=True)
class RedisTimeouts:
    # TCP connect, and every read/write on an open connection. The longest blocking
    # command we send (the pump's BLPOP) waits at most the reap interval (1 s), well
    # below this, so a timeout always means a dead or unresponsive server.
    connect: float = DEFAULT_TIMEOUT
    read: float = DEFAULT_TIMEOUT
    # An idle pooled connection is PINGed before reuse after this many seconds, so a
    # connection the server (or a NAT) dropped is replaced instead of failing a command.
    health_check_interval: int = 10


def redis_client(url: str, timeouts: RedisTimeouts | None = None) -> redis.Redis:
    t = timeouts or RedisTimeouts()
    return redis.Redis.from_url(
        url,
        socket_connect_timeout=t.connect,
        socket_timeout=t.read,
        socket_keepalive=True,
        health_check_interval=t.health_check_interval,
    )


def celery_redis_settings(timeouts: RedisTimeouts | None = None) -> dict[str, Any]:
    """Celery settings that bound every broker and result-backend wait.

    kombu's Redis transport takes the socket options through
    broker_transport_options; its own health check also drops a BRPOP connection
    whose reply is overdue, so a worker's consumer reconnects after a black hole.
    (broker_heartbeat is AMQP-only: the Redis transport has no heartbeats.)
    """
    t = timeouts or RedisTimeouts()
    return {
        "broker_connection_timeout": t.connect,
        "broker_transport_options": {
            "socket_timeout": t.read,
            "socket_connect_timeout": t.connect,
            "socket_keepalive": True,
            "health_check_interval": t.health_check_interval,
        },
        "redis_socket_timeout": t.read,
        "redis_socket_connect_timeout": t.connect,
        "redis_socket_keepalive": True,
        "redis_backend_health_check_interval": t.health_check_interval,
        # A publish that cannot reach the broker gives up after a few bounded tries
        # instead of holding up the pump; the work queue re-dispatches the key.
        "task_publish_retry_policy": {
            "max_retries": 2,
            "interval_start": 0.0,
            "interval_step": 0.5,
            "interval_max": 1.0,
        },
    }
