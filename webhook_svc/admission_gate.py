"""Admission control by body bytes: bounds the memory the admission routes can hold.

Decoding and judging a body costs memory in proportion to its size, up to ~130x for
the most object-dense JSON (see docs/install.md, "Webhook memory"). A request reserves
its declared Content-Length from a per-process byte budget before its body is read,
and returns it when answered; so at any moment the bodies being read, decoded or
judged add up to at most the budget. A request that does not fit waits; when budget
frees up the smallest waiter goes first, so a flood of maximum-size bodies cannot
starve the small AdmissionReviews a real API server sends. A request that waited
``wait_seconds`` in vain is answered 503 with Retry-After (the caller decides: the
Pod webhook fails open, a CacheBackend apply is refused and can be retried).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

# The API server sends AdmissionReviews of Kubernetes objects (etcd keeps at most
# 1.5 MiB each); the arithmetic behind these defaults is in docs/install.md
# ("Webhook memory").
DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
DEFAULT_MAX_INFLIGHT_BYTES: Final = 2 * 1024 * 1024
DEFAULT_LIMIT_CONCURRENCY: Final = 256
# Per-request cost that does not scale with the body (the answer, the objects around it).
MIN_RESERVATION_BYTES: Final = 4096
# Longest wait for budget before a 503: well inside the Pod webhook's 5 s timeout.
BUDGET_WAIT_SECONDS: Final = 2.0
# The API server sends a body at once; a client trickling one in holds budget.
BODY_READ_SECONDS: Final = 10.0


class OverloadedError(Exception):
    """No budget freed up in time: answer 503."""


class ByteBudget:
    """An asyncio weighted semaphore, smallest request first. One per process (each
    worker of a multi-process server has its own, so size it per process)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.used = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def _fits(self, size: int) -> bool:
        return self.used + size <= self.capacity

    def _grant_waiters(self) -> None:
        while self._waiters:
            size, _, future = self._waiters[0]
            if future.done():  # gave up waiting
                heapq.heappop(self._waiters)
                continue
            if not self._fits(size):
                return  # the smallest does not fit: no larger one does
            heapq.heappop(self._waiters)
            self.used += size
            future.set_result(None)

    async def _acquire(self, size: int, wait_seconds: float) -> None:
        if self._fits(size):  # anything waiting is larger than the room left
            self.used += size
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiters, (size, next(self._order), future))
        try:
            async with asyncio.timeout(wait_seconds):
                await asyncio.shield(future)
        except TimeoutError:
            if future.done():  # granted in the same instant: keep it
                return
            future.cancel()
            raise OverloadedError from None
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self._release(size)
            else:
                future.cancel()
            raise

    def _release(self, size: int) -> None:
        self.used -= size
        self._grant_waiters()

    @asynccontextmanager
    async def reserve(self, size: int, wait_seconds: float) -> AsyncIterator[None]:
        """Hold ``size`` bytes of the budget (capped at the capacity) or raise OverloadedError."""
        size = await self.acquire(size, wait_seconds)
        try:
            yield
        finally:
            self.release(size)

    async def acquire(self, size: int, wait_seconds: float) -> int:
        """``reserve`` without the context manager, for the admission hot path: the
        bytes held (``size`` capped at the capacity), to be given back with ``release``."""
        size = max(1, min(size, self.capacity))
        if self._fits(size):  # the usual case: no coroutine, no wait
            self.used += size
        else:
            await self._acquire(size, wait_seconds)
        return size

    def release(self, size: int) -> None:
        self._release(size)
