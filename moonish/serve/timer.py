"""Time for heartbeats and timeouts, from one place, so tests can move it by hand.

:class:`LoopTimer` is the event loop's monotonic clock; :class:`ManualTimer` moves only
when a test calls :meth:`ManualTimer.advance` (from any thread).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable
from typing import Protocol


class Handle(Protocol):
    def cancel(self) -> None: ...


class Timer(Protocol):
    """A monotonic clock in milliseconds that can call back at a time."""

    def now_ms(self) -> float:
        """Milliseconds on a monotonic clock (only differences mean anything)."""
        ...

    def call_at(self, when_ms: float, callback: Callable[[], None]) -> Handle:
        """Call ``callback`` on the event loop once ``now_ms() >= when_ms``."""
        ...


class LoopTimer:
    """The running event loop's clock (``loop.time()``)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def now_ms(self) -> float:
        return self._loop.time() * 1000

    def call_at(self, when_ms: float, callback: Callable[[], None]) -> Handle:
        return self._loop.call_at(when_ms / 1000, callback)


class _ManualHandle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


class ManualTimer:
    """A clock that stands still until :meth:`advance`; callbacks run on the server's loop.

    Args:
        start_ms: the first reading.
    """

    def __init__(self, start_ms: float = 0.0) -> None:
        self._now_ms = start_ms
        self._heap: list[tuple[float, int, _ManualHandle, Callable[[], None]]] = []
        self._order = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run callbacks on ``loop`` (the server does this when it starts)."""
        self._loop = loop

    def now_ms(self) -> float:
        return self._now_ms

    def call_at(self, when_ms: float, callback: Callable[[], None]) -> Handle:
        handle = _ManualHandle()
        heapq.heappush(self._heap, (when_ms, next(self._order), handle, callback))
        return handle

    def pending(self) -> int:
        """Callbacks scheduled and not cancelled (a test waits for a feed to be waiting)."""
        return sum(1 for _, _, handle, _ in self._heap if not handle.cancelled)

    def advance(self, delta_ms: float) -> None:
        """Move the clock forward and run what became due, on the bound loop. Thread-safe."""
        if self._loop is None:
            raise RuntimeError("ManualTimer is not bound to a running server")
        self._loop.call_soon_threadsafe(self._advance, delta_ms)

    def _advance(self, delta_ms: float) -> None:
        self._now_ms += delta_ms
        while self._heap and self._heap[0][0] <= self._now_ms:
            _, _, handle, callback = heapq.heappop(self._heap)
            if not handle.cancelled:
                callback()
