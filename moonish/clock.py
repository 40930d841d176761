"""The one place moonish reads the wall clock.

Everything that stamps time (commit timestamps in the writer, the envelope's processing time in
the encoder) takes a :class:`Clock`, so tests and golden fixtures can pass a :class:`FixedClock`
and get byte-exact output.
"""

from __future__ import annotations

import time
from typing import Final, Protocol

_time_ns: Final = time.time_ns  # (Final: compiled code reads a C static, not the globals)


class Clock(Protocol):
    """Source of wall-clock time."""

    def now_us(self) -> int:
        """Microseconds since the Unix epoch."""
        ...


class SystemClock:
    """The machine's wall clock (``time.time_ns``)."""

    def now_us(self) -> int:
        """Microseconds since the Unix epoch."""
        return system_now_us()


def system_now_us() -> int:
    """:meth:`SystemClock.now_us` as a function: compiled code calls it directly, not through
    a bound method (a hot loop whose clock is a :class:`SystemClock` calls this instead)."""
    return _time_ns() // 1000


class FixedClock:
    """A clock that returns ``start_us`` and moves only when told (or by ``step_us`` per call).

    Args:
        start_us: first value returned, microseconds since the Unix epoch.
        step_us: added after every call (0 keeps the clock still).
    """

    def __init__(self, start_us: int, step_us: int = 0) -> None:
        self._now_us = start_us
        self._step_us = step_us

    def now_us(self) -> int:
        """Microseconds since the Unix epoch; advances by ``step_us`` after each call."""
        value = self._now_us
        self._now_us += self._step_us
        return value

    def advance(self, delta_us: int) -> None:
        """Move the clock forward by ``delta_us`` microseconds."""
        self._now_us += delta_us


SYSTEM_CLOCK = SystemClock()
