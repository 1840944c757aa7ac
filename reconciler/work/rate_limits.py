"""The Redis-backed limits every worker process shares: one functional probe per
backend per window, and one engine cascade per backend per window."""

from __future__ import annotations

import redis

from reconciler.steps.engine_cascade import CascadeClaim
from reconciler.steps.reconcile import ProbeRateLimiter


def redis_probe_rate_limiter(client: redis.Redis, window: float) -> ProbeRateLimiter:
    """At most one /probe per backend per window across every worker process."""

    def limiter(key: str) -> float | None:
        name = f"icache:probe:{key}"
        if client.set(name, "1", nx=True, px=int(window * 1000)):
            return None
        ttl = client.pttl(name)
        return max(float(ttl) / 1000.0, 0.1) if isinstance(ttl, int) and ttl > 0 else window

    return limiter


class RedisCascadeLimiter:
    """At most one engine cascade per backend per window across every worker process.
    The key holds the identifier the cascade ran for, so a reconcile retried after a
    lost status write recognises its own cascade instead of waiting out the window
    and rolling the engines twice."""

    def __init__(self, client: redis.Redis, window: float) -> None:
        self.client = client
        self.window = window

    @staticmethod
    def _name(key: str) -> str:
        return f"icache:cascade:{key}"

    def claim(self, key: str, value: str) -> CascadeClaim:
        name = self._name(key)
        if self.client.set(name, value, nx=True, px=int(self.window * 1000)):
            return "go", 0.0
        current = self.client.get(name)
        if isinstance(current, bytes):
            current = current.decode()
        if current == value:
            return "done", 0.0
        ttl = self.client.pttl(name)
        return "wait", max(float(ttl) / 1000.0, 0.1) if isinstance(ttl, int) and ttl > 0 else 0.1

    def release(self, key: str) -> None:
        self.client.delete(self._name(key))
