"""The server's figures over the last hour, for the status page's two charts: events/s and
seconds behind the source.

Every ``ServeOptions.history_interval_ms`` (10 s by default) the server takes a sample:

- ``events``: the changes its shared reader has read since the server started (the ring's
  end, moonish.serve.ring: every change its feeds carry, including checkpoints and messages
  when it serves them with ``--messages``). Events/s is the growth between two samples over
  the wall-clock time between them (the first against the count when the server started).
- ``seconds_behind``: the live capture's ``seconds_behind`` from its ``capture.json``
  (moonish.redis.capture.status): the figure a capture's ``/metrics`` exports as
  ``moonish_source_behind_seconds``. ``None`` (a gap in the chart) without a capture, once
  it stopped, while the master does not answer ``INFO replication``, or when the file has not
  been rewritten for :data:`STALE_S` (a capture that died without saying so).

The samples live in memory only, in a bounded ring of ``HISTORY_MS / interval`` entries (360
at 10 s): a restarted server starts a new hour; nothing is written to disk.

``GET /v1/info`` carries them as ``server.history`` (:meth:`History.to_json`)::

    {"interval_ms": 10000,                 # the sampling interval
     "span_s": 3600,                       # how far back the samples go at most
     "now_s": 1795000000.123,              # the server's wall clock at the answer (Unix s)
     "time_s": [1794996400.1, ...],        # each sample's time (Unix seconds), ascending
     "events_per_s": [12.5, ...],          # each sample's events/s (>= 0)
     "seconds_behind": [0.0, null, ...]}   # each sample's seconds behind the source, or null
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from moonish.clock import Clock
from moonish.errors import MoonishError
from moonish.redis.capture.status import read_status

log = logging.getLogger("moonish.serve")

STALE_S = 10.0
"""A running capture's ``capture.json`` older than this (seconds; it rewrites it about once
a second) no longer tells how far behind it is: the status page says "not updated" then
too."""


def seconds_behind(status: dict[str, Any] | None, now_us: int) -> float | None:
    """The seconds behind the source that a capture's status (moonish.redis.capture.status
    ``read_status``, or ``None``: no capture) tells at ``now_us`` (Unix µs), or ``None``: no
    capture, a stopped one, a stale file (:data:`STALE_S`), an unknown lag, a status
    ``{"error": ...}`` that could not be read."""
    if status is None or not status.get("running"):
        return None
    behind = status.get("seconds_behind")
    time_us = status.get("time_us")
    if not isinstance(behind, int | float) or not isinstance(time_us, int):
        return None
    if now_us - time_us > STALE_S * 1e6:
        return None
    return float(behind)


class History:
    """The last ``span_ms`` of samples, one per ``interval_ms``, oldest first.

    Args:
        interval_ms: the sampling interval (ms, > 0).
        span_ms: how far back the samples go (ms); ``span_ms // interval_ms`` samples (at
            least 1) are kept, the oldest dropped first.
        start_us: the wall-clock time the count of events starts from (Unix µs).
        start_events: the count of events then.
    """

    def __init__(self, interval_ms: int, span_ms: int, start_us: int, start_events: int) -> None:
        self.interval_ms, self.span_ms = interval_ms, span_ms
        self.samples: deque[tuple[float, float, float | None]] = deque(
            maxlen=max(1, span_ms // interval_ms)
        )
        self._last_us, self._last_events = start_us, start_events

    def add(self, time_us: int, events: int, behind_s: float | None) -> None:
        """Take the sample of ``time_us`` (Unix µs): ``events`` read since the server started,
        ``behind_s`` seconds behind the source (``None``: unknown). A sample no later than
        the previous one (the wall clock stepped back) only moves the baseline."""
        elapsed_us = time_us - self._last_us
        grown = max(0, events - self._last_events)
        self._last_us, self._last_events = time_us, events
        if elapsed_us <= 0:
            return
        self.samples.append((time_us / 1e6, grown / (elapsed_us / 1e6), behind_s))

    def to_json(self, now_us: int) -> dict[str, Any]:
        """The samples as ``GET /v1/info`` carries them (see the module docstring)."""
        return {
            "interval_ms": self.interval_ms,
            "span_s": self.span_ms / 1000,
            "now_s": now_us / 1e6,
            "time_s": [round(t, 3) for t, _, _ in self.samples],
            "events_per_s": [round(rate, 3) for _, rate, _ in self.samples],
            "seconds_behind": [b if b is None else round(b, 3) for _, _, b in self.samples],
        }


async def sample_forever(
    history: History,
    data_dir: str,
    events: Callable[[], int],
    clock: Clock,
    interval_ms: int,
) -> None:
    """Add a sample to ``history`` every ``interval_ms`` until cancelled: ``events()`` (the
    count of events, read on the event loop) and the capture's lag (``capture.json`` read in
    a thread). A status file that cannot be read is a gap in the chart (logged), not the
    sampler's end.

    **Decision: paced by ``asyncio.sleep``, not the server's feed timer**
    (moonish.serve.timer): a test's ``ManualTimer`` moves heartbeats and timeouts by hand,
    and a sampler on it would add a callback to every count of what is pending there.
    """
    while True:
        await asyncio.sleep(interval_ms / 1000)
        count = events()
        try:
            status = await asyncio.to_thread(read_status, data_dir)
        except MoonishError as error:
            log.warning("status page history: capture.json: %s", error)
            status = None
        now_us = clock.now_us()
        history.add(now_us, count, seconds_behind(status, now_us))


async def stop(task: asyncio.Task[None] | None) -> None:
    """Cancel the sampler ``task`` and wait for it to end."""
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
