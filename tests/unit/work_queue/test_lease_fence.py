"""No key is processed by two workers at once: a worker whose
work-queue lease cannot be renewed (here: Redis frozen with SIGSTOP) stops writing
to the API server before the reaper can hand its key to another worker."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

import pytest
from kubernetes.client import ApiClient, Configuration

from reconciler.queue.redis_conn import RedisTimeouts, redis_client
from reconciler.queue.workqueue import QueueSettings, WorkQueue
from reconciler.work import lease_fence
from tests.harness.redis_server import RedisServer

pytestmark = pytest.mark.services

LEASE = 1.2


def fence_holds() -> bool:
    try:
        lease_fence.check_lease()
    except lease_fence.LeaseExpiredError:
        return False
    return True


def wait(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {predicate}"
        time.sleep(0.02)


def test_a_worker_that_cannot_renew_its_lease_stops_writing_before_it_can_expire(
    own_redis: RedisServer,
) -> None:
    client = redis_client(own_redis.url, RedisTimeouts(connect=0.2, read=0.2))
    queue = WorkQueue(
        client, QueueSettings(prefix=f"t:{uuid.uuid4().hex[:8]}", lease_seconds=LEASE)
    )
    queue.add("ns/a")
    assert queue.pop_due() == ["ns/a"]
    # A Kube with no connection: a write that passed the fence would fail differently.
    kube = lease_fence.FencedKube(ApiClient(Configuration(host="http://127.0.0.1:9")))
    with queue.leased("ns/a") as token:
        assert token is not None
        with lease_fence.holding(queue, "ns/a", token):
            time.sleep(LEASE)  # renewals keep the lease (the thing under test is time)
            assert fence_holds(), "a renewed lease lets the reconcile write"
            with own_redis.frozen():
                frozen_at = time.monotonic()
                wait(lambda: not fence_holds())
                fenced_after = time.monotonic() - frozen_at
                with pytest.raises(lease_fence.LeaseExpiredError):
                    kube.request("PATCH", "/apis/apps/v1/namespaces/ns/deployments/a", body={})
            # Before the lease could have expired on the Redis side.
            assert fenced_after < LEASE, fenced_after
            wait(fence_holds)  # renewals succeed again once Redis answers
    client.close()
