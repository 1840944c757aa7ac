"""A loopback TCP proxy that can hold back the upstream's answers: a slow API server.

Bytes from the client pass straight through; every chunk the upstream sends back is
forwarded ``delay`` seconds late (TLS passes through untouched, so the client still
verifies the real server's certificate). ``delay`` can change while running.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class DelayProxy:
    def __init__(self, upstream: tuple[str, int], delay: float = 0.0) -> None:
        self.upstream = upstream
        self.delay = delay
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []

    def serve(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket, delayed: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(65536):
                if delayed and self.delay:
                    time.sleep(self.delay)
                sink.sendall(chunk)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()


@contextmanager
def delay_proxy(upstream: tuple[str, int], delay: float = 0.0) -> Iterator[DelayProxy]:
    proxy = DelayProxy(upstream, delay)
    threading.Thread(target=proxy.serve, daemon=True).start()
    try:
        yield proxy
    finally:
        proxy.close()
