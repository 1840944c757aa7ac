"""Graceful shutdown: SIGTERM drains instead of dropping pod admissions.

Pod CREATE is admitted once; a webhook that vanishes mid-rollout admits pods unwired.
On the first SIGTERM the server

1. flips /readyz to 503 (the Service stops picking this replica),
2. keeps serving every request, new ones included, for ``drain_seconds`` (endpoint
   removal takes a while to reach the API server; with every replica terminating it
   may have no one else to call), answering each with ``Connection: close`` so that
   pooled keep-alive connections re-dial a ready replica,
3. then stops listening: new connections are refused rather than reset (a socket
   filter makes the kernel drop new SYNs while the connections it already queued are
   accepted, then the listener closes: ``stop_listening``); lets connections
   accepted before that deliver the request they are sending (a handshake or a head
   on its way: webhook_svc/http/serving.py); lets in-flight requests finish (at most
   ``timeout_graceful_shutdown``) and exits 0.

A second SIGTERM, or SIGINT (Ctrl+C), skips the rest of the drain.

The drain state lives in a ``Lifecycle`` the app's lifespan puts in the ASGI lifespan
state: one per process, so every worker of a multi-process server drains on its own.
"""

from __future__ import annotations

import asyncio
import ctypes
import logging
import signal
import socket
import struct
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import FrameType
from typing import TYPE_CHECKING, Any, Final

import uvicorn
from starlette.types import Scope

if TYPE_CHECKING:
    from webhook_svc.http.serving import Connections

log = logging.getLogger("icache.webhook")

LIFECYCLE_KEY = "icache_lifecycle"


class Lifecycle:
    """This process's serving state."""

    def __init__(self) -> None:
        self.draining = False


@asynccontextmanager
async def lifespan(app: Any) -> AsyncIterator[dict[str, Any]]:
    yield {LIFECYCLE_KEY: Lifecycle()}
    # What the app holds open (the API client's connection pool), closed last.
    for close in getattr(app.state, "on_shutdown", ()):
        await close()


def lifecycle_of(scope: Scope) -> Lifecycle | None:
    """None when the server runs without lifespan (e.g. a bare TestClient): never draining."""
    found = (scope.get("state") or {}).get(LIFECYCLE_KEY)
    return found if isinstance(found, Lifecycle) else None


def is_draining(scope: Scope) -> bool:
    lifecycle = lifecycle_of(scope)
    return lifecycle is not None and lifecycle.draining


# Linux: a classic BPF socket filter that drops a new connection's SYN (SYN set, ACK
# clear) and passes every other packet. A TCP socket's filter sees the packet from its
# TCP header, whose byte 13 holds the flags. The final ACK of a handshake already under
# way passes, so that connection reaches the accept queue and is accepted; dropping it
# too would leave it half-open until the close resets it.
_SO_ATTACH_FILTER: Final = 26
_TCP_FLAGS_OFFSET: Final = 13
_SYN, _ACK = 0x02, 0x10
_DROP_NEW_SYNS: Final = b"".join(
    struct.pack("HBBI", code, jt, jf, k)
    for code, jt, jf, k in (
        (0x30, 0, 0, _TCP_FLAGS_OFFSET),  # BPF_LD | BPF_B | BPF_ABS: A = flags
        (0x54, 0, 0, _SYN | _ACK),  # BPF_ALU | BPF_AND | BPF_K: A &= SYN | ACK
        (0x15, 0, 1, _SYN),  # BPF_JMP | BPF_JEQ | BPF_K: a bare SYN?
        (0x06, 0, 0, 0),  # BPF_RET | BPF_K: drop
        (0x06, 0, 0, 0xFFFFFFFF),  # BPF_RET | BPF_K: pass the whole packet
    )
)
_DROP_NEW_SYNS_LENGTH: Final = 5
# struct tcp_info: on a listening socket, tcpi_unacked is the accept queue's length.
_TCPI_UNACKED_OFFSET: Final = 24
ACCEPT_QUEUE_WAIT_SECONDS: Final = 1.0
# How long the accept queue must stay empty before the listener closes: a handshake
# whose ACK is still on its way joins the queue within a round trip.
ACCEPT_QUEUE_QUIET_SECONDS: Final = 0.05


def refuse_new_connections(sock: Any) -> bool:
    """Drop every new connection's SYN a listening socket receives from now on (Linux):
    a client dialling it sees its SYN go unanswered, then, once the socket is closed, a
    clean "connection refused" on the retry, where closing a listener that is still
    receiving resets whatever the kernel had just queued. Handshakes already under way
    complete and are accepted. False where not supported."""
    program = ctypes.create_string_buffer(_DROP_NEW_SYNS)
    fprog = struct.pack("HL", _DROP_NEW_SYNS_LENGTH, ctypes.addressof(program))
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_ATTACH_FILTER, fprog)
    except (OSError, AttributeError):
        return False
    return True


def accept_queue_length(sock: Any) -> int:
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except (OSError, AttributeError):
        return 0
    return int(struct.unpack_from("I", info, _TCPI_UNACKED_OFFSET)[0])


async def stop_listening(listeners: list[Any]) -> None:
    """Take no new connections, and accept (the event loop still does) those the
    kernel has queued or is completing, until the accept queue has stayed empty for
    ``ACCEPT_QUEUE_QUIET_SECONDS``, for at most ``ACCEPT_QUEUE_WAIT_SECONDS``; the caller
    then closes the listeners. With several workers on one socket, each does it: the
    filter is the socket's, so the first stops new connections for all."""
    filtered = [sock for sock in listeners if refuse_new_connections(sock)]
    if not filtered:
        return
    deadline = time.monotonic() + ACCEPT_QUEUE_WAIT_SECONDS
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        now = time.monotonic()
        if any(accept_queue_length(s) for s in filtered):
            quiet_since = now
        elif now - quiet_since >= ACCEPT_QUEUE_QUIET_SECONDS:
            return
        await asyncio.sleep(0.005)


class DrainingServer(uvicorn.Server):
    """uvicorn's server with the SIGTERM drain described in the module docstring.
    ``connections`` (webhook_svc/http/serving.py) are the ones its protocol tracks."""

    def __init__(
        self, config: uvicorn.Config, drain_seconds: float, connections: Connections | None = None
    ) -> None:
        super().__init__(config)
        self.drain_seconds = drain_seconds
        self.drain_deadline: float | None = None
        self.connections = connections

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Runs in the main thread between two steps of the event loop.
        if sig == signal.SIGTERM and self.drain_deadline is None and self.drain_seconds > 0:
            self.drain_deadline = time.monotonic() + self.drain_seconds
            lifecycle = self.lifespan.state.get(LIFECYCLE_KEY) if self.started else None
            if isinstance(lifecycle, Lifecycle):
                lifecycle.draining = True
            log.info(
                "SIGTERM: readiness off, still serving while draining",
                extra={"drain_seconds": self.drain_seconds},
            )
            return
        super().handle_exit(sig, frame)

    async def on_tick(self, counter: int) -> bool:
        if self.drain_deadline is not None and time.monotonic() >= self.drain_deadline:
            if not self.should_exit:
                log.info("drain period over: finishing in-flight requests, then exiting")
            self.should_exit = True
        return await super().on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stop listening without resetting connections the kernel already queued
        (``stop_listening``), let connections accepted before that deliver the request
        they are sending (at most ``SETTLE_SECONDS``), then uvicorn's shutdown: close
        idle connections, finish in-flight requests, run the lifespan's end."""
        servers = getattr(self, "servers", [])
        listeners = [sock for server in servers for sock in server.sockets or ()]
        await stop_listening([*listeners, *(sockets or [])])
        for server in servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        if self.connections is not None and not self.force_exit:
            waiting = self.connections.unsettled()
            if waiting:
                log.info(
                    "listener closed: waiting for requests on their way",
                    extra={"connections": waiting},
                )
            await self.connections.settle()
        await super().shutdown(sockets)
