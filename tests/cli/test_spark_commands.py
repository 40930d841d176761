"""``moonish spark``: both commands refuse a table of moonish's earlier own format before Spark
starts; ``spark materialize --follow`` prints a progress line per micro-batch and stops cleanly
on Ctrl-C and SIGTERM. (``spark show`` without Spark: tests/cli/test_spark_show.py.)"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path

import pytest

from moonish.redis.aof.importer import import_aof
from tests.support.cli import MOONISH, default_sigint, run
from tests.support.paths import ROOT, SLICE

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real slice AOF in 2 shards (3,473 changes)."""
    path = tmp_path_factory.mktemp("data") / "data"
    import_aof(SLICE, path, 2)
    return path


# -- a table of the earlier own format -------------------------------------------------------
def test_a_table_of_the_earlier_own_format_is_refused_by_name(data: Path, tmp_path: Path) -> None:
    old = tmp_path / "old"
    (old / "v-00000000000000000000").mkdir(parents=True)
    (old / "_moonish_table.json").write_bytes(b'{"format": "moonish-table", "version": 1}')
    for args in (
        ("spark", "show", str(old)),
        ("spark", "materialize", str(data), str(old), "--checkpoint", str(tmp_path / "ck")),
    ):
        out = run(*args)
        assert out.returncode == 5, out.stderr
        assert b"moonish's own format from before Delta Lake" in out.stderr, out.stderr
        assert str(old).encode() in out.stderr and out.stdout == b""


# -- spark materialize --follow: a progress line per micro-batch, a clean stop -----------------


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
    command = [
        *MOONISH,
        "spark",
        "materialize",
        str(data),
        str(tmp_path / "table"),
        "--checkpoint",
        str(tmp_path / "ck"),
        "--follow",
        "--interval-ms",
        "200",
        "--max-records-per-trigger",
        "400",
        "--master",
        "local[2]",
    ]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        start_new_session=True,
        preexec_fn=default_sigint,
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
    assert out.startswith(f"table {tmp_path / 'table'}: Delta version ".encode()), out


@pytest.mark.parametrize(
    ("option", "says"),
    [
        (["--max-files-per-trigger", "2"], b"--max-files-per-trigger applies to an export"),
        (["--max-records-per-trigger", "2", "--no-consumer"], None),
    ],
)
def test_a_trigger_limit_of_the_other_source_is_refused_before_spark(
    data: Path, tmp_path: Path, option: list[str], says: bytes | None
) -> None:
    """``--max-files-per-trigger`` limits an export directory's files: on a data directory
    (or a server) it is refused with exit 2, not ignored; ``--max-records-per-trigger`` on an
    export directory likewise."""
    source = data
    if says is None:  # an export directory
        source = tmp_path / "export"
        assert run("cdc", "export", str(data), str(source), "--no-consumer").returncode == 0
        says = b"--max-records-per-trigger applies to a data directory or a server"
    out = run(
        "spark",
        "materialize",
        str(source),
        str(tmp_path / "t"),
        "--checkpoint",
        str(tmp_path / "ck"),
        *option,
    )
    assert out.returncode == 2 and says in out.stderr, out.stderr
    assert not (tmp_path / "t").exists()
