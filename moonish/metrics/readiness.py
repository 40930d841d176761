"""Readiness from the metrics' own values: whether the source link is up and its lag under a
bound (``/readyz``, moonish.metrics.http).

A process is ready when every replication link it reports (``moonish_source_connected``) is
up and none is more than ``max_lag_s`` seconds behind its master
(``moonish_source_behind_seconds``). A lag that is unknown (NaN: the master does not answer
``INFO replication``) while the link is up does not make it unready: the link itself says the
master is there. Checks of its own (``moonish run``: every part running) are added by the
caller.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from prometheus_client.registry import Collector

from .families import SOURCE_BEHIND_SECONDS, SOURCE_CONNECTED

Check = Callable[[], list[str]]
"""A readiness check: why the process is not ready (one sentence each), ``[]`` when it is."""


def _samples(collector: Collector, name: str) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of every sample named ``name`` that ``collector`` gives now."""
    return [
        (dict(sample.labels), sample.value)
        for family in collector.collect()
        if family.name == name
        for sample in family.samples
        if sample.name == name
    ]


def source_check(collector: Collector, max_lag_s: float | None, *, expected: bool) -> Check:
    """The check of the source links ``collector`` reports.

    Args:
        collector: where the values come from (the default registry; under ``moonish run``
            the parts' values, moonish.metrics.http.parts_collector).
        max_lag_s: the most seconds behind the master a ready link may be; ``None``: no bound.
        expected: a link must be reported (the process runs a live capture): none yet is
            unready (the capture has not started).
    """
    connected_name = SOURCE_CONNECTED._name
    behind_name = SOURCE_BEHIND_SECONDS._name

    def check() -> list[str]:
        connected = _samples(collector, connected_name)
        if expected and not connected:
            return ["no replication link yet (the capture is starting)"]
        problems = [
            f"replication link {labels.get('link', '?')} is not connected"
            for labels, value in connected
            if value != 1
        ]
        if max_lag_s is not None:
            for labels, value in _samples(collector, behind_name):
                if not math.isnan(value) and value > max_lag_s:
                    problems.append(
                        f"replication link {labels.get('link', '?')} is {value:.1f} s behind "
                        f"its master (the bound is {max_lag_s:g} s)"
                    )
        return problems

    return check


def problems(checks: Iterable[Check]) -> list[str]:
    """Every problem ``checks`` find, in order."""
    return [problem for check in checks for problem in check()]
