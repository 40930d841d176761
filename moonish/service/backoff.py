"""When a crashed part is started again: exponential backoff, bounded, reset after a good run.

The first restart waits ``initial_ms``, each further one twice the last, at most ``max_ms``;
a part that ran ``reset_ms`` or longer before it exited starts again from ``initial_ms``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Backoff:
    """The restart delays of one part.

    Args:
        initial_ms: the first delay.
        max_ms: the longest delay.
        reset_ms: a run at least this long resets the delay to ``initial_ms``.
    """

    initial_ms: int
    max_ms: int
    reset_ms: int
    _next_ms: int | None = None

    def delay_ms(self, ran_ms: float) -> int:
        """The delay before the next start of a part that ran ``ran_ms`` before exiting."""
        if self._next_ms is None or ran_ms >= self.reset_ms:
            self._next_ms = self.initial_ms
        delay = min(self._next_ms, self.max_ms)
        self._next_ms = min(max(self._next_ms * 2, 1), self.max_ms)
        return delay
