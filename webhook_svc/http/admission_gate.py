"""Admission control by body bytes: bounds the memory the admission routes can hold.

Decoding and judging a body costs memory in proportion to its size, up to ~130x for
the most object-dense JSON (see docs/install.md, "Webhook memory"); receiving it costs
its bytes, once. So a body is charged in two stages, each from its own per-process
byte budget of the same capacity:

- **Arriving.** A large body (declared, or grown, over ``SMALL_BODY_BYTES``) takes
  each chunk's size from the *arrival* budget as that chunk arrives. A small body is
  read uncharged: what it can hold is what uvicorn buffers on any connection anyway.
  A connection that declares a large body and sends nothing holds nothing.
- **Judging.** A complete body takes its size (plus a small fixed part for what does
  not scale with it) from the *judging* budget, gives back its arrival bytes, and
  holds the judging bytes until answered. Only complete bodies hold judging budget,
  and they are being decoded and judged, not waiting on a client.

So a body that stops arriving, however much of it was sent, can only ever make other
*large* bodies wait: a small AdmissionReview (what a real API server sends) never
waits behind it. A body that receives no byte for ``BODY_STALL_SECONDS`` is cut with
408 (giving its arrival bytes back), and the whole body must arrive within
``BODY_READ_SECONDS`` (else 408). A declared Content-Length over the body limit is a
413 before anything is read. A charge that does not fit waits; when budget frees up
the smallest waiter goes first, so a flood of maximum-size bodies cannot starve the
small reviews. A request that waited ``BUDGET_WAIT_SECONDS`` in vain is answered 503
with Retry-After (the caller decides: the Pod webhook fails open, a CacheBackend apply
is refused and can be retried).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Mapping
from typing import Any, Final

from starlette.types import Receive

# The API server sends AdmissionReviews of Kubernetes objects (etcd keeps at most
# 1.5 MiB each); the arithmetic behind these defaults is in docs/install.md
# ("Webhook memory").
DEFAULT_MAX_BODY_BYTES: Final = 1024 * 1024
DEFAULT_MAX_INFLIGHT_BYTES: Final = 2 * 1024 * 1024
# Admission requests one process judges at once (bodies read, answers not yet sent).
DEFAULT_LIMIT_CONCURRENCY: Final = 256
# Per-request cost that does not scale with the body (the answer, the objects around it).
MIN_RESERVATION_BYTES: Final = 4096
# Longest wait for budget before a 503: well inside the Pod webhook's 5 s timeout.
BUDGET_WAIT_SECONDS: Final = 2.0
# The API server sends a body at once; a client trickling one in holds budget.
BODY_READ_SECONDS: Final = 10.0
# Longest gap between two chunks of one body. The API server writes a body in one go,
# so a gap this long means a stalled client, not a slow network.
BODY_STALL_SECONDS: Final = 2.0
# Bodies up to this size are read without an arrival charge: it is the body uvicorn's
# HTTP protocol buffers per connection before it stops reading (its high-water mark),
# so reading it costs nothing a connection could not already hold. Real
# AdmissionReviews (a few KiB) are all small.
SMALL_BODY_BYTES: Final = 64 * 1024


class OverloadedError(Exception):
    """No budget freed up in time: answer 503."""


class BodyTooLargeError(Exception):
    """The body is (or says it is) over the limit: answer 413."""


class BodyTimeoutError(Exception):
    """The body stalled for ``BODY_STALL_SECONDS`` or did not arrive within
    ``BODY_READ_SECONDS``: answer 408 (the message says which)."""


class ClientGoneError(Exception):
    """The client disconnected before its body arrived: nobody to answer."""


class RequestLimit:
    """How many admission requests this process is judging: a request whose body has
    arrived takes a slot until answered; with none free it is answered 503 +
    Retry-After. Requests still sending their body hold no slot (their bound is
    ``BODY_READ_SECONDS``), nor do idle connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_use = 0

    def take(self) -> bool:
        if self.in_use >= self.limit:
            return False
        self.in_use += 1
        return True

    def give_back(self) -> None:
        self.in_use -= 1


class ByteBudget:
    """An asyncio weighted semaphore, smallest request first. Per process (each
    worker of a multi-process server has its own, so size it per process)."""

    def __init__(self, capacity: int, max_waiters: int = DEFAULT_LIMIT_CONCURRENCY) -> None:
        self.capacity = capacity
        self.used = 0
        # Each waiter is a connection whose unread body uvicorn buffers (up to ~64 KiB
        # and one socket read): past this many, a request that would wait gets 503 now.
        self.max_waiters = max_waiters
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
        if sum(1 for *_, waiting in self._waiters if not waiting.done()) >= self.max_waiters:
            raise OverloadedError
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

    async def acquire(self, size: int, wait_seconds: float) -> int:
        """Hold ``size`` bytes of the budget (capped at the capacity) or raise
        OverloadedError: the bytes held, to be given back with ``release``."""
        size = max(1, min(size, self.capacity))
        if self._fits(size):  # the usual case: no coroutine, no wait
            self.used += size
        else:
            await self._acquire(size, wait_seconds)
        return size

    def release(self, size: int) -> None:
        self._release(size)


def declared_length(headers: Mapping[str, str]) -> int | None:
    value = headers.get("content-length")
    return int(value) if value is not None and value.isdigit() else None


class _Expiry:
    """Cancels ``task`` when called, and remembers that it did and why: a bound
    re-armed around every wait for a chunk, cheaper than ``asyncio.timeout``."""

    __slots__ = ("fired", "reason", "task")

    def __init__(self, task: asyncio.Task[Any]) -> None:
        self.task = task
        self.fired = False
        self.reason = ""

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


class BodyReader:
    """Reads one admission request's body under the two budgets (module docstring).
    ``arriving`` defaults to a budget of ``judging``'s size."""

    def __init__(
        self,
        judging: ByteBudget,
        max_body_bytes: int,
        gauge: Any = None,
        *,
        arriving: ByteBudget | None = None,
        read_seconds: float = BODY_READ_SECONDS,
        stall_seconds: float = BODY_STALL_SECONDS,
    ) -> None:
        self.budget = judging
        self.arriving = arriving or ByteBudget(judging.capacity, judging.max_waiters)
        self.max_body_bytes = max_body_bytes
        self.read_seconds = read_seconds
        self.stall_seconds = stall_seconds
        self._gauge = gauge  # set to the bytes held after every change, when given

    def _show(self) -> None:
        if self._gauge is not None:
            self._gauge.set(self.budget.used + self.arriving.used)

    async def read(self, headers: Mapping[str, str], receive: Receive) -> tuple[bytes, int]:
        """The whole body, and the judging bytes it holds: give them back with
        ``release`` once the request is answered. Raises BodyTooLargeError,
        BodyTimeoutError, OverloadedError or ClientGoneError, holding nothing."""
        declared = declared_length(headers)
        if declared is not None and declared > self.max_body_bytes:
            raise BodyTooLargeError
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        expiry = _Expiry(task)
        deadline = loop.time() + self.read_seconds
        large = declared is not None and declared > SMALL_BODY_BYTES
        arriving = self.arriving
        arrived_held = 0
        parts: list[bytes] = []
        size = 0
        timer: asyncio.TimerHandle | None = None
        try:
            more = True
            while more:
                # Armed only while waiting for the client: waits for budget have their own.
                stall_at = loop.time() + self.stall_seconds
                expiry.reason = "stall" if stall_at < deadline else "read"
                timer = loop.call_at(min(stall_at, deadline), expiry)
                message = await receive()
                timer.cancel()
                if message["type"] != "http.request":
                    raise ClientGoneError
                chunk: bytes = message.get("body", b"")
                more = message.get("more_body", False)
                if not chunk:
                    continue
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise BodyTooLargeError
                parts.append(chunk)
                if large or size > SMALL_BODY_BYTES:
                    # Grown past small without a declared length: everything so far.
                    charge = len(chunk) if large else size
                    large = True
                    arrived_held += await arriving.acquire(charge, BUDGET_WAIT_SECONDS)
                    self._show()
            held = await self.budget.acquire(size + MIN_RESERVATION_BYTES, BUDGET_WAIT_SECONDS)
        except asyncio.CancelledError:
            self._give_back_arrived(arrived_held)
            if expiry.fired and task.uncancel() == 0:  # our bound, no one else's cancel
                raise BodyTimeoutError(self._timeout_detail(expiry.reason)) from None
            raise
        except BaseException:
            self._give_back_arrived(arrived_held)
            raise
        finally:
            if timer is not None:
                timer.cancel()
        self._give_back_arrived(arrived_held)
        self._show()
        return (parts[0] if len(parts) == 1 else b"".join(parts)), held

    def _timeout_detail(self, reason: str) -> str:
        if reason == "stall":
            return f"no body bytes received for {self.stall_seconds:g} s"
        return f"body not received within {self.read_seconds:g} s"

    def _give_back_arrived(self, held: int) -> None:
        if held:
            self.arriving.release(held)
            self._show()

    def release(self, held: int) -> None:
        if held:
            self.budget.release(held)
            self._show()
