"""One subscriber's position in the change stream: on the shared ring, or reading the log.

A :class:`Subscription` starts at a token. It joins the ring (moonish.serve.ring) where the
ring's position is at or before the token in every shard, passes over what the token
already covers, and from then on writes the ring's framed bytes as they are (*in step*:
its token is the ring's). When it falls behind the ring's start (its client did not drain
its socket, or it started further back) it reads the log on its own with a
:class:`~moonish.cdc.merged_read.MergedTail` from its token (*resync*), then rejoins the
ring. So a slow subscriber never holds the ring or anyone else back, and what it receives
is the same: every change after its start token once, each shard in LSN order, atomic
batches whole unless a WebSocket credit cuts one, each with the token after it (resuming
from any of them gives exactly the rest).

Filters pass over changes but still move the token (:attr:`Delivery.moved`).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from typing import Protocol

from moonish.cdc.merged import Resolved
from moonish.cdc.token import VERSION, Token, component
from moonish.datadir import consumers
from moonish.datadir.consumers import Consumer
from moonish.errors import (
    ConsumerLostError,
    MoonishError,
    PositionNotRetainedError,
    UnavailableError,
)
from moonish.serve.chunks import Chunk, Filter, Framing
from moonish.serve.resync import LogReader
from moonish.serve.ring import Ring, covers
from moonish.serve.sink import Sink
from moonish.serve.timer import Handle, Timer


class Hub(Protocol):
    """What a subscription needs of the server."""

    data_dir: str
    ring: Ring
    timer: Timer
    stopping: bool
    resyncs: int
    batch_bytes: int
    messages: bool
    """Whether feeds carry checkpoints and message records (``ServeOptions.messages``)."""


@dataclass(frozen=True, slots=True)
class Delivery:
    """What to write next.

    Attributes:
        data: the framed bytes (empty when only the token moved).
        rows: changes in ``data``.
        token: the position after it.
        moved: the token moved past changes not in ``data`` (a filter passed over them), so
            the client has not been shown ``token``.
    """

    data: bytes
    rows: int
    token: Token
    moved: bool


class Subscription:
    """A subscriber's cursor (see the module docstring).

    Args:
        hub: the server (ring, timer, data directory).
        start: the token to start after.
        framing: how changes are written (moonish.serve.chunks.ROWS or SSE).
        where: which changes to deliver; the others move the token only.
        resolved_ms: deliver resolved markers at most this often (ms), or ``None``.
        consumer: the named consumer the feed reads as (its errors name it), or ``None``.
        sink: the feed's socket, for the ring to write to while this subscription waits at
            its end taking every change (moonish.serve.sink); ``None``: always woken.

    Attributes:
        carried_ms: timer ms when the ring last wrote to the sink (``-inf``: never).
    """

    def __init__(
        self,
        hub: Hub,
        start: Token,
        framing: Framing,
        where: Filter,
        resolved_ms: int | None = None,
        consumer: Consumer | None = None,
        sink: Sink | None = None,
    ) -> None:
        self.hub, self.token, self.framing, self.where = hub, start, framing, where
        self.resolved_ms = resolved_ms
        self._consumer = consumer
        self._chunk: Chunk | None = None  # the current chunk (the ring's, or the log's)
        self._offset = 0
        self._on_ring = False
        self._in_step = False  # the token is the ring's at the cursor: shared bytes serve
        self._log: LogReader | None = None
        self._marked_at = -1e18  # timer ms of the last marker
        self._marked_us = -1  # its watermark
        self._marker_done: Chunk | None = None  # the last chunk whose marker was looked at
        self._met_error: MoonishError | None = None  # the ring's error this one read up to
        self._event = asyncio.Event()  # set by the ring (an append) or the alarm
        self._alarm: Handle | None = None
        self._alarm_at: float | None = None
        self._sink = sink if where.everything and resolved_ms is None else None
        self._unlimited = False  # the current next() call takes any number of rows
        self.carried_ms = float("-inf")

    @property
    def resyncing(self) -> bool:
        """Whether it reads the log on its own (it fell behind the ring)."""
        return self._log is not None

    async def close(self) -> None:
        """Release the log reader, if any, and the alarm. Idempotent."""
        if self._alarm is not None:
            self._alarm.cancel()
            self._alarm = self._alarm_at = None
        if self._log is not None:
            log, self._log = self._log, None
            await log.close()

    async def next(
        self, max_rows: int | None, whole_batches: bool, until_ms: float | None
    ) -> Delivery | None:
        """The next delivery: up to ``max_rows`` changes (``None``: no limit; with
        ``whole_batches`` the last atomic batch is completed past it) and markers, at most
        about ``batch_bytes``; waits until ``until_ms`` (timer ms; ``None``: forever) for
        some. A delivery may hold no change when the token moved past filtered ones.

        Returns:
            the delivery, or ``None`` at ``until_ms`` with nothing new.

        Raises:
            PositionNotRetainedError, ConsumerLostError: the log no longer holds what
                this subscriber needs next (it fell behind, and retention removed it).
            CorruptionError: damage where it reads.
            UnavailableError: the server is stopping.
        """
        self._unlimited = max_rows is None
        while True:
            if self.hub.stopping:
                raise UnavailableError("the server is stopping; reconnect to resume")
            if self._log is not None:
                got = await self._from_log(max_rows, whole_batches)
                if got is not None:
                    return got
                continue  # the log read ended: try the ring again
            if not self._on_ring and not self._join():
                await self._open_log()
                continue
            if not self._forward():
                self._on_ring = False
                await self._open_log()  # fell behind the ring
                continue
            if (self._chunk is not None and self._offset < len(self._chunk)) or self._marker_here():
                delivery = self._take(max_rows, whole_batches, from_ring=True)
                if delivery is not None:
                    return delivery
                continue
            error = self.hub.ring.error
            if error is not None and error is not self._met_error:
                self._met_error = error  # the shared reader met damage: meet it too, once
                self._on_ring = False
                await self._open_log()
                continue
            if not await self._wait(until_ms):
                return None

    # -- the ring ---------------------------------------------------------------------------

    def _join(self) -> bool:
        found = self.hub.ring.locate(self.token)
        if found is None:
            return False
        self._chunk, self._offset = found
        ring_token = (
            self.hub.ring.token if self._chunk is None else self._chunk.token_at(self._offset)
        )
        self._in_step = ring_token == self.token
        self._on_ring = True
        return True

    def _forward(self) -> bool:
        """Move the cursor past finished chunks; False when it fell behind the ring."""
        ring = self.hub.ring
        if self._chunk is None:
            if not ring.chunks:
                return True
            first = ring.chunks[0]
            if first.evicted or ring.first > first.index:
                return False
            self._chunk, self._offset = first, 0  # the ring was empty when it joined
        chunk = self._chunk
        while self._offset >= len(chunk) and not self._marker_here():
            if chunk.evicted:
                return False
            if chunk.next is None:
                return True
            chunk, self._offset = chunk.next, 0
            self._chunk = chunk
        return not chunk.evicted

    def _marker_here(self) -> bool:
        """A marker at the end of the current chunk is still to be looked at."""
        chunk = self._chunk
        return (
            chunk is not None
            and self._offset == len(chunk)
            and chunk.resolved is not None
            and self.resolved_ms is not None
            and chunk is not self._marker_done
        )

    async def _wait(self, until_ms: float | None) -> bool:
        """Wait for the ring to grow; False at ``until_ms``. The alarm for ``until_ms`` is
        kept across waits (a feed's deadline changes once per heartbeat, not per write)."""
        timer = self.hub.timer
        if until_ms is not None and timer.now_ms() >= until_ms:
            return False
        event = self._event
        event.clear()
        ring = self.hub.ring
        riding = self._can_ride()
        if riding:
            ring.ride(self)
        else:
            ring.wait(event)
        if until_ms != self._alarm_at:
            if self._alarm is not None:
                self._alarm.cancel()
            self._alarm, self._alarm_at = None, until_ms
            if until_ms is not None:
                self._alarm = timer.call_at(until_ms, self._ring_alarm)
        try:
            await event.wait()
        finally:
            if riding:
                ring.unride(self)
            else:
                ring.unwait(event)
        return until_ms is None or timer.now_ms() < until_ms or self._ready()

    def _can_ride(self) -> bool:
        """Whether the ring can write to this subscription's sink while it waits: it takes
        every change, is in step with the ring at its end, and its socket has room."""
        sink, chunk, chunks = self._sink, self._chunk, self.hub.ring.chunks
        return (
            sink is not None
            and self._unlimited
            and self._in_step
            and self._on_ring
            and chunk is not None
            and bool(chunks)
            and chunk is chunks[-1]
            and self._offset == len(chunk)
            and not self._marker_here()
            and sink.writable
        )

    def carry(self, chunk: Chunk) -> bool:
        """The ring appended ``chunk`` right after this rider's position: write it to the
        sink and move past it (moonish.serve.ring.Rider)."""
        self._chunk, self._offset = chunk, len(chunk)
        if not chunk.envelopes:
            return True  # (a marker chunk: riders take no markers)
        self.token = chunk.after
        self.carried_ms = self.hub.timer.now_ms()
        assert self._sink is not None
        return self._sink.write(chunk.blob(self.framing))

    def release(self) -> None:
        self._event.set()

    def _ring_alarm(self) -> None:
        self._alarm, self._alarm_at = None, None
        self._event.set()

    def _ready(self) -> bool:
        chunk = self._chunk
        return chunk is not None and (self._offset < len(chunk) or chunk.next is not None)

    # -- taking events ------------------------------------------------------------------------

    def _take(self, max_rows: int | None, whole: bool, from_ring: bool) -> Delivery | None:
        """Frame what the cursor can take now (several chunks on the ring, one from the log)."""
        parts: list[bytes] = []
        rows, size, moved = 0, 0, False
        budget = self.hub.batch_bytes
        fast = max_rows is None and self.where.everything and self.resolved_ms is None
        while self._chunk is not None:
            chunk, lo = self._chunk, self._offset
            left = None if max_rows is None else max_rows - rows
            if left is not None and left <= 0 and lo < len(chunk):
                break
            if lo < len(chunk):
                got, count, hi, chunk_moved = self._frame(chunk, lo, left, whole)
                parts += got
                rows += count
                size += sum(map(len, got))
                self._offset = hi
                if count:
                    moved = chunk_moved
                elif hi > lo:
                    moved = moved or chunk_moved
            if self._offset == len(chunk):
                marker = self._due_marker(chunk)
                if marker is not None:
                    parts.append(self.framing.marker(marker))
                    moved = False
            if not from_ring or self._offset < len(chunk) or size >= budget:
                break
            if fast and self._in_step:
                rows += self._whole_chunks(parts, budget - size)
                break
            nxt = chunk.next
            if nxt is None or chunk.evicted:
                break
            self._chunk, self._offset = nxt, 0
        if not parts and not moved:
            return None
        return Delivery(b"".join(parts), rows, self.token, moved)

    def _whole_chunks(self, parts: list[bytes], budget: int) -> int:
        """The fast path of a subscriber in step with the ring that takes everything: the
        shared blobs of the whole chunks after the cursor, up to about ``budget`` bytes.
        Returns the rows added."""
        chunk, framing = self._chunk, self.framing
        if chunk is None or self._offset < len(chunk):
            return 0
        rows = 0
        while budget > 0 and not chunk.evicted and (nxt := chunk.next) is not None:
            blob = nxt.blob(framing)
            parts.append(blob)
            rows += len(nxt.envelopes)
            budget -= len(blob)
            chunk = nxt
        if rows or chunk is not self._chunk:
            self._chunk, self._offset, self.token = chunk, len(chunk), chunk.after
        return rows

    def _frame(
        self, chunk: Chunk, lo: int, left: int | None, whole: bool
    ) -> tuple[list[bytes], int, int, bool]:
        """Frame events ``[lo, hi)`` of ``chunk``: ``(parts, rows, hi, moved)``; moves the
        token to the one after ``hi``."""
        where, n = self.where, len(chunk)
        keep = None if where.everything else where.select(chunk.frames, chunk.ops, lo, n)
        hi = n
        if left is not None:
            if keep is None:
                hi = min(n, lo + left)
            elif len(keep) > left:
                hi = keep[left - 1] + 1 if left else lo
            if whole and hi < n:
                hi = chunk.batch_end(hi)
            if keep is not None:
                keep = [i for i in keep if i < hi]
        if self._in_step:
            if keep is None:
                parts = [chunk.framed(self.framing, lo, hi)] if hi > lo else []
                count = hi - lo
            else:
                parts = chunk.framed_each(self.framing, keep)
                count = len(keep)
            self.token = chunk.token_at(hi)
            moved = hi > lo and (count == 0 or (keep is not None and keep[-1] != hi - 1))
            return parts, count, hi, moved
        return self._frame_own(chunk, lo, hi, keep)

    def _frame_own(
        self, chunk: Chunk, lo: int, hi: int, keep: list[int] | None
    ) -> tuple[list[bytes], int, int, bool]:
        """Events ``[lo, hi)`` framed with this subscriber's own tokens, passing over those
        its token already covers (it joined the ring at a position before its token)."""
        positions = list(self.token.positions)
        parts_text = [component(p) for p in positions]
        prefix = f"{VERSION}{len(positions)}."
        wanted = None if keep is None else set(keep)
        out: list[bytes] = []
        moved = False
        for i in range(lo, hi):
            k, lsn = chunk.indexes[i], chunk.frames[i].lsn
            if lsn <= positions[k]:
                continue  # delivered before it joined
            positions[k] = lsn
            parts_text[k] = component(lsn)
            if wanted is not None and i not in wanted:
                moved = True
                continue
            moved = False
            seq = (prefix + ".".join(parts_text)).encode()
            out.append(self.framing.line(seq, chunk.envelopes[i]))
        self.token = Token(tuple(positions))
        if self._on_ring and self.token == chunk.token_at(hi):
            self._in_step = True
        return out, len(out), hi, moved

    def _due_marker(self, chunk: Chunk) -> Resolved | None:
        """The marker at the end of ``chunk`` if one is due (each chunk's is looked at once)."""
        if chunk is self._marker_done:
            return None
        self._marker_done = chunk
        marker = chunk.resolved
        if marker is None or self.resolved_ms is None or marker.ts_us <= self._marked_us:
            return None
        now = self.hub.timer.now_ms()
        if now - self._marked_at < self.resolved_ms:
            return None
        if not covers(marker.token, self.token):
            return None  # (cannot happen: the marker comes after the chunk's events)
        self._marked_at, self._marked_us = now, marker.ts_us
        return Resolved(marker.ts_us, self.token)

    # -- the log ------------------------------------------------------------------------------

    async def _open_log(self) -> None:
        self.hub.resyncs += 1
        self._log = await LogReader.open(
            self.hub.data_dir,
            self.token,
            self.framing,
            self.resolved_ms,
            self.hub.messages,
        )
        self._chunk, self._offset, self._in_step = None, 0, True

    async def _from_log(self, max_rows: int | None, whole: bool) -> Delivery | None:
        """The next delivery read from the log; ``None`` once the log read ended (the
        subscription then tries the ring)."""
        while True:
            if self._chunk is not None and self._offset < len(self._chunk):
                delivery = self._take(max_rows, whole, from_ring=False)
                if delivery is not None:
                    return delivery
                continue
            log = self._log
            assert log is not None
            try:
                chunk = await log.next()
            except PositionNotRetainedError as error:
                await self.close()
                raise await self._as_consumer_error(error) from error
            except MoonishError:
                await self.close()
                raise
            if chunk is None:
                await self.close()
                self._chunk, self._offset = None, 0
                return None
            self._chunk, self._offset = chunk, 0
            if not chunk:
                self.token = chunk.after  # (past records a disabled stream skips)
                delivery = self._take(max_rows, whole, from_ring=False)
                if delivery is not None:
                    return delivery

    async def _as_consumer_error(self, error: PositionNotRetainedError) -> MoonishError:
        """A consumer's feed names the consumer (as ``cdc tail --consumer`` does)."""
        if self._consumer is None:
            return error
        root = os.fspath(self.hub.data_dir)
        try:
            current = await asyncio.to_thread(consumers.load, root, self._consumer.name)
        except MoonishError:
            current = self._consumer
        lost: ConsumerLostError = consumers.lost_error(
            root, current, error.shard, error.oldest_lsn, error.oldest_token
        )
        return lost
