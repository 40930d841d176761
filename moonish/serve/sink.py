"""Writing a streaming response's bytes straight to its socket, from the ring's append.

A ``continuous`` or ``eventsource`` feed that is in step with the ring, at its end, and takes
every change (no filter, limit or markers) does not need its task woken for each chunk: the
ring writes the chunk's shared framed bytes to the feed's transport as it appends it
(moonish.serve.ring, "riders"), and the task sleeps until a heartbeat, a timeout, a full
socket or an error. Waking a task and passing the bytes through aiohttp's writer costs more
than the write itself, and that cost is paid once per subscriber per chunk (docs/server.md,
"Fan-out"; docs/benchmarks.md §9 measures the server).

The bytes are framed as aiohttp frames them (HTTP/1.1 chunked transfer coding, RFC 9112
section 7.1, when the response is chunked; as they are otherwise). The response's headers
were sent when it was prepared (aiohttp sends a :class:`~aiohttp.web.StreamResponse`'s
headers at once), so nothing of aiohttp's is buffered ahead of these bytes.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from moonish.metrics.families import SERVE_SENT_BYTES

BIG_BYTES = 256 * 1024
"""From this size a write goes to the socket in three parts (chunk header, the bytes, the
chunk's end) instead of being copied into one."""


class Sink:
    """Direct writes to one prepared streaming response.

    Args:
        request: the request (its transport and protocol).
        response: the prepared response (whether it is chunked).
    """

    __slots__ = ("_chunked", "_protocol", "_transport", "_writer")

    def __init__(self, request: web.Request, response: web.StreamResponse) -> None:
        self._transport: asyncio.Transport | None = request.transport
        self._protocol = request.protocol
        self._writer = request.writer
        self._chunked = response.chunked

    @property
    def writable(self) -> bool:
        """The socket is open and its send buffer below the transport's high-water mark."""
        transport = self._transport
        return (
            transport is not None
            and not transport.is_closing()
            and not self._protocol.writing_paused
        )

    def write(self, data: bytes) -> bool:
        """Write ``data`` (one framed run of changes) now; False when the socket is closed
        or its buffer is over the high-water mark (the caller stops writing and lets the
        feed's task wait for it to drain)."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        if not self._chunked:
            transport.write(data)
        elif len(data) < BIG_BYTES:
            transport.write(b"%x\r\n%b\r\n" % (len(data), data))
        else:  # the socket takes it from ``data`` itself: no copy in Python
            transport.write(b"%x\r\n" % len(data))
            transport.write(data)
            transport.write(b"\r\n")
        SERVE_SENT_BYTES.inc(len(data))
        return not self._protocol.writing_paused

    async def send(self, data: bytes) -> None:
        """Write ``data`` and wait while the socket's buffer is over its high-water mark.

        Raises:
            ConnectionResetError: the socket is closed (the client went away).
        """
        if not self.write(data):
            if self._transport is None or self._transport.is_closing():
                raise ConnectionResetError("the client closed the connection")
            await self._writer.drain()
