"""The webhook's one client of the API server: ``kubernetes.aio`` on the event loop.

Two calls are made on the admission path: the Pod route's live CacheBackend LIST and
the validating route's SubjectAccessReview. Both go through the official client's
asyncio ApiClient (``kubernetes.aio``, aiohttp underneath), configured by
:func:`kubeio.access.async_client_for` from the configuration every other process
loads: same source order, TLS files, proxy and token refresh. Their paths come from the
access layer's resource table, and answers are read as bytes and decoded with orjson
by the caller; the generated API methods (argument validation, model objects) are not
used on this path.

Each call has a hard wall-clock budget: past it the caller gets ``TimeoutError``.
Within it the access layer's one retry policy applies
(:data:`kubeio.retries.RETRY_POLICY`): an answer 429 or 503 with a Retry-After that
still fits in the budget is waited out and the request sent again
(:func:`kubeio.retries.retry_after_wait`), as the synchronous client does: a
restarted API server answers "storage is (re)initializing" for a moment after it
reports ready, and a pod admitted then would stay unwired. A request on a pooled
connection the server had closed is sent once more on a new one.

A rotated CA or client certificate file is used from the next request on: the files'
stamps are checked at most once a second, and a change builds a new client.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import aiohttp

from kubeio.retries import RETRY_POLICY, retry_after_wait

if TYPE_CHECKING:
    from kubernetes.aio.client import ApiClient

USER_AGENT: Final = "inference-cache-webhook"
# How often the TLS files are looked at (two or three stat calls).
TLS_CHECK_SECONDS: Final = 1.0


def _stamp(paths: list[str]) -> tuple[tuple[str, int], ...]:
    """(path, mtime) of each file; -1 for one that cannot be read right now."""
    stamps = []
    for path in paths:
        try:
            stamps.append((path, os.stat(path).st_mtime_ns))
        except OSError:
            stamps.append((path, -1))
    return tuple(stamps)


class ApiServer:
    """GET and POST to the API server. Create and use it on one event loop (each
    webhook worker builds its own)."""

    def __init__(self, client_factory: Callable[[], ApiClient]) -> None:
        self._factory = client_factory
        self._client = client_factory()
        self._old: list[ApiClient] = []
        configuration = self._client.configuration
        self._host = str(configuration.host).rstrip("/")
        self._tls_files = [
            str(path)
            for path in (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file)
            if path
        ]
        self._tls_stamp = _stamp(self._tls_files)
        self._tls_checked = time.monotonic()

    def _current(self) -> ApiClient:
        now = time.monotonic()
        if self._tls_files and now - self._tls_checked >= TLS_CHECK_SECONDS:
            self._tls_checked = now
            stamp = _stamp(self._tls_files)
            if stamp != self._tls_stamp:
                try:
                    fresh = self._factory()
                except (OSError, ValueError):  # half-written: look again next time
                    return self._client
                self._old.append(self._client)  # closed in close(): requests may be in flight
                self._client, self._tls_stamp = fresh, stamp
        return self._client

    async def get(self, path: str, budget: float) -> tuple[int, bytes]:
        """(HTTP status, body) of a GET, or TimeoutError past ``budget`` seconds.
        Connection errors are raised as they come (aiohttp's)."""
        return await self._call("GET", path, None, budget)

    async def post(self, path: str, body: dict[str, Any], budget: float) -> tuple[int, bytes]:
        """``get`` for a POST of a JSON ``body``; only for requests that change nothing
        (a SubjectAccessReview), since a Retry-After sends it again."""
        return await self._call("POST", path, body, budget)

    async def _call(
        self, method: str, path: str, body: dict[str, Any] | None, budget: float
    ) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + budget
        try:
            async with asyncio.timeout(budget):
                sent = dropped = 0
                while True:
                    sent += 1
                    try:
                        status, data, retry_after = await self._once(method, path, body, budget)
                    except aiohttp.ServerDisconnectedError:
                        # A pooled connection the server had closed (it restarted, or its
                        # idle timeout struck first): again, on a new connection.
                        dropped += 1
                        if dropped > RETRY_POLICY.stale_connection_resends or (
                            sent >= RETRY_POLICY.sends
                        ):
                            raise
                        continue
                    wait = retry_after_wait(
                        status,
                        retry_after,
                        sent=sent,
                        remaining=deadline - loop.time(),
                        replayable=True,  # a GET, or a POST that changes nothing
                    )
                    if wait is None:
                        break
                    await asyncio.sleep(wait)
        except TimeoutError:
            raise TimeoutError(f"no answer from the API server within {budget:g} s") from None
        return status, data

    async def _once(
        self, method: str, path: str, body: dict[str, Any] | None, budget: float
    ) -> tuple[int, bytes, str | None]:
        client = self._current()
        headers: dict[str, str] = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
        }
        await client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        response = await client.call_api(
            method, self._host + path, header_params=headers, body=body, _request_timeout=budget
        )
        data = await response.read()
        return response.status, data, response.headers.get("Retry-After")

    async def close(self) -> None:
        for client in (*self._old, self._client):
            await client.close()
        self._old.clear()
