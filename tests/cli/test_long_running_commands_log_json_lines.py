"""``--log-format json`` (or ``MOONISH_LOG_FORMAT=json``, how ``moonish run`` asks its parts) of
the long-running commands: every stderr line is one JSON object with ``ts`` (ISO 8601 UTC),
``level``, ``part``, ``event`` and ``message``, plus the event's fields (``shard``, ``lsn``,
``batch_id``...); stdout is the same as in text, and text stays as it was."""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from moonish.clock import FixedClock
from moonish.redis.capture.status import read_status
from tests.support.cli import MOONISH
from tests.support.datadirs import data_dir
from tests.support.paths import ROOT
from tests.support.redis.capture import url_of, wait_for
from tests.support.servers.redis_server import redis_server

AOF = ROOT / "fixtures" / "redis-aof" / "slice" / "appendonlydir"
TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
ENV = dict(os.environ, PYTHONPATH=str(ROOT))


def json_lines(stderr: bytes | str, part: str) -> list[dict[str, Any]]:
    """Each stderr line as a JSON object, checked for the fields every line has."""
    text = stderr.decode() if isinstance(stderr, bytes) else stderr
    lines = [orjson.loads(line) for line in text.splitlines()]
    for line in lines:
        assert TS.fullmatch(line["ts"]), line
        assert line["level"] in ("info", "warning", "error"), line
        assert line["part"] == part and line["event"] and "message" in line, line
    return lines


@contextlib.contextmanager
def reaped(process: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """``process``, killed at the end of the block if it still runs (a failed test)."""
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def moonish(*args: str, env: dict[str, str] = ENV) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*MOONISH, *args], capture_output=True, env=env, cwd=ROOT, timeout=120)


@pytest.mark.slow
def test_import_aof_logs_json_lines_and_prints_the_same_summary(tmp_path: Path) -> None:
    text = moonish("wal", "import-aof", str(AOF), str(tmp_path / "text"), "--shards", "2")
    done = moonish(
        "wal", "import-aof", str(AOF), str(tmp_path / "json"), "--shards", "2",
        "--log-format", "json",
    )  # fmt: skip
    assert text.returncode == 0 and done.returncode == 0, done.stderr
    assert text.stderr.startswith(b"importing") and b"{" not in text.stderr  # the progress bar
    lines = json_lines(done.stderr, "import-aof")
    assert lines[-1]["event"] == "done" and lines[-1]["bytes"] == lines[-1]["total_bytes"] > 0
    rebuilds = [line for line in lines if line["event"] == "rebuild"]
    assert {line["shard"] for line in rebuilds} == {0, 1}
    assert all(isinstance(line["lsn"], int) for line in rebuilds)
    assert orjson.loads(done.stdout) == orjson.loads(text.stdout)


@pytest.mark.redis
def test_capture_under_moonish_log_format_json_logs_json_lines(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stderr_path = tmp_path / "stderr.log"
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir) as client, open(stderr_path, "wb") as stderr:
        for i in range(20):
            client.set(f"k{i}", i)
        process = subprocess.Popen(
            [*MOONISH, "wal", "capture", url_of(client), str(data), "--shards", "2"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=dict(ENV, MOONISH_LOG_FORMAT="json"),  # as moonish run starts its parts
            cwd=ROOT,
        )
        with reaped(process):
            wait_for(
                lambda: (read_status(str(data)) or {}).get("link") == "connected", "a link", 60
            )
            wait_for(lambda: '"event":"status"' in stderr_path.read_text(), "a status", 60)
            process.send_signal(signal.SIGTERM)
            out, _ = process.communicate(timeout=60)
    assert process.returncode == 0
    lines = json_lines(stderr_path.read_text(), "capture")
    events = [line["event"] for line in lines]
    assert "psync" in events and "full_resync" in events and events[-1] == "stopped", events
    assert "FULLRESYNC" in lines[events.index("psync")]["message"]
    assert orjson.loads(out)["rdb_keys"] == 20  # the summary on stdout as ever


@pytest.mark.kafka
def test_cdc_kafka_logs_its_progress_as_json_lines(tmp_path: Path) -> None:
    from moonish.state.shard import ShardWriter
    from tests.support.servers.kafka_broker import tansu

    data = tmp_path / "data"
    with ShardWriter(data / "shard-0") as writer:
        writer.execute(0, ["SET", "a", "1"])
        writer.execute(0, ["SET", "b", "2"])
    with tansu() as broker:
        sent = moonish(
            "cdc", "kafka", str(data), "-b", broker.bootstrap, "--topic-prefix", "logs",
            "--log-format", "json",
        )  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith(b"2 events") and b"positions: shard 0: 2" in sent.stdout
    lines = json_lines(sent.stderr, "kafka")
    assert lines and {line["event"] for line in lines} == {"progress"}
    assert lines[-1]["positions"] == {"0": 2} and lines[-1]["events"] == 2


def serve(data: Path, *args: str) -> tuple[str, subprocess.CompletedProcess[bytes]]:
    """Start ``moonish serve`` on a free port, read its first stdout line, stop it (SIGTERM)."""
    process = subprocess.Popen(
        [*MOONISH, "serve", str(data), "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
        cwd=ROOT,
    )
    with reaped(process):
        assert process.stdout is not None
        first = process.stdout.readline().decode()
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    return first, subprocess.CompletedProcess(process.args, process.returncode, out, err)


@pytest.mark.slow
def test_serve_logs_listening_and_stopped_as_json_and_nothing_in_text(tmp_path: Path) -> None:
    data = data_dir(tmp_path)
    first, done = serve(data, "--log-format", "json")
    assert done.returncode == 0, done.stderr
    url = orjson.loads(first)["url"]
    lines = json_lines(done.stderr, "serve")
    assert [line["event"] for line in lines] == ["listening", "stopped"]
    assert lines[0]["url"] == url and lines[0]["data_dir"] == str(data)
    assert lines[1]["exit_code"] == 0
    first, done = serve(data)
    assert done.returncode == 0 and done.stderr == b"" and orjson.loads(first)["url"]


@pytest.mark.slow
def test_serve_that_cannot_listen_logs_a_json_error_and_exits_1(tmp_path: Path) -> None:
    data = data_dir(tmp_path)
    process = subprocess.Popen(
        [*MOONISH, "serve", str(data), "--port", "0"], stdout=subprocess.PIPE, env=ENV, cwd=ROOT
    )
    try:
        assert process.stdout is not None
        port = orjson.loads(process.stdout.readline())["url"].rsplit(":", 1)[1]
        taken = moonish("serve", str(data), "--port", port, "--log-format", "json")
    finally:
        process.send_signal(signal.SIGTERM)
        process.communicate(timeout=60)
    assert taken.returncode == 1
    (line,) = json_lines(taken.stderr, "serve")
    assert line["event"] == "exit" and line["level"] == "error" and line["exit_code"] == 1


def test_spark_micro_batch_lines_carry_batch_id_rows_and_lsn_ranges() -> None:
    from cli.logs import StderrLog
    from cli.spark.materialize import _reporter

    stream = io.StringIO()
    report = _reporter(StderrLog("spark", stream, clock=FixedClock(0), log_format="json"))
    progress = {
        "batchId": 3,
        "numInputRows": 900,
        "batchDuration": 812,
        "sources": [{"startOffset": '{"0": 101, "1": 7}', "endOffset": '{"0": 601, "1": 7}'}],
    }
    report("batch 3: 900 rows in 812 ms; shard 0: LSN 101..600", progress)
    report("stopping after the running micro-batch (again to stop at once)", None)
    batch, stopping = json_lines(stream.getvalue(), "spark")
    assert batch["ts"] == "1970-01-01T00:00:00.000Z" and batch["event"] == "batch"
    assert (batch["batch_id"], batch["rows"], batch["duration_ms"]) == (3, 900, 812)
    assert batch["lsn_ranges"] == {"0": [101, 600]}
    assert stopping["event"] == "stopping"


def test_a_count_is_a_status_line_a_second_and_a_done_line() -> None:
    from cli.logs import CountLines, StderrLog

    stream = io.StringIO()
    log = StderrLog("import-aof", stream, clock=FixedClock(0, step_us=400_000), log_format="json")
    with CountLines(log, "bytes", 1000) as count:
        for _ in range(5):  # at 0, 0.4, 0.8, 1.2 (a line), 1.6 s
            count.update(200)
    status, done = json_lines(stream.getvalue(), "import-aof")
    assert (status["event"], status["bytes"], status["total_bytes"]) == ("status", 800, 1000)
    assert status["message"] == "800 bytes of 1,000 (80%)"
    assert (done["event"], done["bytes"]) == ("done", 1000)


def test_the_log_format_is_no_key_of_a_pipeline_section() -> None:
    from cli.pipeline import sections

    for section in sections():
        for spec in section.commands.values():
            assert "log_format" not in {option.key for option in spec.options}, section.name


@pytest.mark.slow
def test_the_error_a_command_ends_with_is_a_json_line_too(tmp_path: Path) -> None:
    """A refused import under ``--log-format json`` (or the variable): its error is one JSON
    line with the exit code, the error's kind and its path; in text, the usual one line."""
    bad = tmp_path / "appendonlydir"
    bad.mkdir()
    (bad / "appendonly.aof.manifest").write_text("garbage\n")
    args = [*MOONISH, "wal", "import-aof", str(bad), str(tmp_path / "data"), "--shards", "1"]
    for extra, env in (["--log-format", "json"], ENV), ([], {**ENV, "MOONISH_LOG_FORMAT": "json"}):
        out = subprocess.run([*args, *extra], capture_output=True, env=env, timeout=60)
        assert out.returncode == 2
        (line,) = json_lines(out.stderr, "import-aof")
        assert line["level"] == "error" and line["event"] == "exit" and line["exit_code"] == 2
        assert line["kind"] == "invalid_argument"
        assert line["path"] == str(bad / "appendonly.aof.manifest")
        assert "manifest line 1" in line["message"]
    text = subprocess.run(args, capture_output=True, env=ENV, timeout=60)
    assert text.returncode == 2 and text.stderr.startswith(b"moonish: invalid_argument: ")
