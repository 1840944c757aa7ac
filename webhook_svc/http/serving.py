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
  is left unset; the admission routes count the requests they are judging
  (``RequestLimit``, webhook_svc/http/admission_gate.py) and answer the JSON 503 +
  Retry-After every other overload answer uses.
- **Connection states for the drain** (webhook_svc/http/lifecycle.py). uvicorn's shutdown
  closes every connection with no request being answered, including one whose
  request is on its way (accepted, handshake done, head not yet parsed); the API
  server counts that as a failed call. :meth:`Connections.settle` lets those deliver
  their request first.

How: ``uvicorn.Config(http=...)`` takes the protocol class to serve connections with.
:class:`GuardedConnection` is that class. It holds uvicorn's own httptools protocol
(``HttpToolsProtocol``, what ``http="httptools"`` names) and hands it every
connection event; it does not subclass it or touch its attributes, but it does import
uvicorn's internal module, so pyproject.toml bounds uvicorn to the tested minor series
and tests/unit/webhook_process/test_webhook_uvicorn_contract.py pins what is relied on. It sees bytes
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
from typing import Any, ClassVar, Final

from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from webhook_svc.http.lifecycle import lifecycle_of

log = logging.getLogger("icache.webhook")

CONNECTION_KEY: Final = "icache_connection"
DEFAULT_HEAD_TIMEOUT_SECONDS: Final = 10.0
DEFAULT_KEEP_ALIVE_SECONDS: Final = 5
# How long a draining server waits for connections that were accepted but have not
# delivered a request yet (handshake, head on its way) before it closes them. A real
# caller sends its request within a round trip of the handshake.
SETTLE_SECONDS: Final = 2.0


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

    def __init__(self, head_timeout: float = DEFAULT_HEAD_TIMEOUT_SECONDS) -> None:
        self.head_timeout = head_timeout
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


class OneWritePerTurn:
    """The transport uvicorn's protocol writes to: every write of one event-loop turn
    reaches the real transport as one (the status line and headers, then the body,
    are two writes; over TLS, two records and two sends). Everything else goes to the
    real transport."""

    def __init__(self, transport: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._pending is None:
            self._pending = [bytes(data)]
            self._loop.call_soon(self.flush)
        else:
            self._pending.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def get_write_buffer_size(self) -> int:
        waiting = sum(len(chunk) for chunk in self._pending or ())
        return int(self._transport.get_write_buffer_size()) + waiting

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


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
        self.inner.connection_made(OneWritePerTurn(transport, self.loop))  # type: ignore[arg-type]

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
    """ASGI middleware, the app's first: tells each request's connection when its head was
    parsed and when its answer went out, and while draining adds ``Connection:
    close`` to every answer so pooled connections re-dial a ready replica."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        conn = (scope.get("state") or {}).get(CONNECTION_KEY)
        if conn is not None:
            conn.request_started()
        try:
            lifecycle = lifecycle_of(scope)
            if lifecycle is None:
                await self.app(scope, receive, send)
                return

            async def closing_when_draining(message: Message) -> None:
                if message["type"] == "http.response.start" and lifecycle.draining:
                    headers = [(k, v) for k, v in message.get("headers", []) if k != b"connection"]
                    message = {**message, "headers": [*headers, (b"connection", b"close")]}
                await send(message)

            await self.app(scope, receive, closing_when_draining)
        finally:
            if conn is not None:
                conn.request_finished()
