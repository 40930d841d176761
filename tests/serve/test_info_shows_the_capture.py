"""``GET /v1/info`` shows the live capture that writes the data directory (its
``capture.json``, as ``moonish cdc info`` does): the master, the link's state, bytes and
seconds behind, the last full resync and reconnects; ``null`` without a capture, and an
``error`` for a file it cannot read, the rest of the answer standing."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonish.redis.capture.status import (
    STATUS_NAME,
    CaptureReport,
    FullResyncOutcome,
    read_status,
    write_status,
)
from tests.support.servers.serve_util import Running, request
from tests.support.steps import write_steps


@pytest.fixture
def data(tmp_path: Path) -> Path:
    write_steps(tmp_path / "data", 2, [(n % 2, 1, 1) for n in range(4)])
    return tmp_path / "data"


def report() -> CaptureReport:
    resync = FullResyncOutcome(1_700_000_000_000_000, "a" * 40, 0, 4096, 0.25, 10, 0, 0, 0)
    return CaptureReport(
        master="redis://127.0.0.1:6379",
        replid="a" * 40,
        link="connected",
        received_offset=900,
        durable_offset=800,
        master_offset=1000,
        bytes_behind=200,
        seconds_behind=1.5,
        reconnects=2,
        full_resyncs=1,
        last_full_resync=resync,
    )


def test_info_shows_the_capture_or_null(data: Path) -> None:
    with Running(data) as server:
        status, info = request(f"{server.url}/v1/info")
        assert status == 200 and info["capture"] is None
        write_status(str(data), report(), 1_700_000_001_000_000, running=True)
        status, info = request(f"{server.url}/v1/info")
    capture = info["capture"]
    assert capture == read_status(str(data))
    assert (capture["master"], capture["link"], capture["running"]) == (
        "redis://127.0.0.1:6379",
        "connected",
        True,
    )
    assert (capture["bytes_behind"], capture["seconds_behind"], capture["reconnects"]) == (
        200,
        1.5,
        2,
    )
    assert capture["pending_bytes"] == 100
    assert capture["last_full_resync"]["rdb_bytes"] == 4096


def test_a_damaged_capture_file_is_an_error_in_info_not_a_failed_answer(data: Path) -> None:
    (data / STATUS_NAME).write_bytes(b'{"format": "moonish-capture"')
    with Running(data) as server:
        status, info = request(f"{server.url}/v1/info")
    assert status == 200 and len(info["shards"]) == 2
    assert "error" in info["capture"] and STATUS_NAME in info["capture"]["error"]


def test_a_version_1_capture_file_reads_with_the_new_members_null(data: Path) -> None:
    from moonish.fileio import dump_checked, replace_atomically

    old = {
        "format": "moonish-capture",
        "version": 1,
        "master": "redis://h:1",
        "replid": "b" * 40,
        "received_offset": 10,
        "durable_offset": 12,
        "time_us": 1,
        "running": False,
    }
    replace_atomically(str(data / STATUS_NAME), [dump_checked(old)])
    status = read_status(str(data))
    assert status is not None
    assert status["bytes_behind"] is None and status["link"] is None
    assert status["pending_bytes"] == 0  # never negative
