"""A live capture's figures as Prometheus metrics (moonish.metrics.families, the
``moonish_source_*`` families, labelled ``link`` with the master's address): updated from the
capture's report each time its status is written (about once a second, and at once when the
link is lost or the capture stops)."""

from __future__ import annotations

from moonish.metrics import families as f
from moonish.redis.capture.status import CONNECTED, CaptureReport


class CaptureMetrics:
    """The ``moonish_source_*`` series of one capture's link.

    Args:
        master: the master's address without credentials (``host:port``), the ``link`` label.
    """

    def __init__(self, master: str) -> None:
        self.link = master
        self._connected = f.SOURCE_CONNECTED.labels(master)
        self._behind_s = f.SOURCE_BEHIND_SECONDS.labels(master)
        self._behind_bytes = f.SOURCE_BEHIND_BYTES.labels(master)
        self._durable = f.SOURCE_DURABLE_OFFSET.labels(master)
        self._last_event = f.SOURCE_LAST_EVENT.labels(master)
        self._counters = {
            "commands": f.SOURCE_COMMANDS.labels(master),
            "full_resyncs": f.SOURCE_FULL_RESYNCS.labels(master),
            "continues": f.SOURCE_PARTIAL_RESYNCS.labels(master),
            "reconnects": f.SOURCE_RECONNECTS.labels(master),
        }
        self._seen = dict.fromkeys(self._counters, 0)
        self._connected.set(0)
        self._behind_s.set(float("nan"))
        self._behind_bytes.set(float("nan"))

    def observe(self, report: CaptureReport, now_us: int) -> None:
        """Update the series from ``report`` (cumulative figures: counters grow by what they
        grew since the last call) at ``now_us`` (the capture's clock, Unix microseconds)."""
        self._connected.set(1 if report.link == CONNECTED else 0)
        nan = float("nan")
        behind_s, behind_bytes = report.seconds_behind, report.bytes_behind
        self._behind_s.set(nan if behind_s is None else behind_s)
        self._behind_bytes.set(nan if behind_bytes is None else behind_bytes)
        self._durable.set(report.durable_offset)
        for name, counter in self._counters.items():
            value = getattr(report, name)
            grown = value - self._seen[name]
            if grown > 0:
                counter.inc(grown)
                if name == "commands":
                    self._last_event.set(now_us / 1e6)
            self._seen[name] = value
