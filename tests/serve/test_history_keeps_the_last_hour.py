"""The status page's history (moonish.serve.history): events/s between samples, the capture's
seconds behind the source or a gap, at most an hour of samples kept in memory, and what
``GET /v1/info`` carries of it."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from moonish.errors import InvalidArgumentError
from moonish.serve import ServeOptions
from moonish.serve.history import STALE_S, History, seconds_behind
from moonish.serve.options import HISTORY_MS
from tests.support.servers.serve_util import Running, request
from tests.support.steps import write_steps

T0 = 1_795_000_000_000_000  # µs


def test_rates_are_growth_over_wall_time_and_the_ring_keeps_one_hour() -> None:
    history = History(10_000, HISTORY_MS, T0, 100)
    history.add(T0 + 10_000_000, 150, 2.0)  # 50 events in 10 s
    history.add(T0 + 15_000_000, 150, None)  # (a late sample: 5 s, nothing new)
    history.add(T0 + 15_000_000, 170, 1.0)  # the clock stood still: the baseline moves only
    history.add(T0 + 25_000_000, 180, 0.5)  # 10 in 10 s after the baseline of 170
    document = history.to_json(T0 + 26_000_000)
    assert document == {
        "interval_ms": 10_000,
        "span_s": 3600.0,
        "now_s": (T0 + 26_000_000) / 1e6,
        "time_s": [(T0 + 10_000_000) / 1e6, (T0 + 15_000_000) / 1e6, (T0 + 25_000_000) / 1e6],
        "events_per_s": [5.0, 0.0, 1.0],
        "seconds_behind": [2.0, None, 0.5],
    }
    for n in range(1, 400):  # more than an hour of samples
        history.add(T0 + 25_000_000 + n * 10_000_000, 180 + n, 0.0)
    assert len(history.samples) == 360
    assert history.samples[0][0] == (T0 + 25_000_000 + 40 * 10_000_000) / 1e6


def status(**fields: Any) -> dict[str, Any]:
    return {"running": True, "seconds_behind": 1.5, "time_us": T0, **fields}


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (status(), 1.5),
        (None, None),  # no capture
        (status(running=False), None),  # it stopped
        (status(seconds_behind=None), None),  # the master does not answer
        (status(time_us=T0 - int(STALE_S * 1e6) - 1), None),  # not rewritten for too long
        ({"error": "capture.json: bad checksum"}, None),
    ],
)
def test_seconds_behind_is_the_captures_or_a_gap(
    given: dict[str, Any] | None, expected: float | None
) -> None:
    assert seconds_behind(given, T0) == expected


def test_info_carries_the_samples_the_server_took(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_steps(data, 2, [(n % 2, 1, 1) for n in range(4)])
    with Running(data, ServeOptions(port=0, history_interval_ms=100)) as server:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            history = request(f"{server.url}/v1/info")[1]["server"]["history"]
            if len(history["time_s"]) >= 3:
                break
            time.sleep(0.05)
        assert len(history["time_s"]) >= 3 and history["interval_ms"] == 100
        assert history["time_s"] == sorted(history["time_s"])
        assert history["time_s"][-1] <= history["now_s"] <= time.time() + 1
        assert set(history["seconds_behind"]) == {None}  # no capture writes this directory
        assert history["events_per_s"] == [0.0] * len(history["time_s"])
    with pytest.raises(InvalidArgumentError, match="history_interval_ms"):
        ServeOptions(history_interval_ms=0)
