"""``moonish wal capture``'s stderr: a progress line redrawn with ``\\r`` only on a terminal;
into a file, timestamped lines: status lines, each PSYNC answer, each full resync with its
size and outcome, each lost connection with its reason (cli.logs, against a real
redis-server for the command)."""

from __future__ import annotations

import io
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from moonish.clock import FixedClock
from moonish.redis.capture.status import read_status
from tests.support.paths import ROOT
from tests.support.redis.capture import url_of, wait_for
from tests.support.servers.redis_server import redis_server

CLI = [sys.executable, "-m", "cli.main", "wal", "capture"]
STAMP = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_redrawn_on_a_terminal_and_a_log_line_clears_it() -> None:
    from cli.logs import StderrLog

    screen = Terminal()
    log = StderrLog("capture", screen, clock=FixedClock(1_700_000_000_000_000))
    log.progress("one")
    log.progress("two")
    log.line("psync", "PSYNC ? -1: +FULLRESYNC")
    log.progress("three")
    log.end_progress()
    assert screen.getvalue() == (
        "\r\x1b[Kone\r\x1b[Ktwo\r\x1b[K2023-11-14T22:13:20.000Z capture psync: "
        "PSYNC ? -1: +FULLRESYNC\n\r\x1b[Kthree\n"
    )


def test_progress_off_a_terminal_is_a_status_line() -> None:
    from cli.logs import StderrLog

    file = io.StringIO()
    log = StderrLog("capture", file, clock=FixedClock(1_700_000_000_000_000))
    log.progress("one")
    log.end_progress()
    log.line("stopped", "two")
    assert file.getvalue() == (
        "2023-11-14T22:13:20.000Z capture status: one\n"
        "2023-11-14T22:13:20.000Z capture stopped: two\n"
    )


@pytest.mark.redis
def test_capture_into_a_file_logs_lines_for_psync_resync_and_reconnects(
    tmp_path: Path, workdir: Path
) -> None:
    data_dir = tmp_path / "data"
    stderr_path = tmp_path / "stderr.log"
    with redis_server(workdir) as client:
        for i in range(50):
            client.set(f"k{i}", i)
        with open(stderr_path, "wb") as stderr:
            process = subprocess.Popen(
                [*CLI, url_of(client), str(data_dir), "--shards", "2"],
                stdout=subprocess.PIPE,
                stderr=stderr,
                env=dict(os.environ, PYTHONPATH=str(ROOT)),
            )
            try:

                def link() -> str | None:
                    return (read_status(str(data_dir)) or {}).get("link")

                wait_for(lambda: link() == "connected", "the capture to connect", 60)
                client.execute_command("CLIENT", "KILL", "TYPE", "replica")
                client.set("after", "kill")
                wait_for(lambda: "+CONTINUE" in stderr_path.read_text(), "the PSYNC", 60)
                wait_for(lambda: " status: " in stderr_path.read_text(), "a status line", 60)
                process.send_signal(signal.SIGTERM)
                out, _ = process.communicate(timeout=60)
            finally:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    assert process.returncode == 0
    text = stderr_path.read_text()
    assert "\r" not in text
    lines = text.splitlines()
    assert all(re.match(rf"{STAMP} capture \w+: ", line) for line in lines), lines
    replid = orjson.loads(out)["replid"]
    assert any(
        re.search(rf"psync: PSYNC \? -1: \+FULLRESYNC {replid} \d+ \(RDB: ", line) for line in lines
    ), lines
    resync = [line for line in lines if " full_resync: " in line]
    assert len(resync) == 1 and "as rows" in resync[0] and "50 keys loaded" in resync[0]
    assert re.search(r"RDB of [\d,]+ bytes", resync[0])
    assert any(" reconnect: link lost: " in line for line in lines), lines
    assert any(
        re.search(rf"psync: PSYNC {replid} \d+: \+CONTINUE {replid}", line) for line in lines
    ), lines
    status = [line for line in lines if " status: " in line]
    assert status and all("behind the master" in line for line in status)
    assert " stopped: " in lines[-1]
    summary = orjson.loads(out)
    assert summary["reconnects"] == 1 and summary["last_full_resync"]["rows"] == 50
