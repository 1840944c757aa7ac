"""client-go work-queue semantics on Redis, for a Celery worker pool.

State (all under one key prefix, changed only by the Lua scripts below, so every
transition is atomic in Redis):

* ``pending``    ZSET key → ready-at (ms). One entry per key however many adds
                 arrive: an add collapses into an existing entry, keeping the
                 earlier ready-at. Delayed requeues and error backoff live here too.
* ``queued``     ZSET key → dispatch time (ms). The dispatcher moved the key out of
                 ``pending`` and sent one Celery message for it.
* ``processing`` HASH key → lease token of the worker running it, with the lease
                 expiry in the ``leases`` ZSET. A worker renews its lease while it runs.
* ``dirty``      SET of keys that got an add while processing: exactly one more run
                 happens after the current one (the add does not create a second entry).
* ``failures``   HASH key → consecutive failures, for exponential per-key backoff
                 (0.5 s doubling to 5 min by default; reset on success).
* ``fences:<key>`` HASH object → the change an add was made for
                 (reconciler.watch.freshness): set with the add, read by the run
                 that starts after it, and cleared, value for value, by a run that
                 succeeded having waited for it; one left behind is checked again
                 by the next run (passed at once) and expires after FENCE_TTL_SECONDS.

Guarantees and how they are met:

* Never two workers on one key: ``start`` only succeeds for a key that is in
  ``queued``; a processing key is never in ``pending``/``queued`` (adds become
  ``dirty``), so a stray or duplicated Celery message finds nothing to start.
* At-least-once: a worker killed mid-run (SIGKILL) stops renewing; ``reap`` (run
  by the dispatcher) moves keys with expired leases back to ``pending``. A Celery
  message lost on the way (worker killed holding a prefetched message, broker
  restart) leaves its key in ``queued``; ``reap`` re-dispatches keys queued longer
  than the dispatch timeout once the broker queue has drained. If Redis itself
  loses its data, the dispatcher re-adds every key it knows (level-based resync) and
  dispatches nothing until any lease from before the loss has lapsed
  (``dispatch_fence_after_data_loss``): the loss also erased who was running what.
* A worker whose lease was taken away (``done`` with a foreign token) changes
  nothing: the key was already handed on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import redis

from reconciler import metrics

log = logging.getLogger(__name__)


class QueueDataLostError(Exception):
    """Redis no longer holds the queue's marker: it restarted empty or was flushed."""


STARTED: Final = "started"
STALE: Final = "stale"  # no dispatch outstanding for this key: a duplicate message
BUSY: Final = "busy"  # another worker holds the key (defensive; should not happen)
LOST: Final = "lost"  # our lease was reaped while we ran; someone else owns the key now
DONE: Final = "done"

_ADD = """
local pending, queued, processing, dirty, wake, fences = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local key, ready, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', fences, ARGV[4], ARGV[5])
  redis.call('PEXPIRE', fences, ARGV[6])
end
if redis.call('HEXISTS', processing, key) == 1 and ready <= now then
  redis.call('SADD', dirty, key)
  return 2
end
if redis.call('ZSCORE', queued, key) then
  return 0
end
local cur = redis.call('ZSCORE', pending, key)
if cur and tonumber(cur) <= ready then
  return 0
end
redis.call('ZADD', pending, ready, key)
if ready <= now then
  redis.call('LPUSH', wake, '1')
  redis.call('LTRIM', wake, 0, 0)
end
return 1
"""

_CLEAR_FENCES = """
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return 0
"""

_POP_DUE = """
local pending, queued, processing, dirty, epoch = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5]
local now, limit, require_epoch = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if require_epoch == '1' and redis.call('EXISTS', epoch) == 0 then
  return false
end
local due = redis.call('ZRANGEBYSCORE', pending, '-inf', now, 'LIMIT', 0, limit)
local out = {}
for _, key in ipairs(due) do
  redis.call('ZREM', pending, key)
  if redis.call('HEXISTS', processing, key) == 1 then
    -- a delayed requeue came due while the key runs: one more run after it
    redis.call('SADD', dirty, key)
  else
    redis.call('ZADD', queued, now, key)
    table.insert(out, key)
  end
end
return out
"""

_START = """
local queued, processing, leases, dirty = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local key, token, expiry = ARGV[1], ARGV[2], ARGV[3]
local dispatched = redis.call('ZSCORE', queued, key)
if not dispatched then
  return {'stale', '0'}
end
redis.call('ZREM', queued, key)
if redis.call('HEXISTS', processing, key) == 1 then
  redis.call('SADD', dirty, key)
  return {'busy', dispatched}
end
redis.call('HSET', processing, key, token)
redis.call('ZADD', leases, expiry, key)
redis.call('SREM', dirty, key)
return {'started', dispatched}
"""

_RENEW = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('ZADD', KEYS[2], 'XX', ARGV[3], ARGV[1])
  return 1
end
return 0
"""

_DONE = """
local processing, leases, dirty, pending, failures, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local key, token, now, outcome = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local requeue, base, maxd = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if redis.call('HGET', processing, key) ~= token then
  return {'lost', '0'}
end
redis.call('HDEL', processing, key)
redis.call('ZREM', leases, key)
local ready = nil
local delay = 0
if outcome == 'error' then
  local n = redis.call('HINCRBY', failures, key, 1)
  delay = math.min(base * math.pow(2, math.min(n - 1, 60)), maxd)
  ready = now + delay
else
  redis.call('HDEL', failures, key)
  if requeue > 0 then
    ready = now + requeue
  end
end
if redis.call('SREM', dirty, key) == 1 then
  ready = now
end
if ready then
  local cur = redis.call('ZSCORE', pending, key)
  if (not cur) or tonumber(cur) > ready then
    redis.call('ZADD', pending, ready, key)
  end
  if ready <= now then
    redis.call('LPUSH', wake, '1')
    redis.call('LTRIM', wake, 0, 0)
  end
end
return {'done', tostring(delay)}
"""

_REAP = """
local leases, processing, dirty, pending, queued, failures, wake = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[7]
local now, stale_before = tonumber(ARGV[1]), tonumber(ARGV[2])
local base, maxd = tonumber(ARGV[3]), tonumber(ARGV[4])
local expired = redis.call('ZRANGEBYSCORE', leases, '-inf', now)
for _, key in ipairs(expired) do
  redis.call('HDEL', processing, key)
  redis.call('ZREM', leases, key)
  redis.call('SREM', dirty, key)
  -- a run that never finished counts as a failure: a reconcile that kills its
  -- worker backs off instead of crash-looping the pool
  local n = redis.call('HINCRBY', failures, key, 1)
  local ready = now + math.min(base * math.pow(2, math.min(n - 1, 60)), maxd)
  local cur = redis.call('ZSCORE', pending, key)
  if (not cur) or tonumber(cur) > ready then
    redis.call('ZADD', pending, ready, key)
  end
end
local stale = {}
if stale_before >= 0 then
  stale = redis.call('ZRANGEBYSCORE', queued, '-inf', stale_before)
  for _, key in ipairs(stale) do
    redis.call('ZREM', queued, key)
    local cur = redis.call('ZSCORE', pending, key)
    if (not cur) or tonumber(cur) > now then
      redis.call('ZADD', pending, now, key)
    end
  end
end
if #expired + #stale > 0 then
  redis.call('LPUSH', wake, '1')
  redis.call('LTRIM', wake, 0, 0)
end
return {expired, stale}
"""


# How long the fences of a key that is not run are kept: far longer than a cache
# takes to catch up, so a fence that expired had long been passed.
FENCE_TTL_SECONDS: Final = 600.0


@dataclass(frozen=True)
class QueueSettings:
    prefix: str = "icache:wq"
    base_delay: float = 0.5
    max_delay: float = 300.0
    # How long a worker's claim lasts without renewal; renewed every lease/3.
    lease_seconds: float = 30.0
    # A dispatched key whose Celery message has not started after this long (and
    # with the broker queue drained) is re-dispatched.
    dispatch_timeout: float = 60.0


class WorkQueue:
    """The Redis side of the queue. Thread-safe (redis-py pools connections)."""

    def __init__(
        self,
        client: redis.Redis,
        settings: QueueSettings | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.redis = client
        self.settings = settings or QueueSettings()
        self._clock = clock
        p = self.settings.prefix
        self.k_pending = f"{p}:pending"
        self.k_queued = f"{p}:queued"
        self.k_processing = f"{p}:processing"
        self.k_leases = f"{p}:leases"
        self.k_dirty = f"{p}:dirty"
        self.k_failures = f"{p}:failures"
        self.k_wake = f"{p}:wake"
        self.k_epoch = f"{p}:epoch"
        self._add = client.register_script(_ADD)
        self._clear_fences = client.register_script(_CLEAR_FENCES)
        self._pop_due = client.register_script(_POP_DUE)
        self._start = client.register_script(_START)
        self._renew = client.register_script(_RENEW)
        self._done = client.register_script(_DONE)
        self._reap = client.register_script(_REAP)
        self._keeper: LeaseKeeper | None = None
        self._keeper_lock = threading.Lock()

    # ------------------------------------------------------------ time

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    # ------------------------------------------------------------ producer side

    def k_fences(self, key: str) -> str:
        return f"{self.settings.prefix}:fences:{key}"

    def add(self, key: str, delay: float = 0.0, fence: tuple[str, str] | None = None) -> bool:
        """Enqueue ``key`` to run after ``delay`` seconds (client-go Add / AddAfter).

        ``fence``: (field, value) of the change this add is for, kept beside the key
        until a run has waited for it (reconciler.watch.freshness.Fence).

        Returns True when this created or advanced a pending entry; False when it
        collapsed into an existing one (already queued or pending sooner) — or,
        for a key being processed, marked it dirty (one more run after this one).
        """
        now = self._now_ms()
        ready = now + max(0, int(delay * 1000))
        metrics.ADDS.inc()
        field, value = fence or ("", "")
        rc = self._add(
            keys=[
                self.k_pending,
                self.k_queued,
                self.k_processing,
                self.k_dirty,
                self.k_wake,
                self.k_fences(key),
            ],
            args=[key, ready, now, field, value, int(FENCE_TTL_SECONDS * 1000)],
        )
        return int(rc) == 1

    def fences(self, key: str) -> dict[str, str]:
        """The fences left beside ``key`` (field → value)."""
        raw = self.redis.hgetall(self.k_fences(key))
        return {_s(f): _s(v) for f, v in raw.items()}

    def clear_fences(self, key: str, seen: dict[str, str]) -> None:
        """Drop the fences a run waited for, each only if no newer change replaced it
        meanwhile (that one is for the next run)."""
        if seen:
            args = [part for item in sorted(seen.items()) for part in item]
            self._clear_fences(keys=[self.k_fences(key)], args=args)

    def pop_due(self, limit: int = 500, *, require_epoch: bool = False) -> list[str]:
        """Move due keys from pending to queued and return them, for dispatch.

        With ``require_epoch``, nothing moves unless the marker ``mark_epoch`` set is
        still there (``QueueDataLostError`` otherwise): checked in the same script, so
        not one key is dispatched from a Redis that lost its data since."""
        keys = self._pop_due(
            keys=[self.k_pending, self.k_queued, self.k_processing, self.k_dirty, self.k_epoch],
            args=[self._now_ms(), limit, "1" if require_epoch else "0"],
        )
        if keys is None:
            raise QueueDataLostError("the work queue's Redis lost its data")
        return [_s(k) for k in keys]

    def mark_epoch(self) -> None:
        """Set the marker whose absence tells a Redis that lost its data (no TTL)."""
        self.redis.set(self.k_epoch, "1")

    def next_due_in(self) -> float | None:
        """Seconds until the earliest pending key is due (0 if one is due now)."""
        first = self.redis.zrange(self.k_pending, 0, 0, withscores=True)
        if not first:
            return None
        return max(0.0, (float(first[0][1]) - self._now_ms()) / 1000.0)

    def wait_for_work(self, timeout: float) -> None:
        """Block up to ``timeout`` s for an add that made something due now."""
        if timeout <= 0:
            return
        # The server-side wait must end well before the client's read timeout, or a
        # healthy but idle Redis would look dead.
        read_timeout = self.redis.connection_pool.connection_kwargs.get("socket_timeout")
        if read_timeout:
            timeout = min(timeout, float(read_timeout) / 2)
        # BLPOP takes whole or fractional seconds; keep it above zero (0 = forever).
        self.redis.blpop([self.k_wake], timeout=max(timeout, 0.01))

    def reap(self, *, broker_backlog: int | None = 0) -> tuple[list[str], list[str]]:
        """Requeue keys whose worker lease expired and dispatches that got lost.

        ``broker_backlog``: messages still waiting in the Celery queue; lost-dispatch
        recovery only runs when it is 0 (a long backlog is not a lost message).
        Pass None to skip lost-dispatch recovery.
        """
        now = self._now_ms()
        stale_before = -1
        if broker_backlog == 0:
            stale_before = now - int(self.settings.dispatch_timeout * 1000)
        expired, stale = self._reap(
            keys=[
                self.k_leases,
                self.k_processing,
                self.k_dirty,
                self.k_pending,
                self.k_queued,
                self.k_failures,
                self.k_wake,
            ],
            args=[
                now,
                stale_before,
                int(self.settings.base_delay * 1000),
                int(self.settings.max_delay * 1000),
            ],
        )
        expired_keys, stale_keys = [_s(k) for k in expired], [_s(k) for k in stale]
        if expired_keys:
            metrics.retried("lease_expired", len(expired_keys))
            log.warning(
                "requeued keys whose worker lease expired",
                extra={"count": len(expired_keys), "keys": expired_keys[:10]},
            )
        if stale_keys:
            metrics.retried("redispatch", len(stale_keys))
            log.warning(
                "re-dispatching keys whose message never started",
                extra={"count": len(stale_keys), "keys": stale_keys[:10]},
            )
        return expired_keys, stale_keys

    # ------------------------------------------------------------ worker side

    def start(self, key: str, token: str) -> str:
        now = self._now_ms()
        expiry = now + int(self.settings.lease_seconds * 1000)
        rc = self._start(
            keys=[self.k_queued, self.k_processing, self.k_leases, self.k_dirty],
            args=[key, token, expiry],
        )
        result, dispatched_ms = _s(rc[0]), float(_s(rc[1]))
        if result == STARTED:
            # Dispatch time is the dispatcher's clock: a skewed one must not go negative.
            metrics.QUEUE_DURATION.observe(max(0.0, now - dispatched_ms) / 1000.0)
        return result

    def renew(self, key: str, token: str) -> bool:
        expiry = self._now_ms() + int(self.settings.lease_seconds * 1000)
        return bool(self._renew(keys=[self.k_processing, self.k_leases], args=[key, token, expiry]))

    def done(
        self, key: str, token: str, *, error: bool = False, requeue_after: float | None = None
    ) -> tuple[str, float]:
        """Release ``key``. Returns (DONE|LOST, backoff delay in seconds if error)."""
        rc = self._done(
            keys=[
                self.k_processing,
                self.k_leases,
                self.k_dirty,
                self.k_pending,
                self.k_failures,
                self.k_wake,
            ],
            args=[
                key,
                token,
                self._now_ms(),
                "error" if error else "ok",
                int((requeue_after or 0) * 1000),
                int(self.settings.base_delay * 1000),
                int(self.settings.max_delay * 1000),
            ],
        )
        outcome, delay = _s(rc[0]), float(_s(rc[1])) / 1000.0
        if error and outcome == DONE:
            metrics.retried("error")
        return outcome, delay

    @contextlib.contextmanager
    def leased(self, key: str) -> Iterator[str | None]:
        """Claim ``key`` for the duration of the block, renewing the lease meanwhile.

        Yields the lease token, or None when there is nothing to run (duplicate or
        stale message). The caller must call :meth:`done` with the token; if it
        does not (it crashed), the lease expires and the key is re-run.
        """
        token = uuid.uuid4().hex
        claimed_at = time.monotonic()
        result = self.start(key, token)
        if result != STARTED:
            yield None
            return
        keeper = self._lease_keeper()
        keeper.track(key, token, claimed_at + self.settings.lease_seconds)
        metrics.ACTIVE_WORKERS.inc()
        metrics.RUNNING.start(token)
        try:
            yield token
        finally:
            metrics.RUNNING.finish(token)
            metrics.ACTIVE_WORKERS.dec()
            metrics.WORK_DURATION.observe(time.monotonic() - claimed_at)
            keeper.untrack(key, token)

    def lease_valid_until(self, key: str, token: str) -> float | None:
        """time.monotonic() until which this process surely holds ``key``'s lease."""
        keeper = self._keeper
        return keeper.valid_until(key, token) if keeper is not None else None

    def _lease_keeper(self) -> LeaseKeeper:
        with self._keeper_lock:
            if self._keeper is None or not self._keeper.is_alive():
                self._keeper = LeaseKeeper(self)
                self._keeper.start()
            return self._keeper

    # ------------------------------------------------------------ observability

    def depth(self) -> dict[str, int]:
        """Keys by state; ``due`` counts the pending keys whose ready-at has passed,
        ``failing`` the keys with a failure streak (in error backoff)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.zcard(self.k_pending)
        pipe.zcount(self.k_pending, "-inf", self._now_ms())
        pipe.zcard(self.k_queued)
        pipe.hlen(self.k_processing)
        pipe.scard(self.k_dirty)
        pipe.hlen(self.k_failures)
        pending, due, queued, processing, dirty, failing = (int(x) for x in pipe.execute())
        return {
            "pending": pending,
            "due": due,
            "queued": queued,
            "processing": processing,
            "dirty": dirty,
            "failing": failing,
        }

    def update_depth_metrics(self) -> dict[str, int]:
        d = self.depth()
        # client-go's depth: what waits to be picked up, not what waits out a delay.
        metrics.set_queue_state(depth=d["due"] + d["queued"], failing=d["failing"])
        return d


class LeaseKeeper(threading.Thread):
    """Renews the leases of every key this process is running, every lease/3, and
    knows until when each is surely still ours: the lease length after the start of
    the last renewal Redis confirmed (the reaper cannot have taken it before then)."""

    def __init__(self, queue: WorkQueue) -> None:
        super().__init__(name="icache-lease-keeper", daemon=True)
        self.queue = queue
        self._active: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def track(self, key: str, token: str, valid_until: float) -> None:
        with self._lock:
            self._active[(key, token)] = valid_until

    def untrack(self, key: str, token: str) -> None:
        with self._lock:
            self._active.pop((key, token), None)

    def valid_until(self, key: str, token: str) -> float | None:
        """time.monotonic() until which the lease is surely held (None: not tracked)."""
        with self._lock:
            return self._active.get((key, token))

    def run(self) -> None:
        interval = max(self.queue.settings.lease_seconds / 3.0, 0.05)
        while True:
            time.sleep(interval)
            with self._lock:
                active = list(self._active)
            for key, token in active:
                sent = time.monotonic()
                try:
                    if not self.queue.renew(key, token):
                        log.warning("lost the lease while running", extra={"key": key})
                        continue
                except redis.RedisError as exc:
                    log.warning("could not renew the lease", extra={"key": key, "error": str(exc)})
                    continue
                with self._lock:
                    if (key, token) in self._active:
                        self._active[(key, token)] = sent + self.queue.settings.lease_seconds


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
