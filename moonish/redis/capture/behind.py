"""How far a live capture is behind its master, in bytes and seconds (docs/redis-source.md,
"Progress, logs and capture.json").

A :class:`MasterWatch` thread asks the master ``INFO replication`` on a side connection
(moonish.redis.replication.probe) every ``interval_ms`` and keeps the answers in a
:class:`Behind`, which the capture asks with its durable offset:

- **bytes behind** = the master's ``master_repl_offset`` (its latest answer) minus the
  capture's durable offset, or 0 when the answer is older than the durable offset;
- **seconds behind** = the age of the oldest answer whose offset is not yet durable: when the
  master was first seen past the durable offset (0 when it is not). Answers come every
  ``interval_ms``, so it is exact to about that; a capture that started behind counts from
  its first answer.

Both are unknown (``None``), never negative, while the master does not answer (down,
unreachable, ``INFO`` not permitted) and while its stream is not the one the capture follows
(another replication ID, before the full resync that switches to it).
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass

from moonish.clock import Clock
from moonish.errors import MoonishError
from moonish.redis.replication.messages import ReplicaOptions
from moonish.redis.replication.probe import MasterProbe, MasterStream

MAX_SAMPLES = 4096
"""Answers kept while the capture is behind; past it the second oldest goes (the oldest
keeps the age)."""


@dataclass(frozen=True, slots=True)
class Lag:
    """The capture against its master at one moment.

    Attributes:
        master_offset: the master's ``master_repl_offset`` last answered, or ``None``.
        bytes_behind: master offset minus the durable offset (``None``: unknown).
        seconds_behind: how long the master has been past the durable offset (``None``:
            unknown).
        error: why the master's offset is unknown (the side connection's last error), or
            ``None``.
    """

    master_offset: int | None
    bytes_behind: int | None
    seconds_behind: float | None
    error: str | None


class Behind:
    """The master's offsets over time (thread-safe: one thread records, another asks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._latest: MasterStream | None = None
        self._samples: deque[tuple[int, int]] = deque()  # (time_us, offset), offsets rising
        self._error: str | None = "not asked yet"

    def record(self, time_us: int, stream: MasterStream) -> None:
        """The master answered ``stream`` at ``time_us``."""
        with self._lock:
            latest = self._latest
            if latest is not None and stream.replid != latest.replid:
                self._samples.clear()  # another stream: its offsets are not comparable
            self._latest, self._error = stream, None
            if not self._samples or stream.offset > self._samples[-1][1]:
                if len(self._samples) >= MAX_SAMPLES:
                    oldest = self._samples.popleft()
                    self._samples.popleft()
                    self._samples.appendleft(oldest)
                self._samples.append((time_us, stream.offset))

    def unknown(self, error: str) -> None:
        """The master did not answer (``error`` says why): its offset is unknown until it
        answers again."""
        with self._lock:
            self._latest, self._error = None, error

    def measure(self, replid: str, durable_offset: int, now_us: int) -> Lag:
        """The lag of a capture that follows ``replid`` and made ``durable_offset`` durable."""
        with self._lock:
            latest, samples = self._latest, self._samples
            if latest is None:
                return Lag(None, None, None, self._error)
            if not latest.follows(replid):
                error = f"the master's stream is {latest.replid}, the capture's {replid or '-'}"
                return Lag(latest.offset, None, None, error)
            while samples and samples[0][1] <= durable_offset:
                samples.popleft()
            seconds = max(0, now_us - samples[0][0]) / 1e6 if samples else 0.0
            return Lag(latest.offset, max(0, latest.offset - durable_offset), seconds, None)


class MasterWatch:
    """A daemon thread that asks the master at ``url`` for its offset every ``interval_ms``
    into :attr:`behind` until :meth:`close`.

    Args:
        url: the master, as the capture's.
        options: the replication link's options (timeouts, TLS).
        clock: the answers' times.
        interval_ms: how often to ask.
    """

    def __init__(self, url: str, options: ReplicaOptions, clock: Clock, interval_ms: int) -> None:
        self.behind = Behind()
        self._probe = MasterProbe(url, options, timeout_ms=max(1_000, min(interval_ms, 10_000)))
        self._clock, self._interval_s = clock, interval_ms / 1000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="moonish-master-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while True:
                try:
                    stream = self._probe.ask()
                except MoonishError as exc:
                    self.behind.unknown(str(exc))
                else:
                    self.behind.record(self._clock.now_us(), stream)
                if self._stop.wait(self._interval_s):
                    return
        finally:
            self._probe.close()

    def close(self) -> None:
        """Stop asking and close the side connection (waits for an answer under way)."""
        self._stop.set()
        self._thread.join()
