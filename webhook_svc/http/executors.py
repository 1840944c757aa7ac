"""Where a pure function of a request runs: in place on the event loop, or on a worker
thread (the loop's default executor) for a large body, the I/O still awaited on the
loop. The routes pick one per request (webhook_svc/app.py) and hand it to the judge."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

# Runs a pure function of the request: in place, or on a thread for a large body.
Run = Callable[..., Awaitable[Any]]


async def in_place(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)


async def on_a_thread(fn: Callable[..., Any], *args: Any) -> Any:
    return await asyncio.to_thread(fn, *args)
