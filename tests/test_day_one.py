"""What a new user hits on day one (issue 12, section 4), each through the real command line:
a directory with no log, a closed stdout, an export directory of another data directory,
``spark show`` of a non-table, ``spark materialize --follow`` progress and Ctrl-C, the
Makefile's two installs, and ``--segment-bytes`` on the commands that create shards."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from moonish.cdc import shard_read
from moonish.errors import InvalidArgumentError
from moonish.log.reader import ShardReader
from moonish.log.segment import list_segments, segment_path
from moonish.log.verify import verify_shard
from moonish.redis.aof.importer import import_aof
from moonish.sinks.export import STATE_NAME, Exporter
from moonish.spark.progress import BatchGate, BatchStopped, progress_line
from moonish.state.shard import ShardWriter
from tests.conftest import kv, open_writer

ROOT = Path(__file__).resolve().parent.parent
SLICE = ROOT / "fixtures" / "redis-aof" / "slice" / "appendonlydir"
MOONISH = [sys.executable, "-c", "from cli.main import entry; entry()"]
SHELL_MOONISH = f"{sys.executable} -c 'from cli.main import entry; entry()'"


def run(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*MOONISH, *args], capture_output=True, timeout=timeout_s, cwd=ROOT)


@pytest.fixture(scope="module")
def big_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shard of 5,000 records: about 2 MB of envelopes, far more than a pipe buffer."""
    shard = tmp_path_factory.mktemp("big") / "shard-0"
    with open_writer(shard) as writer:
        for start in range(0, 5000, 500):
            writer.append_batch([kv(b"key-%d" % i, b"v" * 100) for i in range(start, start + 500)])
    return shard


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real slice AOF in 2 shards (3,473 changes)."""
    path = tmp_path_factory.mktemp("data") / "data"
    import_aof(SLICE, path, 2)
    return path


# -- a directory with no log ---------------------------------------------------------------


@pytest.mark.parametrize("content", ["empty", "other files"])
@pytest.mark.parametrize(
    "command",
    [
        ["cdc", "read", "{}", "0"],
        ["cdc", "tail", "{}", "--follow"],
        ["cdc", "info", "{}"],
        ["wal", "verify", "{}"],
        ["wal", "dump", "{}"],
        ["wal", "repair", "{}", "--next-lsn", "5"],
    ],
)
def test_a_directory_with_no_log_is_an_error_not_an_idle_shard(
    tmp_path: Path, content: str, command: list[str]
) -> None:
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    if content == "other files":
        (wrong / "notes.txt").write_text("not a log")
    try:
        out = run(*(arg.format(wrong) for arg in command), timeout_s=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{command[:2]} on a directory with no log waited instead of failing")
    assert out.returncode == 2, out.stderr
    assert b"holds no WAL segment" in out.stderr and str(wrong).encode() in out.stderr
    assert sorted(os.listdir(wrong)) == ([] if content == "empty" else ["notes.txt"])


def test_the_library_refuses_it_too(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="holds no WAL segment"):
        ShardReader(tmp_path)
    with pytest.raises(InvalidArgumentError, match="holds no WAL segment"):
        shard_read.read(tmp_path, 0)
    with pytest.raises(InvalidArgumentError, match="holds no WAL segment"):
        verify_shard(tmp_path)


def test_writers_still_create_shards_in_new_and_empty_directories(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for shard in (tmp_path / "new", tmp_path / "empty"):
        with open_writer(shard) as writer:
            writer.append(kv(b"k"))
        assert [event.lsn for event in shard_read.read(shard, 0).events] == [1]


def test_a_shard_whose_segments_were_removed_is_still_a_shard(tmp_path: Path) -> None:
    """control.json (or a snapshot) survives the removal of every segment: reads say where
    the log went (exit 3), and ``wal repair --next-lsn`` still works on it."""
    shard = tmp_path / "shard-0"
    with ShardWriter(shard) as writer:
        writer.execute(0, ["SET", "a", "1"])
        writer.execute(0, ["SET", "b", "2"])
        writer.checkpoint()
    for base in list_segments(str(shard)):
        os.unlink(segment_path(str(shard), base))
    out = run("cdc", "read", str(shard), "0")
    assert out.returncode == 3 and b"oldest retained LSN is 4" in out.stderr, out.stderr
    os.unlink(shard / "control.json")  # only the snapshot is left
    out = run("wal", "repair", str(shard), "--next-lsn", "10")
    assert out.returncode == 0, out.stderr
    assert orjson.loads(out.stdout)["next_lsn"] == 10


# -- a closed stdout is a normal end -------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "cdc read {} 0 --limit 10000",
        "cdc tail {}",
        "cdc tail {} --follow",
        "wal dump {}",
    ],
)
def test_piping_into_head_exits_0_without_a_word(big_shard: Path, command: str) -> None:
    pipeline = f"{SHELL_MOONISH} {command.format(big_shard)} | head -1"
    out = subprocess.run(
        ["bash", "-o", "pipefail", "-c", pipeline], capture_output=True, timeout=60, cwd=ROOT
    )
    assert (out.returncode, out.stderr) == (0, b"")
    assert len(out.stdout.splitlines()) == 1


@pytest.mark.parametrize(
    "command",
    [
        ["cdc", "read", "{}", "0", "--limit", "3"],
        ["cdc", "info", "{}"],
        ["wal", "verify", "{}"],
        ["--help"],
        ["cdc", "read", "--help"],
        ["--version"],
    ],
)
def test_a_stdout_closed_before_the_first_write_is_a_normal_end(
    big_shard: Path, command: list[str]
) -> None:
    """Small outputs fit in the pipe buffer; with the reading end closed before the command
    starts, the first write (or the flush at exit) fails every time."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        out = subprocess.run(
            [*MOONISH, *(arg.format(big_shard) for arg in command)],
            stdout=write_end, stderr=subprocess.PIPE, timeout=60, cwd=ROOT,
        )  # fmt: skip
    finally:
        os.close(write_end)
    assert (out.returncode, out.stderr) == (0, b"")


def test_a_broken_pipe_that_is_not_stdout_is_still_a_failure(big_shard: Path) -> None:
    code = (
        "from moonish.cdc import shard_read\n"
        "def broken(*args, **kwargs): raise BrokenPipeError(32, 'a socket went away')\n"
        "shard_read.info = broken\n"
        "from cli.main import entry; entry()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, "cdc", "info", str(big_shard)],
        capture_output=True, timeout=60, cwd=ROOT,
    )  # fmt: skip
    assert out.returncode == 1 and b"a socket went away" in out.stderr


# -- an export directory holds the export of one data directory -----------------------------


def test_an_export_of_another_data_directory_is_refused(data: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    import_aof(SLICE, other, 2)
    for shard in ("shard-0", "shard-1"):  # more LSNs than `data`: it would continue its cursors
        with ShardWriter(other / shard) as writer:
            writer.execute(0, ["SET", "more", "1"])
    out_dir = tmp_path / "export"
    assert run("cdc", "export", str(data), str(out_dir)).returncode == 0
    before = {name: (out_dir / name).read_bytes() for name in os.listdir(out_dir)}
    out = run("cdc", "export", str(other), str(out_dir))
    assert out.returncode == 2, out.stderr
    message = out.stderr.decode()
    assert f"export of {data.resolve()} (2 shards), not of {other.resolve()} (2 shards)" in message
    assert {name: (out_dir / name).read_bytes() for name in os.listdir(out_dir)} == before
    with pytest.raises(InvalidArgumentError, match="holds the export of"):
        Exporter(data / "shard-0", out_dir)  # one shard of it is another source too


def test_the_same_source_by_another_path_continues(data: Path, tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to(data)
    with Exporter(data, tmp_path / "export") as exporter:
        assert exporter.run().records == 3473
    with Exporter(link, tmp_path / "export") as exporter:
        assert exporter.run().records == 0
    state = orjson.loads((tmp_path / "export" / STATE_NAME).read_bytes())
    assert state["version"] == 2
    assert state["source"] == {"path": str(data.resolve()), "shards": 2}


def test_a_version_1_export_is_continued_and_given_its_source(data: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "export"
    out_dir.mkdir()
    (out_dir / STATE_NAME).write_bytes(
        orjson.dumps({"format": "moonish-export", "version": 1, "shards": {"0": 1, "1": 1}})
    )
    with Exporter(data, out_dir) as exporter:
        assert exporter.run().records == 3473
    assert orjson.loads((out_dir / STATE_NAME).read_bytes())["source"]["shards"] == 2


# -- spark show of a directory that is not a table -------------------------------------------


def test_spark_show_of_a_directory_that_is_not_a_table_is_an_error(
    data: Path, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    for path in (data, tmp_path / "empty"):
        started = time.monotonic()
        out = run("spark", "show", str(path))
        assert out.returncode == 2, out.stderr
        assert b"not a materialized table" in out.stderr and str(path).encode() in out.stderr
        assert out.stdout == b""
        assert time.monotonic() - started < 20  # refused before Spark starts


# -- spark materialize --follow: a progress line per micro-batch, a clean stop ---------------


def test_progress_lines_name_the_batch_rows_duration_and_lsns() -> None:
    progress = {
        "batchId": 3, "numInputRows": 900, "batchDuration": 812,
        "sources": [{"startOffset": '{"0": 101, "1": 7}', "endOffset": '{"0": 601, "1": 7}'}],
    }  # fmt: skip
    assert progress_line(progress) == "batch 3: 900 rows in 812 ms; shard 0: LSN 101..600"
    files = {**progress, "sources": [{"startOffset": None, "endOffset": '{"logOffset":0}'}]}
    assert progress_line(files).endswith('; offsets None -> {"logOffset":0}')


def test_a_stop_waits_for_the_running_batch_and_lets_none_start() -> None:
    gate = BatchGate()
    with gate.batch(0):
        assert not gate.close(0.05)  # the batch runs: the stop waits
    assert gate.close(0.05)
    with pytest.raises(BatchStopped, match="micro-batch 1 not started"), gate.batch(1):
        pass


def test_a_batch_cut_short_by_a_stop_fails_with_a_short_message() -> None:
    gate = BatchGate()
    with pytest.raises(BatchStopped) as stopped, gate.batch(0):
        assert not gate.close(0)  # a forced stop: its jobs are cancelled
        raise RuntimeError("py4j.protocol.Py4JJavaError: ... job cancelled\n" * 1000)
    assert str(stopped.value) == "micro-batch 0 cut short: stopped"
    assert stopped.value.__suppress_context__  # the long traceback stays out of the message
    gate = BatchGate()
    with pytest.raises(RuntimeError, match="real failure"), gate.batch(0):
        raise RuntimeError("a real failure")


def _stderr_lines_until(process: subprocess.Popen[bytes], marker: bytes, timeout_s: float) -> bytes:
    """Read the process's stderr until a line holds ``marker``; returns what was read."""
    assert process.stderr is not None
    seen, deadline = b"", time.monotonic() + timeout_s
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and process.poll() is None, f"no {marker!r} in stderr:\n{seen.decode()}"
        if select.select([process.stderr], [], [], min(left, 1))[0]:
            seen += os.read(process.stderr.fileno(), 65536)
    return seen


@pytest.mark.parametrize(
    ("signum", "to_group"),
    [(signal.SIGINT, True), (signal.SIGTERM, False)],
    ids=["ctrl-c-at-a-terminal", "sigterm"],
)
def test_materialize_follow_reports_each_batch_and_stops_cleanly(
    data: Path, tmp_path: Path, signum: signal.Signals, to_group: bool
) -> None:
    """Ctrl-C at a terminal signals the whole foreground process group, as ``killpg`` does
    here: the command, and the JVM and Python workers unless they are kept out of it."""
    command = [*MOONISH, "spark", "materialize", str(data), str(tmp_path / "table"),
               "--checkpoint", str(tmp_path / "ck"), "--follow", "--interval-ms", "200",
               "--max-records-per-trigger", "400", "--master", "local[2]"]  # fmt: skip
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, start_new_session=True
    )
    with process:
        try:
            seen = _stderr_lines_until(process, b"moonish: batch 1: ", 180)
            if to_group:
                os.killpg(process.pid, signum)
            else:
                process.send_signal(signum)
            out, err = process.communicate(timeout=120)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
    stderr = (seen + err).decode()
    assert process.returncode == 0, stderr
    assert "Traceback" not in stderr and "Exception" not in stderr, stderr
    assert "moonish: batch 0: 400 rows in " in stderr, stderr
    assert "; shard 0: LSN 1..200, shard 1: LSN 1..200" in stderr, stderr
    assert out.startswith(f"table {tmp_path / 'table'}: version v-".encode()), out


# -- the Makefile's two installs -------------------------------------------------------------


def _make_dry_run(target: str, tmp_path: Path) -> str:
    venv = tmp_path / "venv"  # no stamp files there: make shows every install step
    out = subprocess.run(["make", "-n", target, f"VENV={venv}"], capture_output=True,
                         timeout=60, cwd=ROOT, check=True)  # fmt: skip
    return out.stdout.decode()


def test_make_demo_installs_only_the_package(tmp_path: Path) -> None:
    steps = _make_dry_run("demo", tmp_path)
    assert "pip install --quiet -e .\n" in steps
    assert ".[dev]" not in steps and "openjdk" not in steps and "redis-server" not in steps


@pytest.mark.parametrize("target", ["test", "lint", "bench", "demo-spark", "stress", "golden"])
def test_make_test_installs_the_development_set_and_java_17(tmp_path: Path, target: str) -> None:
    steps = _make_dry_run(target, tmp_path)
    assert "pip install --quiet -e '.[dev]'" in steps
    assert "apt-get install -y -qq openjdk-17-jre-headless" in steps
    assert "apt-get install -y -qq redis-server" in steps


# -- --segment-bytes on the commands that create shards --------------------------------------


def test_import_aof_rotates_segments_at_segment_bytes(tmp_path: Path) -> None:
    out = run("wal", "import-aof", str(SLICE), str(tmp_path / "data"), "--shards", "2",
              "--segment-bytes", "65536")  # fmt: skip
    assert out.returncode == 0, out.stderr
    for shard in ("shard-0", "shard-1"):
        shard_dir = tmp_path / "data" / shard
        sizes = [os.path.getsize(segment_path(str(shard_dir), base))
                 for base in list_segments(str(shard_dir))]  # fmt: skip
        assert len(sizes) >= 5 and max(sizes) <= 65536, sizes
        records = orjson.loads(out.stdout)["per_shard"][int(shard[-1])]
        assert verify_shard(shard_dir).records == records
    assert run("wal", "verify", str(tmp_path / "data")).returncode == 0


def test_segment_bytes_the_writer_refuses_is_refused_before_anything_is_created(
    tmp_path: Path,
) -> None:
    out = run("wal", "import-aof", str(SLICE), str(tmp_path / "data"), "--shards", "2",
              "--segment-bytes", "40")  # fmt: skip
    assert out.returncode == 2 and b"--segment-bytes" in out.stderr, out.stderr
    with pytest.raises(InvalidArgumentError, match="segment_bytes must exceed 40"):
        import_aof(SLICE, tmp_path / "data", 2, segment_bytes=40)
    assert not (tmp_path / "data").exists()
