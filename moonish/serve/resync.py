"""A subscriber's own reader of the log, for when it is behind the shared ring.

:class:`LogReader` wraps a :class:`~moonish.cdc.merged_read.MergedTail` (to the current end of
the log, not following) and turns each round into a :class:`~moonish.serve.chunks.Chunk`
framed for its subscriber, in a worker thread (reading files blocks). It reads one round
ahead: while the subscriber writes a chunk to its socket and waits for it to drain, the next
one is read and framed, so catching up from the log keeps the socket busy.
"""

from __future__ import annotations

import asyncio
import contextlib

from moonish.cdc.merged import Resolved
from moonish.cdc.merged_read import MergedTail
from moonish.cdc.token import Token
from moonish.gcpolicy import paused_gc
from moonish.serve.chunks import Chunk, Framing, chunk_of, marker_chunk


class LogReader:
    """Rounds of the log after ``start`` as chunks, one read ahead (make one with
    :meth:`open`).

    Args:
        tail: a merged reader positioned at ``start``, not following.
        start: the token it reads after.
        framing: the subscriber's framing (chunks are framed in the worker thread).
    """

    def __init__(self, tail: MergedTail, start: Token, framing: Framing) -> None:
        self._tail = tail
        self._items = tail.batches()
        self._before = start
        self._framing = framing
        self._ahead: asyncio.Future[Chunk | None] | None = None

    @classmethod
    async def open(
        cls,
        data_dir: str,
        start: Token,
        framing: Framing,
        resolved_ms: int | None,
        messages: bool = False,
    ) -> LogReader:
        """Open the reader (in a thread: it opens every shard's segment); ``resolved_ms``:
        resolved markers this often (empty chunks that carry them), or ``None``;
        ``messages``: checkpoints and message records too (``ServeOptions.messages``).

        Raises:
            InvalidArgumentError, PositionNotRetainedError: as
                :class:`~moonish.cdc.merged_read.MergedTail`.
        """
        tail = await asyncio.to_thread(
            MergedTail, data_dir, start, resolved_ms=resolved_ms, messages=messages
        )
        return cls(tail, start, framing)

    def _read(self) -> Chunk | None:
        item = next(self._items, None)
        if item is None:
            return None
        if isinstance(item, Resolved):
            return marker_chunk(self._before, item)
        with paused_gc():  # (tokens and framed bytes: no reference cycles)
            chunk = chunk_of(item, self._before)
            if len(chunk):
                chunk.blob(self._framing)
        self._before = item.token
        return chunk

    async def next(self) -> Chunk | None:
        """The next chunk (empty: a marker, or records a disabled stream skips, whose
        ``after`` moves the position); ``None`` at the end of the log.

        Raises:
            PositionNotRetainedError, CorruptionError: as the merged reader, once every
                chunk before the error was returned.
        """
        ahead = self._ahead or asyncio.ensure_future(asyncio.to_thread(self._read))
        self._ahead = None
        chunk = await ahead
        if chunk is not None:
            self._ahead = asyncio.ensure_future(asyncio.to_thread(self._read))
        return chunk

    async def close(self) -> None:
        """Wait for a read ahead to finish (it cannot be interrupted), then close. An error
        it met is dropped: nobody will read that far."""
        if self._ahead is not None:
            ahead, self._ahead = self._ahead, None
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await ahead
        await asyncio.to_thread(self._tail.close)
