"""The admission routes' own ASGI path, in front of the FastAPI app.

The three admission POSTs take raw bytes and answer bytes; FastAPI and Starlette's
middleware stack, request object and response class were a fifth of a validating
request's CPU, and handing every request to a worker thread another fifth (issue 12
profile, docs/performance.md). So ``webhook_svc.app.WebhookApp`` sends those three paths
here, and everything else (health, readiness, metrics) to FastAPI.

Per request, the same guarantees as before:

- a declared Content-Length over the limit: 413 before the body is read;
- the body reserves its size from the per-process byte budget (webhook_svc/admission_gate.py)
  and is read within ``BODY_READ_SECONDS`` (else 408); budget that stays full: 503 with
  Retry-After;
- decoding and judging never hold the event loop for long: a body up to
  ``INLINE_MAX_BYTES`` is decoded on the loop (tens of microseconds), a larger one on a
  worker thread; judging runs on the loop unless it may wait on the network
  (``Route.may_block``: the Pod route's LIST, a SubjectAccessReview), then on a thread;
- while draining (webhook_svc/lifecycle.py) every answer says ``Connection: close``;
- no answer is a 500: anything unexpected is logged and answered 503 + Retry-After.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Final

from starlette.types import Receive, Scope, Send

from webhook_svc.admission_gate import (
    BODY_READ_SECONDS,
    BUDGET_WAIT_SECONDS,
    MIN_RESERVATION_BYTES,
    ByteBudget,
    OverloadedError,
)
from webhook_svc.admission_route import Route, bad_request
from webhook_svc.codec import encode_json
from webhook_svc.lifecycle import lifecycle_of
from webhook_svc.metrics import WebhookMetrics

log = logging.getLogger("icache.webhook")

# Decoding 64 KiB of JSON takes well under a millisecond; real AdmissionReviews of a
# CacheBackend or a Pod are a few KiB. Larger bodies are decoded off the loop.
INLINE_MAX_BYTES: Final = 64 * 1024
# As many threads as Starlette's thread pool had (anyio's default limiter).
THREADS: Final = 40

_JSON: Final = (b"content-type", b"application/json")
_CLOSE: Final = (b"connection", b"close")
_OVERLOADED: Final = encode_json({"error": "webhook overloaded: retry shortly"})
_UNEXPECTED: Final = encode_json({"error": "webhook error: retry shortly"})


class BodyTooLargeError(Exception):
    pass


class ClientGoneError(Exception):
    pass


def declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            return int(value) if value.isdigit() else None
    return None


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body, at most ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientGoneError
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLargeError
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


class _Expiry:
    """Cancels ``task`` when called, and remembers that it did."""

    __slots__ = ("fired", "task")

    def __init__(self, task: asyncio.Task[object]) -> None:
        self.task = task
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        self.task.cancel()


async def read_body_within(receive: Receive, limit: int, seconds: float) -> bytes:
    """``read_body``, or TimeoutError past ``seconds``. What ``asyncio.timeout`` does,
    with one timer handle and no context-manager object: it ran on every admission and
    cost ~6% of a small one (issue 12 profile)."""
    task = asyncio.current_task()
    assert task is not None
    expiry = _Expiry(task)
    handle = asyncio.get_running_loop().call_later(seconds, expiry)
    try:
        return await read_body(receive, limit)
    except asyncio.CancelledError:
        if expiry.fired and task.uncancel() == 0:  # our cancellation, and no one else's
            raise TimeoutError from None
        raise
    finally:
        handle.cancel()


class AdmissionDoor:
    """Serves the admission routes of one process (one per worker: nothing shared)."""

    def __init__(
        self,
        routes: Mapping[str, Route],
        counters: WebhookMetrics,
        max_body_bytes: int,
        budget: ByteBudget,
    ) -> None:
        self.routes = routes
        self._counters = counters
        self._max_body = max_body_bytes
        self._budget = budget
        self._pool: ThreadPoolExecutor | None = None

    def _threads(self) -> ThreadPoolExecutor:
        # Created on first use, in the serving process (after any fork).
        if self._pool is None:
            self._pool = ThreadPoolExecutor(THREADS, thread_name_prefix="admission")
        return self._pool

    async def __call__(self, route: Route, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        retry = False
        try:
            status, body = await self._answer(route, scope, receive, started)
        except ClientGoneError:
            return
        except OverloadedError:
            self._counters.overloaded.labels(route.path).inc()
            log.warning("admission budget full: 503", extra={"endpoint": route.path})
            status, body, retry = 503, _OVERLOADED, True
        except Exception:  # never a 500 (module docstring)
            log.exception("admission request failed: 503", extra={"endpoint": route.path})
            status, body, retry = 503, _UNEXPECTED, True
        headers = [_JSON, (b"content-length", b"%d" % len(body))]
        if retry:
            headers.append((b"retry-after", b"1"))
        lifecycle = lifecycle_of(scope)
        if lifecycle is not None and lifecycle.draining:
            headers.append(_CLOSE)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    async def _answer(
        self, route: Route, scope: Scope, receive: Receive, started: float
    ) -> tuple[int, bytes]:
        limit = self._max_body
        declared = declared_length(scope)
        if declared is not None and declared > limit:
            return self._too_large(route)
        size = limit if declared is None else declared
        budget, gauge = self._budget, self._counters.inflight_bytes
        held = await budget.acquire(max(size, MIN_RESERVATION_BYTES), BUDGET_WAIT_SECONDS)
        gauge.set(budget.used)
        try:
            return await self._judge(route, receive, started)
        finally:
            budget.release(held)
            gauge.set(budget.used)

    async def _judge(self, route: Route, receive: Receive, started: float) -> tuple[int, bytes]:
        try:
            raw = await read_body_within(receive, self._max_body, BODY_READ_SECONDS)
        except BodyTooLargeError:
            return self._too_large(route)
        except TimeoutError:
            detail = f"body not received within {BODY_READ_SECONDS:g} s"
            return bad_request(self._counters, route.path, "timeout", detail, 408)
        loop = asyncio.get_running_loop()
        large = len(raw) > INLINE_MAX_BYTES
        if large and route.prefetch is None:
            return await loop.run_in_executor(self._threads(), route.admit, raw, started)
        parsed = (
            await loop.run_in_executor(self._threads(), route.parse, raw)
            if large
            else route.parse(raw)
        )
        if isinstance(parsed, tuple):
            return parsed
        answer = await route.prefetch(parsed, large) if route.prefetch is not None else None
        if large or (answer is None and route.may_block(parsed)):
            return await loop.run_in_executor(self._threads(), route.judge, parsed, started, answer)
        return route.judge(parsed, started, answer)

    def _too_large(self, route: Route) -> tuple[int, bytes]:
        detail = f"body exceeds {self._max_body} bytes"
        return bad_request(self._counters, route.path, "too_large", detail, 413)
