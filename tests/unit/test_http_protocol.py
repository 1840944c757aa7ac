"""Issue 12: one transport write per response (webhook_svc/http_protocol.py).

``CoalescingTransport`` hands every write made during one event-loop turn to the real
transport as one write at the end of that turn; ``close`` writes what is pending first,
``abort`` drops it, nothing is written once the real transport is closing, and
everything else is the real transport's. ``OneWritePerResponse`` is uvicorn's httptools
protocol on top of it: a real uvicorn server must still answer completely, keep
connections alive, and close after the whole body when the answer says so.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import pytest
import uvicorn
import uvloop
from starlette.types import Receive, Scope, Send

from tests.harness.controlplane import wait_until
from webhook_svc.http_protocol import CoalescingTransport, OneWritePerResponse

Run = Callable[[Coroutine[Any, Any, None]], None]


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Run:
    """Both event loops: uvicorn runs on uvloop in production, asyncio's is the fallback."""
    return asyncio.run if request.param == "asyncio" else uvloop.run


async def next_turn() -> None:
    """Resume after every callback already scheduled with ``call_soon`` has run (FIFO)."""
    loop = asyncio.get_running_loop()
    done = loop.create_future()
    loop.call_soon(done.set_result, None)
    await done


class RecordingTransport(asyncio.Transport):
    """The real transport's side of the proxy: what reached it, in order."""

    def __init__(self, buffered: int = 0) -> None:
        super().__init__({"peername": ("192.0.2.1", 4242)})
        self.events: list[tuple[str, bytes]] = []
        self.closing = False
        self.buffered = buffered

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.events.append(("write", bytes(data)))

    def close(self) -> None:
        self.events.append(("close", b""))
        self.closing = True

    def abort(self) -> None:
        self.events.append(("abort", b""))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def pause_reading(self) -> None:
        self.events.append(("pause_reading", b""))


def proxy_for(real: RecordingTransport) -> CoalescingTransport:
    return CoalescingTransport(real, asyncio.get_running_loop())


def test_writes_in_one_turn_reach_the_transport_as_one_write(run: Run) -> None:
    """Rule: writes made during one loop turn become one write, at the end of the turn."""

    async def scenario() -> None:
        real = RecordingTransport()
        proxy = proxy_for(real)
        proxy.write(b"HTTP/1.1 200 OK\r\n\r\n")
        proxy.write(memoryview(b"{}"))
        proxy.writelines([b"a", bytearray(b"b")])
        assert real.events == []  # nothing before the turn ends
        await next_turn()
        assert real.events == [("write", b"HTTP/1.1 200 OK\r\n\r\n{}ab")]

    run(scenario())


def test_writes_in_separate_turns_stay_separate(run: Run) -> None:
    """Rule: coalescing spans one turn only; a later write is not held back."""

    async def scenario() -> None:
        real = RecordingTransport()
        proxy = proxy_for(real)
        proxy.write(b"one")
        await next_turn()
        proxy.write(b"two")
        await next_turn()
        assert real.events == [("write", b"one"), ("write", b"two")]

    run(scenario())


def test_close_writes_what_is_pending_then_closes(run: Run) -> None:
    """Rule: ``close`` flushes the pending bytes first (the last answer is not lost)."""

    async def scenario() -> None:
        real = RecordingTransport()
        proxy = proxy_for(real)
        proxy.write(b"head")
        proxy.write(b"body")
        proxy.close()
        assert real.events == [("write", b"headbody"), ("close", b"")]
        await next_turn()  # the flush scheduled for this turn finds nothing left
        assert real.events == [("write", b"headbody"), ("close", b"")]
        assert proxy.is_closing()

    run(scenario())


def test_abort_drops_what_is_pending(run: Run) -> None:
    """Rule: ``abort`` discards the pending bytes and aborts the real transport."""

    async def scenario() -> None:
        real = RecordingTransport()
        proxy = proxy_for(real)
        proxy.write(b"never sent")
        proxy.abort()
        assert proxy.get_write_buffer_size() == 0
        await next_turn()
        assert real.events == [("abort", b"")]

    run(scenario())


def test_nothing_is_written_once_the_real_transport_is_closing(run: Run) -> None:
    """Rule: bytes pending when the real transport starts closing (the peer went away)
    are dropped, and so are later writes."""

    async def scenario() -> None:
        real = RecordingTransport()
        proxy = proxy_for(real)
        proxy.write(b"pending")
        real.closing = True
        await next_turn()
        proxy.write(b"after")
        await next_turn()
        proxy.close()
        assert real.events == [("close", b"")]

    run(scenario())


def test_buffer_size_counts_pending_bytes_and_other_calls_delegate(run: Run) -> None:
    """Rule: ``get_write_buffer_size`` is the real buffer plus what waits for the turn's
    end; every other attribute is the real transport's."""

    async def scenario() -> None:
        real = RecordingTransport(buffered=100)
        proxy = proxy_for(real)
        assert proxy.get_write_buffer_size() == 100
        proxy.write(b"12345")
        proxy.write(b"678")
        assert proxy.get_write_buffer_size() == 108
        await next_turn()
        assert proxy.get_write_buffer_size() == 100  # the fake keeps its own count
        assert proxy.get_extra_info("peername") == ("192.0.2.1", 4242)
        proxy.pause_reading()
        assert real.events[-1] == ("pause_reading", b"")

    run(scenario())


# --------------------------------------------------------------------------- a real uvicorn

BIG = bytes(range(256)) * 16 * 1024  # 4 MiB: far more than one socket buffer


async def tiny_app(scope: Scope, receive: Receive, send: Send) -> None:
    """``/close`` and ``/big`` answer with ``connection: close``; ``/big`` is 4 MiB."""
    assert scope["type"] == "http"
    while (await receive()).get("more_body"):
        pass
    path = scope["path"]
    body = BIG if path == "/big" else f"hello {path}".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", b"%d" % len(body))]
    if path in ("/close", "/big"):
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class WriteLog:
    """Sits between the coalescing proxy and the socket's transport: records each write
    that reaches the socket (per connection), passes everything through."""

    def __init__(self, transport: asyncio.Transport, writes: list[bytes]) -> None:
        self._transport = transport
        self.writes = writes

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))
        self._transport.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


@dataclass
class Served:
    port: int
    writes: list[list[bytes]] = field(default_factory=list)  # one list per connection

    def connect(self) -> tuple[socket.socket, BinaryIO]:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        return sock, sock.makefile("rb")


@pytest.fixture
def served() -> Iterator[Served]:
    """uvicorn with ``OneWritePerResponse`` on uvloop, in a thread of its own."""
    connections: list[list[bytes]] = []

    class Logged(OneWritePerResponse):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            connections.append([])
            super().connection_made(WriteLog(transport, connections[-1]))  # type: ignore[arg-type]

    config = uvicorn.Config(
        tiny_app,
        host="127.0.0.1",
        port=0,
        http=Logged,
        lifespan="off",
        log_config=None,
        access_log=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: uvloop.run(server.serve()), daemon=True)
    thread.start()
    try:
        wait_until(
            lambda: server.started,
            timeout=10,
            interval=0.01,
            description="uvicorn to start",
            abort=lambda: None if thread.is_alive() else "the server thread ended",
        )
        port = server.servers[0].sockets[0].getsockname()[1]
        yield Served(port, connections)
    finally:
        server.should_exit = True
        thread.join(10)
    assert not thread.is_alive()


def get(sock: socket.socket, path: str) -> None:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())


def read_response(stream: BinaryIO) -> tuple[bytes, dict[bytes, bytes], bytes]:
    """(status line, headers, body) of one Content-Length framed answer."""
    status = stream.readline()
    headers: dict[bytes, bytes] = {}
    while (line := stream.readline()) not in (b"\r\n", b""):
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    body = stream.read(int(headers[b"content-length"]))
    return status, headers, body


def test_a_kept_alive_connection_gets_each_whole_answer_in_one_write(served: Served) -> None:
    """Rule: status line, headers and body arrive whole, the connection stays open for a
    second request, and each answer leaves the server as one socket write."""
    sock, stream = served.connect()
    with sock, stream:
        answers = []
        for path in ("/first", "/second"):
            get(sock, path)
            answers.append(read_response(stream))
    for (status, headers, body), path in zip(answers, ("/first", "/second"), strict=True):
        assert status == b"HTTP/1.1 200 OK\r\n"
        assert headers[b"content-type"] == b"text/plain"
        assert body == f"hello {path}".encode()
    (writes,) = served.writes  # one connection served both
    assert len(writes) == 2
    for write, path in zip(writes, ("/first", "/second"), strict=True):
        assert write.startswith(b"HTTP/1.1 200 OK\r\n")
        assert write.endswith(f"\r\n\r\nhello {path}".encode())


@pytest.mark.parametrize("path", ["/close", "/big"])
def test_connection_close_closes_after_the_whole_body(served: Served, path: str) -> None:
    """Rule: ``close`` writes what is pending first: an answer saying ``connection:
    close`` is delivered entirely (4 MiB too), then the socket is closed."""
    sock, stream = served.connect()
    with sock, stream:
        get(sock, path)
        status, headers, body = read_response(stream)
        assert stream.read(1) == b""  # EOF, not a timeout
    assert status == b"HTTP/1.1 200 OK\r\n"
    assert headers[b"connection"] == b"close"
    assert body == (BIG if path == "/big" else b"hello /close")


def test_uvicorns_own_400_is_written_before_the_close(served: Served) -> None:
    """Rule: uvicorn writes its 400 for an unparseable request and closes in the same
    turn; the proxy's ``close`` must still send it."""
    sock, stream = served.connect()
    with sock, stream:
        sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
        status, _, body = read_response(stream)
        assert stream.read(1) == b""
    assert status.startswith(b"HTTP/1.1 400 ")
    assert b"Invalid HTTP request" in body
