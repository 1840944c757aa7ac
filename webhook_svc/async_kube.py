"""GETs (and side-effect-free POSTs) to the API server on the webhook's event loop.

The Pod route lists CacheBackends live on every pod CREATE. Through the kubernetes
client (urllib3 and http.client on a worker thread) one LIST cost ~700 us of the
webhook's CPU and two thread hops; the compiled floor spends less on its whole request
(issue 12 profile, docs/performance.md). This client speaks HTTP/1.1 keep-alive over
asyncio (uvloop where uvicorn installed it) and parses answers with httptools (already
uvicorn's parser), so a LIST is one write, one read and a C parse, with no thread.

It takes everything from the kubernetes client's configuration, as the generated client
would: host, CA, client certificate, ``verify_ssl``, ``tls_server_name``, and the
Authorization header from ``update_params_for_auth`` on every request (so a rotated
ServiceAccount token or an exec plugin's refreshed token is picked up the same way).
A configuration this client cannot honour (an HTTP proxy, an ``assert_hostname`` naming
a host) is refused at construction
(``UnsupportedConfigError``) and the webhook keeps the threaded client.

Connections are pooled (idle ones kept up to ``max_idle``); a request that fails on a
reused connection before any answer arrived (the server closed an idle connection)
is retried once on a new one; any other failure, and cancellation by the caller's
deadline, closes the connection it was using.
"""

from __future__ import annotations

import asyncio
import os
import ssl
from typing import Any, Final
from urllib.parse import urlsplit

import httptools

USER_AGENT: Final = "inference-cache-webhook"
# Answers worth waiting out when they say how long (Retry-After), and how many times.
RETRY_AFTER_STATUSES: Final = frozenset({429, 503})
MAX_RETRY_AFTER_ATTEMPTS: Final = 5


class UnsupportedConfigError(Exception):
    """A client configuration this reader cannot honour: use the threaded client."""


class ConnectionDroppedError(ConnectionError):
    """The connection closed before a whole answer arrived."""

    def __init__(self, answered: bool) -> None:
        super().__init__("the API server closed the connection")
        self.answered = answered  # some of the answer had arrived: never retried


def ssl_context_for(configuration: Any) -> ssl.SSLContext:
    """The TLS settings the kubernetes client's urllib3 pool would use."""
    context = ssl.create_default_context(
        cafile=configuration.ssl_ca_cert or None,
        cadata=configuration.ca_cert_data or None,
    )
    if not configuration.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    elif configuration.assert_hostname is False:
        context.check_hostname = False  # a name in assert_hostname: see AsyncKubeReader
    if configuration.cert_file:
        context.load_cert_chain(configuration.cert_file, configuration.key_file or None)
    return context


def _stamp(paths: list[str]) -> tuple[tuple[str, int], ...]:
    """(path, mtime) of each file; -1 for one that cannot be read right now."""
    stamps = []
    for path in paths:
        try:
            stamps.append((path, os.stat(path).st_mtime_ns))
        except OSError:
            stamps.append((path, -1))
    return tuple(stamps)


class _Answer(asyncio.Protocol):
    """One keep-alive connection; one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.waiter: asyncio.Future[tuple[int, bytes, bool]] | None = None
        self.body: list[bytes] = []
        self.retry_after: float | None = None
        self.started = False
        self.closed = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.started = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(ConnectionError(f"unparseable answer from the API server: {exc}"))

    def connection_lost(self, _exc: Exception | None) -> None:
        self.closed = True
        self._fail(ConnectionDroppedError(self.started))

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"retry-after":
            self.retry_after = float(value) if value.strip().isdigit() else None

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            status = self.parser.get_status_code()
            body = b"".join(self.body)
            waiter.set_result((status, body, self.parser.should_keep_alive()))

    def _fail(self, exc: Exception) -> None:
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        if self.transport is not None:
            self.transport.close()

    async def request(self, data: bytes) -> tuple[int, bytes, bool]:
        assert self.transport is not None
        self.body, self.started, self.retry_after = [], False, None
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(data)
        return await self.waiter

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class AsyncKubeReader:
    """GET requests to the API server the ``api_client`` (kubernetes.client.ApiClient)
    is configured for. Create and use it on one event loop."""

    def __init__(self, api_client: Any, max_idle: int = 8) -> None:
        configuration = api_client.configuration
        if configuration.proxy:
            raise UnsupportedConfigError("an HTTP proxy is configured")
        if isinstance(configuration.assert_hostname, str):
            # urllib3 checks the certificate against that name; left to the threaded client.
            raise UnsupportedConfigError("assert_hostname names a host")
        url = urlsplit(str(configuration.host))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise UnsupportedConfigError(f"API server URL {configuration.host!r}")
        self._client = api_client
        self._address = (url.hostname, url.port or (443 if url.scheme == "https" else 80))
        self._prefix = url.path.rstrip("/")
        # Like urllib3, which reads these files for every new connection, a rotated CA or
        # client certificate is used from the next connection on (checked on connect).
        self._tls_files = [
            str(path)
            for path in (configuration.ssl_ca_cert, configuration.cert_file, configuration.key_file)
            if path
        ]
        self._tls_stamp = _stamp(self._tls_files)
        self._ssl = ssl_context_for(configuration) if url.scheme == "https" else None
        self._server_hostname = (
            (configuration.tls_server_name or url.hostname) if self._ssl else None
        )
        netloc = url.netloc.rsplit("@", 1)[-1]
        if not netloc.isascii():
            raise UnsupportedConfigError(f"API server host {netloc!r} is not ASCII")
        self._host_header = netloc.encode("ascii")
        self._idle: list[_Answer] = []
        self._max_idle = max_idle

    def _request_bytes(self, method: str, path: str, body: bytes | None = None) -> bytes:
        headers: dict[str, str] = {
            "Accept": "application/json",
            **self._client.default_headers,
            # Ours replaces the client's default (one User-Agent field: RFC 9110 5.3).
            "User-Agent": USER_AGENT,
        }
        if body is not None:
            headers["Content-Type"] = "application/json"
            headers["Content-Length"] = str(len(body))
        # The client's own hook: bearer token (refreshed from the mounted file or exec
        # plugin), exactly as the generated methods and webhook_svc/kube_raw.py send it.
        self._client.update_params_for_auth(headers, [], ["BearerToken"], path, method, None)
        lines = [
            method.encode("ascii") + b" " + (self._prefix + path).encode("ascii") + b" HTTP/1.1",
            b"Host: " + self._host_header,
        ]
        lines += [f"{name}: {value}".encode("latin-1") for name, value in headers.items()]
        return b"\r\n".join(lines) + b"\r\n\r\n" + (body or b"")

    async def _connect(self) -> _Answer:
        if self._ssl is not None:
            stamp = _stamp(self._tls_files)
            if stamp != self._tls_stamp:
                try:
                    self._ssl = ssl_context_for(self._client.configuration)
                except (OSError, ValueError):  # ssl.SSLError is an OSError
                    pass  # half-written: keep the current one, look again next connect
                else:
                    self._tls_stamp = stamp
        loop = asyncio.get_running_loop()
        _, protocol = await loop.create_connection(
            _Answer,
            *self._address,
            ssl=self._ssl,
            server_hostname=self._server_hostname,
        )
        return protocol

    async def get(self, path: str, deadline: float | None = None) -> tuple[int, bytes]:
        """(HTTP status, body). Raises on connection errors; the caller bounds the wait.

        With ``deadline`` (event-loop time), an answer 429 or 503 with a Retry-After that
        still fits before it is waited out and the request sent again, as client-go
        does: a restarted API server answers "storage is (re)initializing" for a moment
        after it reports ready, and a pod admitted then would stay unwired."""
        return await self._retrying(self._request_bytes("GET", path), deadline)

    async def post(
        self, path: str, body: bytes, deadline: float | None = None
    ) -> tuple[int, bytes]:
        """``get`` for a POST of a JSON ``body``. Only for requests that change nothing
        (a SubjectAccessReview): like a GET it is sent again on a new connection when a
        reused one turns out closed before any answer arrived, or after a Retry-After."""
        return await self._retrying(self._request_bytes("POST", path, body), deadline)

    async def _retrying(self, data: bytes, deadline: float | None) -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        for _ in range(MAX_RETRY_AFTER_ATTEMPTS):
            status, body, retry_after = await self._send(data)
            if (
                status not in RETRY_AFTER_STATUSES
                or retry_after is None
                or deadline is None
                or loop.time() + retry_after >= deadline
            ):
                break
            await asyncio.sleep(retry_after)
        return status, body

    async def _send(self, data: bytes) -> tuple[int, bytes, float | None]:
        while self._idle:
            conn = self._idle.pop()
            if conn.closed:
                continue
            try:
                return self._keep(conn, await conn.request(data))
            except ConnectionDroppedError as exc:
                if exc.answered:
                    raise
                # An idle connection the server had closed: try the next one.
            except BaseException:
                conn.close()
                raise
        conn = await self._connect()
        try:
            return self._keep(conn, await conn.request(data))
        except BaseException:
            conn.close()
            raise

    def _keep(
        self, conn: _Answer, answer: tuple[int, bytes, bool]
    ) -> tuple[int, bytes, float | None]:
        status, body, keep_alive = answer
        retry_after = conn.retry_after
        if keep_alive and not conn.closed and len(self._idle) < self._max_idle:
            self._idle.append(conn)
        else:
            conn.close()
        return status, body, retry_after

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()
