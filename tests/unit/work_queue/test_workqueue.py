"""Work-queue semantics (client-go on Redis) against a real redis-server.

The queue's clock is injected so delays, backoff and lease expiry are tested by
moving time, not by sleeping.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import redis

from reconciler.queue.workqueue import BUSY, DONE, LOST, STALE, STARTED, QueueSettings, WorkQueue
from tests.builders import selected_pod as _pod
from tests.builders import selector_cb as _cb
from tests.fakes import ScriptedWatchKube, clear_queue, queue_failures, queue_state
from tests.harness.redis_server import RedisServer

if TYPE_CHECKING:
    from reconciler.dispatch.dispatcher import Dispatcher


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def queue(redis_server: RedisServer, clock: Clock) -> Iterator[WorkQueue]:
    client = redis.Redis.from_url(redis_server.url)
    settings = QueueSettings(
        prefix=f"test:{uuid.uuid4().hex[:8]}",
        base_delay=0.5,
        max_delay=300.0,
        lease_seconds=10.0,
        dispatch_timeout=60.0,
    )
    q = WorkQueue(client, settings, clock=clock)
    yield q
    clear_queue(q)
    client.close()


def run_once(q: WorkQueue, key: str, **done_kwargs: Any) -> None:
    assert q.pop_due() == [key]
    token = "t-" + uuid.uuid4().hex
    assert q.start(key, token) == STARTED
    assert q.done(key, token, **done_kwargs)[0] == DONE


# ------------------------------------------------------------------ dedupe


def test_many_adds_collapse_into_one_pending_entry(queue: WorkQueue) -> None:
    assert queue.add("ns/a") is True
    for _ in range(5):
        assert queue.add("ns/a") is False
    queue.add("ns/b")
    assert sorted(queue.pop_due()) == ["ns/a", "ns/b"]
    assert queue.pop_due() == []


def test_add_while_queued_collapses_into_the_dispatched_run(queue: WorkQueue) -> None:
    queue.add("k")
    assert queue.pop_due() == ["k"]
    assert queue.add("k") is False
    assert queue.pop_due() == []
    assert queue_state(queue)["pending"] == {}


def test_earlier_add_advances_a_delayed_entry(queue: WorkQueue, clock: Clock) -> None:
    queue.add("k", delay=30)
    assert queue.pop_due() == []
    assert queue.add("k") is True
    assert queue.pop_due() == ["k"]


def test_later_add_does_not_postpone_an_earlier_entry(queue: WorkQueue, clock: Clock) -> None:
    queue.add("k", delay=1)
    queue.add("k", delay=100)
    clock.advance(1)
    assert queue.pop_due() == ["k"]


# ------------------------------------------------------------------ exclusivity


def test_never_two_workers_on_one_key(queue: WorkQueue) -> None:
    queue.add("k")
    assert queue.pop_due() == ["k"]
    results: list[str] = []
    barrier = threading.Barrier(8)

    def worker(i: int) -> None:
        barrier.wait()
        results.append(queue.start("k", f"tok{i}"))

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results.count(STARTED) == 1
    assert results.count(STALE) == 7


def test_processing_key_is_never_redispatched(queue: WorkQueue) -> None:
    queue.add("k")
    queue.pop_due()
    assert queue.start("k", "a") == STARTED
    queue.add("k")
    assert queue.pop_due() == [], "an add during a run must not dispatch a second run"


def test_start_of_processing_key_is_busy_and_marks_dirty(queue: WorkQueue) -> None:
    # Defensive path: a queued entry for a key that is already processing.
    queue.add("k")
    queue.pop_due()
    assert queue.start("k", "a") == STARTED
    queue.redis.zadd(queue.k_queued, {"k": 0})
    assert queue.start("k", "b") == BUSY
    assert "k" in queue_state(queue)["dirty"]


# ------------------------------------------------------------------ dirty


def test_event_during_run_causes_exactly_one_more_run(queue: WorkQueue) -> None:
    queue.add("k")
    queue.pop_due()
    assert queue.start("k", "a") == STARTED
    for _ in range(3):
        queue.add("k")
    assert queue_state(queue)["dirty"] == {"k"}
    assert queue.done("k", "a")[0] == DONE
    assert queue.pop_due() == ["k"]
    assert queue.start("k", "b") == STARTED
    assert queue.done("k", "b")[0] == DONE
    assert queue.pop_due() == []


def test_no_event_during_run_means_no_more_runs(queue: WorkQueue) -> None:
    queue.add("k")
    run_once(queue, "k")
    assert queue.pop_due() == []
    assert queue_state(queue) == {
        "pending": {},
        "queued": {},
        "processing": {},
        "dirty": set(),
        "failures": {},
    }


# ------------------------------------------------------------------ requeue after


def test_requeue_after_runs_again_after_the_delay(queue: WorkQueue, clock: Clock) -> None:
    queue.add("k")
    run_once(queue, "k", requeue_after=5.0)
    assert queue.pop_due() == []
    assert queue.next_due_in() == pytest.approx(5.0)
    clock.advance(5)
    assert queue.pop_due() == ["k"]


def test_delayed_requeue_coming_due_during_a_run_marks_dirty(
    queue: WorkQueue, clock: Clock
) -> None:
    queue.add("k")
    run_once(queue, "k", requeue_after=1.0)
    clock.advance(1)
    assert queue.pop_due() == ["k"]
    assert queue.start("k", "a") == STARTED
    queue.redis.zadd(queue.k_pending, {"k": 0})  # a stray due entry while running
    assert queue.pop_due() == []
    assert queue_state(queue)["dirty"] == {"k"}


# ------------------------------------------------------------------ backoff


def test_errors_back_off_exponentially_per_key_and_reset_on_success(
    queue: WorkQueue, clock: Clock
) -> None:
    queue.add("k")
    delays = []
    for _ in range(12):
        due_in = queue.next_due_in()
        assert due_in is not None
        clock.advance(due_in)
        assert queue.pop_due() == ["k"]
        assert queue.start("k", "t") == STARTED
        outcome, delay = queue.done("k", "t", error=True)
        assert outcome == DONE
        delays.append(delay)
    assert delays[:6] == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0]
    assert max(delays) == 300.0
    assert delays[-1] == 300.0
    assert queue_failures(queue, "k") == 12
    clock.advance(300)
    run_once(queue, "k")
    assert queue_failures(queue, "k") == 0


def test_backoff_is_per_key(queue: WorkQueue, clock: Clock) -> None:
    for key in ("a", "b"):
        queue.add(key)
    queue.pop_due()
    for key in ("a", "b"):
        queue.start(key, "t")
    assert queue.done("a", "t", error=True)[1] == 0.5
    assert queue.done("b", "t")[0] == DONE
    assert queue_failures(queue, "a") == 1
    assert queue_failures(queue, "b") == 0


def test_event_during_failed_run_reruns_immediately(queue: WorkQueue) -> None:
    queue.add("k")
    queue.pop_due()
    queue.start("k", "t")
    queue.add("k")
    queue.done("k", "t", error=True)
    assert queue.pop_due() == ["k"]


# ------------------------------------------------------------------ at least once


def test_worker_killed_mid_run_lease_expires_and_key_is_rerun(
    queue: WorkQueue, clock: Clock
) -> None:
    queue.add("k")
    queue.pop_due()
    assert queue.start("k", "dead-worker") == STARTED
    clock.advance(5)
    assert queue.reap() == ([], [])
    clock.advance(6)  # past the 10 s lease
    expired, _ = queue.reap()
    assert expired == ["k"]
    due_in = queue.next_due_in()
    assert due_in is not None
    assert due_in <= 0.5
    clock.advance(0.5)
    assert queue.pop_due() == ["k"]
    assert queue.start("k", "new-worker") == STARTED
    # The presumed-dead worker wakes up: its done() changes nothing.
    assert queue.done("k", "dead-worker")[0] == LOST
    assert queue_state(queue)["processing"] == {"k": "new-worker"}
    assert queue.done("k", "new-worker")[0] == DONE


def test_renewed_lease_does_not_expire(queue: WorkQueue, clock: Clock) -> None:
    queue.add("k")
    queue.pop_due()
    queue.start("k", "t")
    for _ in range(5):
        clock.advance(8)
        assert queue.renew("k", "t")
        assert queue.reap() == ([], [])
    assert not queue.renew("k", "other-token")


def test_lost_dispatch_is_redispatched_once_the_broker_drained(
    queue: WorkQueue, clock: Clock
) -> None:
    queue.add("k")
    assert queue.pop_due() == ["k"]  # the Celery message for it is lost
    clock.advance(61)
    assert queue.reap(broker_backlog=3) == ([], []), "messages still waiting: not lost"
    assert queue.reap(broker_backlog=None) == ([], [])
    assert queue.reap(broker_backlog=0) == ([], ["k"])
    assert queue.pop_due() == ["k"]


def test_duplicate_message_after_redispatch_is_stale(queue: WorkQueue, clock: Clock) -> None:
    queue.add("k")
    queue.pop_due()
    clock.advance(61)
    queue.reap(broker_backlog=0)
    assert queue.pop_due() == ["k"]  # second message sent
    assert queue.start("k", "first-message") == STARTED
    assert queue.start("k", "second-message") == STALE
    assert queue.done("k", "first-message")[0] == DONE
    assert queue.pop_due() == []


def test_leased_context_renews_in_the_background(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    q = WorkQueue(client, QueueSettings(prefix=f"test:{uuid.uuid4().hex[:8]}", lease_seconds=0.3))
    try:
        q.add("k")
        q.pop_due()
        with q.leased("k") as token:
            assert token is not None
            time.sleep(1.0)  # three lease lengths: only renewal keeps it
            assert q.reap() == ([], [])
            assert q.done("k", token)[0] == DONE
        with q.leased("k") as token:
            assert token is None, "nothing dispatched: nothing to run"
    finally:
        clear_queue(q)
        client.close()


def test_wait_for_work_wakes_on_add(queue: WorkQueue) -> None:
    queue.redis.delete(queue.k_wake)
    timer = threading.Timer(0.2, lambda: queue.add("k"))
    timer.start()
    t0 = time.monotonic()
    queue.wait_for_work(5.0)
    assert time.monotonic() - t0 < 3.0
    # The add may still be reading its reply: let it finish before the fixture closes
    # the client under it (an unhandled exception in the timer thread otherwise).
    timer.join(timeout=5)
    assert queue.pop_due() == ["k"]


def test_depth_counts_each_state(queue: WorkQueue) -> None:
    for key in ("a", "b", "c"):
        queue.add(key)
    dispatched = queue.pop_due(limit=2)
    assert queue.start(dispatched[0], "t") == STARTED
    assert queue.update_depth_metrics() == {
        "pending": 1,
        "due": 1,
        "queued": 1,
        "processing": 1,
        "dirty": 0,
        "failing": 0,
    }


# ------------------------------------------------------------------ the producer side


def _obj(ns: str, name: str, owner: str | None = None) -> dict[str, object]:
    meta: dict[str, object] = {"namespace": ns, "name": name, "resourceVersion": "5"}
    if owner:
        meta["ownerReferences"] = [{"kind": "CacheBackend", "name": owner, "controller": True}]
    return {"metadata": meta}


def _dispatcher(queue: WorkQueue, kube: ScriptedWatchKube) -> Dispatcher:
    from reconciler.dispatch.dispatcher import Dispatcher
    from reconciler.dispatch.leader import ElectionSettings

    return Dispatcher(kube, queue, None, ElectionSettings("ns", "lease", "me"))


def test_watch_relists_on_410_gone_and_resumes_from_resource_version(queue: WorkQueue) -> None:
    from kubeio import client as k

    fake = ScriptedWatchKube({"cachebackends": [_obj("ns", "a"), _obj("ns", "b")]}, gone_once=True)
    d = _dispatcher(queue, fake)
    leading = threading.Event()
    leading.set()
    d._leading = leading
    t = threading.Thread(target=d._watch_loop, args=(k.CACHEBACKENDS, None, leading), daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while len(fake.watches) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    leading.clear()
    t.join(timeout=5)
    # list → watch (410) → re-list → watch from the new list's RV → watch from the bookmark's RV
    assert fake.lists[:2] == ["cachebackends", "cachebackends"]
    assert fake.watches[0] == ("cachebackends", "10")
    assert fake.watches[1] == ("cachebackends", "20")
    assert fake.watches[2] == ("cachebackends", "99")
    assert sorted(queue.pop_due()) == ["ns/a", "ns/b"]
    assert d.known == {"ns/a", "ns/b"}


def test_owned_objects_enqueue_their_owner_and_only_the_leader_enqueues(queue: WorkQueue) -> None:
    from reconciler.watch.enqueue_keys import owner_key

    assert owner_key(_obj("ns", "cb-redis", owner="cb")) == "ns/cb"
    assert owner_key(_obj("ns", "stray")) is None
    d = _dispatcher(queue, ScriptedWatchKube({}, gone_once=False))
    d.enqueue("ns/cb")
    assert queue.pop_due() == [], "a standby never enqueues"
    leader = threading.Event()
    leader.set()
    d._leading = leader
    d.enqueue("ns/cb")
    assert queue.pop_due() == ["ns/cb"]


def test_selector_index_reports_backends_a_pod_starts_or_stops_matching() -> None:
    from reconciler.watch.enqueue_keys import SelectorIndex

    idx = SelectorIndex()
    idx.reset_backends(
        [
            _cb("ns", "a", {"app": "vllm"}),
            _cb("ns", "b", {"app": "vllm", "tier": "x"}),
            _cb("ns", "empty", {}),  # claims nothing: never matches
            _cb("ns", "none", None),
            _cb("other", "c", {"app": "vllm"}),
        ]
    )
    assert idx.pod_changed("ADDED", _pod("ns", "p", {"app": "vllm"})) == {"ns/a"}
    # A status-only change of a matching pod moves no count.
    assert idx.pod_changed("MODIFIED", _pod("ns", "p", {"app": "vllm"})) == set()
    assert idx.pod_changed("MODIFIED", _pod("ns", "p", {"app": "vllm", "tier": "x"})) == {"ns/b"}
    assert idx.pod_changed("MODIFIED", _pod("ns", "p", {"app": "sglang"})) == {"ns/a", "ns/b"}
    assert idx.pod_changed("ADDED", _pod("ns", "q", {"app": "vllm"})) == {"ns/a"}
    assert idx.pod_changed("DELETED", _pod("ns", "q", {"app": "vllm"})) == {"ns/a"}
    idx.set_backend(_cb("ns", "a", None))
    assert idx.pod_changed("ADDED", _pod("ns", "r", {"app": "vllm"})) == set()


def test_a_pod_matching_an_engine_selector_enqueues_its_backend(queue: WorkQueue) -> None:
    d = _dispatcher(queue, ScriptedWatchKube({}, gone_once=False))
    leading = threading.Event()
    leading.set()
    d._leading = leading
    d._handle_cachebackend("ADDED", _cb("ns", "a", {"app": "vllm"}))
    d._handle_cachebackend("ADDED", _cb("ns", "b", None))

    def drained() -> list[str]:
        keys = sorted(queue.pop_due())
        for key in keys:
            assert queue.start(key, "t") == STARTED
            queue.done(key, "t", error=False, requeue_after=None)
        return keys

    assert drained() == ["ns/a", "ns/b"]
    d._handle_pod("ADDED", _pod("ns", "vllm-0", {"app": "vllm"}))
    assert drained() == ["ns/a"]
    d._handle_pod("MODIFIED", _pod("ns", "vllm-0", {"app": "vllm"}))
    assert drained() == []
    d._handle_pod("DELETED", _pod("ns", "vllm-0", {"app": "vllm"}))
    assert drained() == ["ns/a"]


def test_a_queue_that_lost_its_data_dispatches_nothing(queue: WorkQueue) -> None:
    """No key runs in two workers at once, even after a Redis data loss: with the epoch
    marker required, pop_due moves nothing once the marker is gone (flushed, restarted
    empty), so a key added after the loss is not handed to a second worker while the
    first may still run it; the dispatcher then fences (reconciler.dispatch.dispatcher)."""
    from reconciler.queue.workqueue import QueueDataLostError

    queue.add("ns/a")
    with pytest.raises(QueueDataLostError):
        queue.pop_due(require_epoch=True)
    assert queue.pop_due() == ["ns/a"]  # not required: as before
    queue.mark_epoch()
    queue.add("ns/b")
    assert queue.pop_due(require_epoch=True) == ["ns/b"]
    queue.redis.delete(queue.k_epoch)  # what a restart without persistence does to it
    queue.add("ns/c")
    with pytest.raises(QueueDataLostError):
        queue.pop_due(require_epoch=True)
    assert queue.depth()["pending"] == 1  # nothing moved


def test_dispatch_fence_after_data_loss_outlasts_any_lease_from_before() -> None:
    """Rule dispatch_fence_after_data_loss: a worker's lease from before the loss lasts
    at most lease_seconds past its last renewal, which preceded the loss by up to one
    reap interval before it was seen."""
    from reconciler.dispatch.dispatcher import dispatch_fence_after_data_loss

    assert dispatch_fence_after_data_loss(100.0, 30.0, 1.0) == 131.0
    assert dispatch_fence_after_data_loss(5.0, 3.0, 0.5) == 8.5


def test_an_add_leaves_its_fence_beside_the_key_and_a_run_clears_only_what_it_waited_for(
    queue: WorkQueue,
) -> None:
    """One path from a change to the work queue: the fence of each change an add is made
    for is kept beside the key (the newest per object), read by the run that starts
    after it, and cleared value for value, so a change that came during the run is
    still there for the next one; the fences of a key never run expire."""
    queue.add("ns/a", fence=("pods/ns/p", '{"rv": "5"}'))
    queue.add("ns/a", fence=("pods/ns/p", '{"rv": "7"}'))  # collapses; newest fence
    queue.add("ns/a", fence=("replicasets/ns/r", '{"rv": "6"}'))
    queue.add("ns/b")  # a resync: no fence
    seen = queue.fences("ns/a")
    assert seen == {"pods/ns/p": '{"rv": "7"}', "replicasets/ns/r": '{"rv": "6"}'}
    assert queue.fences("ns/b") == {}
    assert 0 < queue.redis.pttl(queue.k_fences("ns/a")) <= 600_000
    queue.add("ns/a", fence=("pods/ns/p", '{"rv": "9"}'))  # while the run reads
    queue.clear_fences("ns/a", seen)
    assert queue.fences("ns/a") == {"pods/ns/p": '{"rv": "9"}'}


def test_the_leader_adds_a_pod_change_with_the_pods_fence(queue: WorkQueue) -> None:
    from reconciler.watch.freshness import decode_all

    d = _dispatcher(queue, ScriptedWatchKube({}, gone_once=False))
    leading = threading.Event()
    leading.set()
    d._leading = leading
    d._handle_cachebackend("ADDED", _cb("ns", "a", {"app": "vllm"}))
    pod = _pod("ns", "vllm-0", {"app": "vllm"})
    pod["metadata"]["resourceVersion"] = "31"
    d._handle_pod("ADDED", pod)
    fences = decode_all(queue.fences("ns/a"))
    assert fences is not None
    assert [(f.resource, f.name, f.resource_version, dict(f.labels)) for f in fences] == [
        ("pods", "vllm-0", "31", {"app": "vllm"})
    ]
    d._stop_leading(release=False)
