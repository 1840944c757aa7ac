"""The serving layer: what uvicorn's public settings do not give the webhook.

uvicorn parses HTTP and runs the app; its keep-alive timeout (``timeout_keep_alive``)
closes a connection idle after an answer. What it lacks, and this module adds:

- **A request-head bound.** uvicorn arms no timer before the first request, nor once
  the next request's first byte has arrived, so a client trickling header bytes (or
  TLS handshake bytes, or nothing at all) keeps its connection as long as it likes.
  Here every connection must deliver a complete request head within
  ``head_timeout`` seconds of being accepted (TLS handshake included), and again
  within ``head_timeout`` of the first byte after an idle spell; else it is closed.
- **A request limit that idle connections do not count against.** uvicorn's
  ``limit_concurrency`` counts open connections, so idle keep-alive connections
  crowd out requests, and its refusal is a text/plain 503 without Retry-After. It
  is left unset; :class:`ServingMiddleware` counts admission requests in flight and
  answers the JSON 503 + Retry-After every other overload answer uses.
- **Connection states for the drain** (webhook_svc/lifecycle.py). uvicorn's shutdown
  closes every connection with no request being answered, including one whose
  request is on its way (accepted, handshake done, head not yet parsed); the API
  server counts that as a failed call. :meth:`Connections.settle` lets those deliver
  their request first.

How: ``uvicorn.Config(http=...)`` takes the protocol class to serve connections with.
:class:`GuardedConnection` is that class. It holds uvicorn's own httptools protocol
(``HttpToolsProtocol``, what ``http="httptools"`` names) and hands it every
connection event; it does not subclass it or touch its attributes. It sees bytes
arrive; the ASGI side tells it when a request's head was parsed and when its answer
went out (each request's ``scope["state"]`` carries its connection, through the
``app_state`` uvicorn's protocol copies into every scope). The event loop builds the
protocol when it accepts a connection, before the TLS handshake, so the bound and
the drain see a connection mid-handshake too. The loop owns the handshake itself
(uvicorn passes it no handshake timeout, so the loop's own 60 s applies): a
connection whose handshake outlasts the head bound is closed as soon as it ends.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Collection
from typing import Any, ClassVar, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from webhook_svc.codec import encode_json
from webhook_svc.lifecycle import lifecycle_of

log = logging.getLogger("icache.webhook")

CONNECTION_KEY: Final = "icache_connection"
DEFAULT_HEAD_TIMEOUT_SECONDS: Final = 10.0
DEFAULT_KEEP_ALIVE_SECONDS: Final = 5
DEFAULT_LIMIT_CONCURRENCY: Final = 256
# How long a draining server waits for connections that were accepted but have not
# delivered a request yet (handshake, head on its way) before it closes them. A real
# caller sends its request within a round trip of the handshake.
SETTLE_SECONDS: Final = 2.0
# Paths outside the request limit: the kubelet's probes must answer under load.
UNLIMITED_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics"})

_OVERLOADED: Final = encode_json({"error": "webhook overloaded: retry shortly"})


class State(enum.Enum):
    HANDSHAKE = "handshake"  # TLS handshake in progress
    NEW = "new"  # accepted, no request byte yet
    HEAD = "head"  # request bytes arriving, head not parsed yet
    ACTIVE = "active"  # a request is being answered
    IDLE = "idle"  # answered; keep-alive (uvicorn's timer closes it)


# A request is on its way on a connection in one of these: the drain waits for it.
UNSETTLED: Final = frozenset({State.HANDSHAKE, State.NEW, State.HEAD})


class Connections:
    """This process's open connections and how they are served (one per worker)."""

    def __init__(self, head_timeout: float = DEFAULT_HEAD_TIMEOUT_SECONDS, tls: Any = None) -> None:
        self.head_timeout = head_timeout
        self.tls = tls  # webhook_svc.tls.ReloadingTLS, or None for plain HTTP
        self.open: set[GuardedConnection] = set()
        self.closed_for_head_timeout = 0

    def protocol_class(self) -> type[asyncio.Protocol]:
        """The class to give ``uvicorn.Config(http=...)``."""
        registry = self

        class Guarded(GuardedConnection):
            connections = registry

        return Guarded

    def unsettled(self) -> int:
        return sum(1 for conn in self.open if conn.state in UNSETTLED)

    async def settle(self, seconds: float = SETTLE_SECONDS) -> None:
        """Wait (at most ``seconds``) until no connection has a request on its way."""
        deadline = time.monotonic() + seconds
        while self.unsettled() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


class GuardedConnection(asyncio.Protocol):
    """One connection: uvicorn's HTTP protocol, plus the head bound and the state
    the drain reads (module docstring)."""

    connections: ClassVar[Connections]

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.loop = _loop or asyncio.get_event_loop()
        self.inner = HttpToolsProtocol(
            config=config,
            server_state=server_state,
            app_state={**app_state, CONNECTION_KEY: self},
            _loop=_loop,
        )
        # Built at accept time: with TLS, the handshake comes first.
        self.state = State.HANDSHAKE if config.ssl is not None else State.NEW
        self.transport: asyncio.BaseTransport | None = None
        self.expired = False
        self._timer: asyncio.TimerHandle | None = None
        self.connections.open.add(self)
        self._arm()

    # ------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if self.expired:  # a handshake that outlasted the bound
            transport.close()
            return
        if self.state is State.HANDSHAKE:
            self.state = State.NEW
        self.inner.connection_made(transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        state = self.state
        if state is State.NEW:
            self.state = State.HEAD
        elif state is State.IDLE:
            self.state = State.HEAD
            self._arm()  # the next head, too, within the bound of its first byte
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        self.inner.eof_received()
        return None  # close on EOF, as uvicorn's protocol does

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        if not self.expired or self.state is not State.HANDSHAKE:
            self.inner.connection_lost(exc)
        self.transport = None

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    # ------------------------------------------------------------ from the ASGI side

    def request_started(self) -> None:
        self.state = State.ACTIVE
        self._disarm()

    def request_finished(self) -> None:
        if self.state is State.ACTIVE:
            self.state = State.IDLE

    # ------------------------------------------------------------ the head bound

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.connections.head_timeout, self._expire)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self.state not in UNSETTLED:
            return
        self.connections.closed_for_head_timeout += 1
        log.info(
            "closing a connection that sent no complete request head in time",
            extra={"state": self.state.value, "seconds": self.connections.head_timeout},
        )
        if self.transport is None:  # mid-handshake (or it failed): closed when it ends
            self.expired = True
            self._forget()
        else:
            self.transport.close()

    def _forget(self) -> None:
        self._disarm()
        self.connections.open.discard(self)


class ServingMiddleware:
    """ASGI middleware, outermost: tells each request's connection when its head was
    parsed and when its answer went out, holds admission requests in flight to
    ``limit`` per process (over it: 503 + Retry-After, JSON), and while draining adds
    ``Connection: close`` to every answer so pooled connections re-dial a ready
    replica."""

    def __init__(
        self,
        app: ASGIApp,
        limit: int = DEFAULT_LIMIT_CONCURRENCY,
        overloaded: Any = None,
        unlimited: Collection[str] = UNLIMITED_PATHS,
    ) -> None:
        self.app = app
        self.limit = limit
        self.overloaded = overloaded  # counter labelled by endpoint, when given
        self.unlimited = unlimited
        self.in_flight = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.get("state") or {}
        conn = state.get(CONNECTION_KEY)
        if conn is not None:
            conn.request_started()
        lifecycle = lifecycle_of(scope)
        limited = scope["path"] not in self.unlimited
        try:
            if limited and self.in_flight >= self.limit:
                if self.overloaded is not None:
                    self.overloaded.labels(scope["path"]).inc()
                await self._refuse(send, lifecycle is not None and lifecycle.draining)
                return
            if lifecycle is None:
                await self._run(scope, receive, send, limited)
                return

            async def closing_when_draining(message: Message) -> None:
                if message["type"] == "http.response.start" and lifecycle.draining:
                    headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
                await send(message)

            await self._run(scope, receive, closing_when_draining, limited)
        finally:
            if conn is not None:
                conn.request_finished()

    async def _run(self, scope: Scope, receive: Receive, send: Send, limited: bool) -> None:
        if not limited:
            await self.app(scope, receive, send)
            return
        self.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight -= 1

    async def _refuse(self, send: Send, draining: bool) -> None:
        log.warning("request limit reached: 503", extra={"limit": self.limit})
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(_OVERLOADED)),
            (b"retry-after", b"1"),
        ]
        if draining:
            headers.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": _OVERLOADED})
