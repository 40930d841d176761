"""The shared ring of recent chunks, and the one reader that fills it.

One :class:`Publisher` per server follows every shard of the data directory with a
:class:`~moonish.cdc.merged_read.MergedTail` (in a thread: reading files blocks) from the
position the server started at, and appends each round's events to the :class:`Ring` as a
:class:`~moonish.serve.chunks.Chunk`: read, decoded and encoded once for every subscriber.
What the ring holds is what readers of the log see: committed records only (whole atomic
batches whose every frame checks, docs/reading.md); the ring's end is the publisher's token.

The ring is bounded by bytes (``Limits.ring_bytes``): the oldest chunks leave it first,
whoever has not read them. A subscriber is a position in the ring, never a holder of it; one
that falls behind the ring's start reads the log on its own (moonish.serve.subscription) and
rejoins. So the server's memory is the ring plus, per subscriber, at most one batch in its
socket, whatever the subscribers do.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from typing import Protocol

from moonish.cdc.merged import Resolved
from moonish.cdc.merged_read import MergedTail
from moonish.cdc.token import Token
from moonish.errors import MoonishError
from moonish.gcpolicy import paused_gc
from moonish.serve.chunks import Chunk, chunk_of, marker_chunk

log = logging.getLogger("moonish.serve")
IN_FLIGHT = 64
"""Most chunks the publisher thread hands the event loop ahead of it appending them."""


def covers(low: Token, high: Token) -> bool:
    """Whether ``low`` is at or before ``high`` in every shard."""
    return all(a <= b for a, b in zip(low.positions, high.positions, strict=True))


class Rider(Protocol):
    """A subscriber the ring writes to as it appends (moonish.serve.sink): one in step with
    the ring, at its end, that takes every change."""

    def carry(self, chunk: Chunk) -> bool:
        """Take ``chunk``, just appended after the rider's position; False when the rider
        must leave (its socket is full or closed)."""
        ...

    def release(self) -> None:
        """Wake the rider's task: it is no longer carried."""
        ...


class Ring:
    """Recent chunks in stream order; positions are event numbers since the server started.

    Attributes:
        first: the position of the oldest event held; ``base`` is the token before it.
        end: the position after the newest event; ``token`` is the token there.
        error: what stopped the publisher (damage), until it reads on; ``None`` normally.
        carried: chunk writes the ring made to riders (subscribers it writes to itself).
    """

    def __init__(self, start: Token, max_bytes: int) -> None:
        self.chunks: deque[Chunk] = deque()
        self.first = self.end = 0
        self.base = self.token = start
        self.nbytes = 0
        self.max_bytes = max_bytes
        self.error: MoonishError | None = None
        self.resolved: Resolved | None = None  # the newest marker
        self._waiters: set[asyncio.Event] = set()
        self._riders: dict[Rider, None] = {}  # (ordered: written in the order they joined)
        self.carried = 0  # chunks the ring wrote to riders' sockets itself

    def append(self, chunk: Chunk) -> None:
        """Add a chunk at the end, drop the oldest while over the byte limit, write it to
        the riders, wake waiters."""
        chunk.index = self.end
        if self.chunks:
            self.chunks[-1].next = chunk
        self.chunks.append(chunk)
        self.end, self.token = chunk.end, chunk.after
        self.nbytes += chunk.nbytes
        self.error = None
        if chunk.resolved is not None:
            self.resolved = chunk.resolved
        self.trim()
        if self._riders:
            if chunk.envelopes:
                self.carried += len(self._riders)
            left = [rider for rider in self._riders if not rider.carry(chunk)]
            for rider in left:
                del self._riders[rider]
                rider.release()
        self.wake()

    def trim(self) -> None:
        """Drop the oldest chunks while the ring holds more than ``max_bytes``; the newest
        chunk always stays. A dropped chunk forgets its successor, so a subscriber that still
        holds it holds nothing else."""
        while self.nbytes > self.max_bytes and len(self.chunks) > 1:
            old = self.chunks.popleft()
            self.nbytes -= old.nbytes
            self.first, self.base = old.end, old.after
            old.next, old.evicted = None, True

    def fail(self, error: MoonishError) -> None:
        """The publisher stopped at damage: waiters at the end learn it."""
        self.error = error
        self.release_riders()
        self.wake()

    def wait(self, event: asyncio.Event) -> None:
        """Set ``event`` at the next append (or failure)."""
        self._waiters.add(event)

    def unwait(self, event: asyncio.Event) -> None:
        self._waiters.discard(event)

    def ride(self, rider: Rider) -> None:
        """Write each chunk appended from now on to ``rider`` (instead of waking it) until it
        leaves: :meth:`unride`, its socket fills, :meth:`release_riders`."""
        self._riders[rider] = None

    def unride(self, rider: Rider) -> None:
        self._riders.pop(rider, None)

    def release_riders(self) -> None:
        """Wake every rider's task (damage, the server stopping)."""
        riders, self._riders = self._riders, {}
        for rider in riders:
            rider.release()

    def wake(self) -> None:
        waiters, self._waiters = self._waiters, set()
        for event in waiters:
            event.set()

    def locate(self, token: Token) -> tuple[Chunk | None, int] | None:
        """Where a reader at ``token`` joins: the last position whose token is at or before
        ``token`` in every shard, as ``(chunk, offset)`` (``(None, 0)``: the ring is empty,
        its next chunk). Reading on from there and passing over the events ``token``
        already covers gives exactly the changes after it. ``None`` when the ring starts
        after ``token`` (the reader must read the log).

        Cost: a binary search over the chunks and a walk in one of them."""
        if not covers(self.base, token):
            return None
        chunks = self.chunks
        if not chunks:
            return None, 0
        lo, hi = 0, len(chunks)  # chunks[0].before is the base: covered
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if covers(chunks[mid].before, token):
                lo = mid
            else:
                hi = mid
        chunk = chunks[lo]
        positions = token.positions
        offset = 0
        for k, frame in zip(chunk.indexes, chunk.frames, strict=True):
            if frame.lsn > positions[k]:
                break
            offset += 1
        return chunk, offset


class Publisher:
    """The thread that follows the data directory and fills the ring.

    Args:
        data_dir: the data directory served.
        ring: the ring to fill (its ``token`` is where reading starts).
        loop: the server's event loop (chunks are appended on it).
        resolved_ms: how often to compute resolved watermarks.
        fallback_poll_ms: longest wait without a file-system event.
        linger_ms: least time between the starts of two rounds that both have changes
            (``ServeOptions.linger_ms``).
        messages: read checkpoints and message records too (``ServeOptions.messages``).
    """

    def __init__(
        self,
        data_dir: str,
        ring: Ring,
        loop: asyncio.AbstractEventLoop,
        resolved_ms: int,
        fallback_poll_ms: int,
        linger_ms: float = 0.0,
        messages: bool = False,
    ) -> None:
        self._data_dir, self._ring, self._loop = data_dir, ring, loop
        self._resolved_ms, self._poll_ms = resolved_ms, fallback_poll_ms
        self._linger_s = linger_ms / 1000
        self._messages = messages
        self._stop = threading.Event()
        self._room = threading.Semaphore(IN_FLIGHT)
        self._tail: MergedTail | None = None
        self._tail_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="moonish-publisher", daemon=True)
        self.token = ring.token  # the position after what the thread has read

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """End the thread (it closes its reader); returns once it has."""
        self._stop.set()
        self._room.release()
        with self._tail_lock:
            if self._tail is not None:
                self._tail.close()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                with self._tail_lock:
                    if self._stop.is_set():
                        return
                    self._tail = MergedTail(
                        self._data_dir,
                        self.token,
                        follow=True,
                        resolved_ms=self._resolved_ms,
                        fallback_poll_ms=self._poll_ms,
                        messages=self._messages,
                    )
                with self._tail as tail:
                    read_at = time.monotonic()  # when the round handed last was read
                    for item in tail.batches():
                        if isinstance(item, Resolved):
                            self._hand(marker_chunk(self.token, item))
                            continue
                        with paused_gc():
                            chunk = chunk_of(item, self.token)
                        self.token = item.token
                        self._hand(chunk)
                        # The next round is read once the linger is over: a change that
                        # comes after a quiet spell went out at once; under load, rounds
                        # are fewer and fuller.
                        wait = read_at + self._linger_s - time.monotonic()
                        if wait > 0 and self._stop.wait(wait):
                            return
                        read_at = time.monotonic()
            except MoonishError as error:  # damage, a position gone: readers meet it too
                log.error("the shared reader stopped: %s; trying again in 1 s", error)
                self._loop.call_soon_threadsafe(self._ring.fail, error)
                self._stop.wait(1.0)
            finally:
                with self._tail_lock:
                    self._tail = None

    def _hand(self, chunk: Chunk) -> None:
        """Give ``chunk`` to the loop; waits while ``IN_FLIGHT`` chunks are not appended."""
        while not self._room.acquire(timeout=0.5):
            if self._stop.is_set():
                return
        if self._stop.is_set():
            return
        self._loop.call_soon_threadsafe(self._append, chunk)

    def _append(self, chunk: Chunk) -> None:
        self._room.release()
        self._ring.append(chunk)
