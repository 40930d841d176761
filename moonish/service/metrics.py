"""The supervisor's own metrics and readiness (``moonish run`` with ``[metrics]``): each
part's restarts and whether it runs, read from the :class:`Supervisor` at scrape time."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from moonish.metrics.collect import CounterMetricFamily, GaugeMetricFamily
from moonish.metrics.readiness import Check

from .supervisor import Supervisor


class SupervisorCollector:
    """``moonish_part_restarts_total{part}`` and ``moonish_part_up{part}`` of ``supervisor``."""

    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        restarts = CounterMetricFamily(
            "moonish_part_restarts",
            "Times the supervisor restarted the part after it exited (crash, signal, exit 1 or 6).",
            labels=["part"],
        )
        up = GaugeMetricFamily(
            "moonish_part_up",
            "Whether the part runs (1; an import that finished counts as 1) or waits for its "
            "restart (0).",
            labels=["part"],
        )
        running = self.supervisor.running()
        for name, count in self.supervisor.restarts.items():
            restarts.add_metric([name], count)
            up.add_metric([name], 1 if running.get(name) else 0)
        yield restarts
        yield up


def parts_check(supervisor: Supervisor) -> Check:
    """``/readyz``'s check that every part runs (or, an import, has finished)."""

    def check() -> list[str]:
        return [
            f"part [{name}] is not running"
            for name, running in supervisor.running().items()
            if not running
        ]

    return check
