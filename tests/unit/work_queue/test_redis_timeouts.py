"""Every Redis connection has connect/read timeouts and health checks,
so a black-holed Redis (here: a real server frozen with SIGSTOP) raises instead of
blocking the caller forever."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import kombu
import pytest
import redis

from reconciler.dispatch.dispatcher import pump_stalled
from reconciler.queue.celery_app import make_app
from reconciler.queue.redis_conn import RedisTimeouts, redis_client
from reconciler.queue.workqueue import QueueSettings, WorkQueue
from tests.harness.redis_server import RedisServer

pytestmark = pytest.mark.services


def call_in_thread(fn: Callable[[], object], limit: float) -> tuple[bool, BaseException | None]:
    """(finished within ``limit``, exception raised)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(limit)
    return (not t.is_alive(), outcome[0] if outcome else None)


def test_a_frozen_redis_times_out_a_work_queue_call_instead_of_hanging(
    own_redis: RedisServer,
) -> None:
    client = redis_client(own_redis.url, RedisTimeouts(connect=1.0, read=1.0))
    queue = WorkQueue(client, QueueSettings(prefix=f"t:{uuid.uuid4().hex[:8]}"))
    queue.add("ns/a")  # connected and working
    with own_redis.frozen():
        finished, exc = call_in_thread(lambda: queue.pop_due(), limit=20)
        assert finished, "pop_due blocked on a frozen Redis"
        assert isinstance(exc, redis.TimeoutError | redis.ConnectionError), exc
        # A brand-new connection: the TCP handshake succeeds (listen backlog), the
        # PING is never answered.
        finished, exc = call_in_thread(
            lambda: redis_client(own_redis.url, RedisTimeouts(1.0, 1.0)).ping(), limit=20
        )
        assert finished, exc
        assert isinstance(exc, redis.TimeoutError | redis.ConnectionError), exc
    assert queue.pop_due() == ["ns/a"], "the client recovers once Redis answers"
    client.close()


def test_waiting_for_work_on_an_idle_queue_is_not_mistaken_for_a_dead_redis(
    own_redis: RedisServer,
) -> None:
    """The pump's BLPOP waits server-side; the wait must end before the client's read
    timeout, or a healthy idle Redis looks dead to a pump with a short timeout."""
    client = redis_client(own_redis.url, RedisTimeouts(connect=1.0, read=1.0))
    queue = WorkQueue(client, QueueSettings(prefix=f"t:{uuid.uuid4().hex[:8]}"))
    t0 = time.monotonic()
    queue.wait_for_work(3.0)  # raised TimeoutError before the wait was bounded
    assert time.monotonic() - t0 < 3.0
    client.close()


def test_celery_publish_to_a_frozen_broker_gives_up_instead_of_hanging(
    own_redis: RedisServer,
) -> None:
    app = make_app(own_redis.url, RedisTimeouts(connect=1.0, read=1.0))
    opts = app.conf.broker_transport_options
    assert opts["health_check_interval"] > 0
    assert opts["visibility_timeout"] == 600
    assert app.conf.broker_connection_timeout == 1.0
    assert app.conf.redis_socket_timeout == 1.0
    with app.connection_for_write() as conn:
        params = conn.default_channel.client.connection_pool.connection_kwargs
        assert params["socket_timeout"] == 1.0
        assert params["socket_connect_timeout"] == 1.0
    send = {"queue": "t", "ignore_result": True}  # as the dispatcher sends
    app.send_task("icache.reconcile", args=["ns/a"], **send)  # the broker works
    with own_redis.frozen():
        finished, exc = call_in_thread(
            lambda: app.send_task("icache.reconcile", args=["ns/b"], **send), limit=30
        )
        assert finished, "send_task blocked on a frozen broker"
        assert exc is not None


def test_pump_stalled_after_the_renew_deadline_only() -> None:
    assert not pump_stalled(last_beat=100.0, now=109.9, renew_deadline=10.0)
    assert pump_stalled(last_beat=100.0, now=110.1, renew_deadline=10.0)


def test_an_ack_lost_to_a_frozen_broker_frees_the_prefetch_slot(own_redis: RedisServer) -> None:
    """Against a SIGSTOPped Redis: kombu's Redis QoS alone keeps the prefetch slot of a
    message whose ack timed out, so a worker with late acks would stop fetching for good;
    reconciler.queue.broker frees it."""
    app = make_app(own_redis.url, RedisTimeouts(connect=1.0, read=1.0))
    with app.connection_for_write() as conn:
        channel = conn.channel()
        queue = kombu.Queue("t-ack", routing_key="t-ack")
        with conn.Producer(channel) as producer:
            producer.publish({"n": 1}, routing_key="t-ack", declare=[queue])
        channel.basic_qos(0, 1, False)
        message = poll_message(channel, queue)
        assert not channel.qos.can_consume(), "prefetch window of one is full"
        with own_redis.frozen():
            finished, exc = call_in_thread(message.ack, limit=30)
            assert finished, "the ack must fail while Redis is frozen"
            assert exc is not None, "the ack must fail while Redis is frozen"
        assert channel.qos.can_consume(), "a failed ack left the prefetch slot taken"
        channel.close()


def poll_message(channel: Any, queue: kombu.Queue) -> kombu.Message:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        message = kombu.Queue(queue.name, routing_key=queue.routing_key)(channel).get()
        if message is not None:
            return message
        time.sleep(0.05)
    raise AssertionError("no message")
