"""uvicorn's httptools protocol, with each response written to the socket in one piece.

uvicorn writes a response's status line and headers when the app sends
``http.response.start`` and the body when it sends ``http.response.body``: two
transport writes, so over TLS two records, two encryptions and two ``send`` calls per
answer, and two reads on the caller's side. Those writes were the webhook's largest
single cost after judging itself (issue 12 profile, docs/performance.md). Here the
protocol's transport gathers every write made during one turn of the event loop and
hands them to the real transport as one, at the end of that turn (``call_soon``):
the admission routes send both messages in the same turn, so one record per answer.
``close`` writes what is pending first; everything else the protocol asks of the
transport goes to the real one. One difference: the real transport sees a write one
turn later, so uvicorn's write back-pressure engages one turn late. Every answer here
is a single body of at most a few hundred KiB, so nothing piles up; a streaming
response that wrote many chunks without yielding would hold them until the turn ends.
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class CoalescingTransport:
    """A transport proxy: writes made in the same loop turn reach ``transport`` as one."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
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
        return self._transport.get_write_buffer_size() + waiting

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending = None
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        # Everything else (get_extra_info, is_closing, pause/resume_reading, ...).
        return getattr(self._transport, name)


class OneWritePerResponse(HttpToolsProtocol):
    """``uvicorn.Config(http=OneWritePerResponse)``."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        proxy: Any = CoalescingTransport(cast(asyncio.Transport, transport), self.loop)
        super().connection_made(proxy)
