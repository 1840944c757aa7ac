"""What webhook_svc/http/serving.py, lifecycle.py and admission_gate.py rely on in uvicorn.

serving.py holds uvicorn's httptools protocol (``HttpToolsProtocol``, not a public
API) and lifecycle.py overrides ``uvicorn.Server`` methods and reads its attributes.
pyproject.toml bounds uvicorn to the minor series these tests ran on; an upgrade
that changes any of this fails here, by name, instead of in a held connection.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
from typing import Any

import uvicorn
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http import flow_control
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from webhook_svc.http.admission_gate import SMALL_BODY_BYTES
from webhook_svc.http.lifecycle import DrainingServer
from webhook_svc.http.serving import CONNECTION_KEY, Connections, GuardedConnection, State

TESTED_SERIES = "0.54."


def test_uvicorn_is_the_tested_minor_series() -> None:
    """pyproject.toml's bound: move it, and this, only after this module passes."""
    assert uvicorn.__version__.startswith(TESTED_SERIES), uvicorn.__version__


def _parameters(fn: Any) -> list[str]:
    return list(inspect.signature(fn).parameters)


def test_the_httptools_protocol_takes_what_serving_passes() -> None:
    """GuardedConnection builds HttpToolsProtocol(config=, server_state=, app_state=,
    _loop=) and hands it every asyncio.Protocol event."""
    assert _parameters(HttpToolsProtocol.__init__) == [
        "self",
        "config",
        "server_state",
        "app_state",
        "_loop",
    ]
    for event in (
        "connection_made",
        "data_received",
        "eof_received",
        "connection_lost",
        "pause_writing",
        "resume_writing",
    ):
        assert callable(getattr(HttpToolsProtocol, event)), event


def test_the_server_builds_protocols_and_ssl_contexts_as_serve_configures_them() -> None:
    """webhook_cli.py gives uvicorn.Config a protocol class (``http=``) and a reloading SSL
    context (``ssl_context_factory=``, called with the config and uvicorn's default
    factory); uvicorn builds each connection's protocol with keyword arguments only."""
    config_parameters = _parameters(uvicorn.Config.__init__)
    for name in (
        "http",
        "ssl_context_factory",
        "limit_concurrency",
        "timeout_keep_alive",
        "timeout_graceful_shutdown",
        "lifespan",
        "proxy_headers",
        "server_header",
    ):
        assert name in config_parameters, name
    config = uvicorn.Config(_app, http=Connections().protocol_class())
    config.load()
    assert issubclass(config.http_protocol_class, GuardedConnection)
    startup = inspect.getsource(uvicorn.Server.startup)
    assert "config.http_protocol_class(" in startup
    assert "app_state=self.lifespan.state" in startup


def test_the_server_methods_and_attributes_the_drain_overrides() -> None:
    """DrainingServer overrides handle_exit(sig, frame), on_tick(counter) and
    shutdown(sockets); it reads started, should_exit, force_exit, servers and
    lifespan.state. main_loop must still call on_tick, and the signal capture
    handle_exit."""
    assert _parameters(uvicorn.Server.handle_exit) == ["self", "sig", "frame"]
    assert _parameters(uvicorn.Server.on_tick) == ["self", "counter"]
    assert _parameters(uvicorn.Server.shutdown) == ["self", "sockets"]
    assert inspect.iscoroutinefunction(uvicorn.Server.on_tick)
    assert inspect.iscoroutinefunction(uvicorn.Server.shutdown)
    assert "self.on_tick(" in inspect.getsource(uvicorn.Server.main_loop)
    assert "self.handle_exit" in inspect.getsource(uvicorn.Server.capture_signals)
    assert "self.servers" in inspect.getsource(uvicorn.Server.startup)
    config = uvicorn.Config(_app, lifespan="on")
    server = DrainingServer(config, drain_seconds=1)
    for name in ("started", "should_exit", "force_exit"):
        assert hasattr(server, name), name
    # set when serving starts, before any signal can arrive
    assert "self.lifespan = config.lifespan_class(config)" in inspect.getsource(uvicorn.Server)
    config.load()
    assert isinstance(config.lifespan_class(config).state, dict)
    server.handle_exit(signal.SIGTERM, None)  # the first SIGTERM only starts the drain
    assert server.drain_deadline is not None
    assert not server.should_exit


def test_the_body_buffered_per_connection_is_what_the_budget_leaves_uncharged() -> None:
    """admission_gate reads bodies up to SMALL_BODY_BYTES uncharged because uvicorn's
    protocol buffers that much per connection anyway before it stops reading."""
    assert flow_control.HIGH_WATER_LIMIT == SMALL_BODY_BYTES
    assert "HIGH_WATER_LIMIT" in inspect.getsource(HttpToolsProtocol.on_body)


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.written = b""
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8443)}.get(name, default)

    def pause_reading(self) -> None:
        """Ignored: the fake has no socket to stop reading from."""

    def resume_reading(self) -> None:
        """Ignored: the fake has no socket to resume reading from."""


seen: list[Scope] = []


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    seen.append(scope)
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_request_reaches_the_app_with_its_connection_in_the_scope_state() -> None:
    """The one behaviour serving.py builds on: uvicorn's protocol copies ``app_state``
    into every request's ``scope["state"]``, so the ASGI side finds its connection
    there, and the answer goes out through the transport serving.py hands it."""

    async def scenario() -> tuple[Scope, bytes, GuardedConnection]:
        seen.clear()
        config = uvicorn.Config(_app, http=Connections().protocol_class(), lifespan="off")
        config.load()
        protocol_class: Any = config.http_protocol_class
        conn = protocol_class(
            config=config, server_state=uvicorn.server.ServerState(), app_state={}
        )
        transport = _Transport()
        conn.connection_made(transport)
        assert conn.state is State.NEW
        conn.data_received(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        for _ in range(100):
            if transport.written:
                break
            await asyncio.sleep(0.01)
        conn.connection_lost(None)
        return seen[0], transport.written, conn

    scope, written, conn = asyncio.run(scenario())
    assert scope["state"][CONNECTION_KEY] is conn
    assert written.startswith(b"HTTP/1.1 200")
