"""A closed stdout is a normal end: piping into ``head`` and a stdout closed before the first write
exit 0 without a word; a broken pipe that is not stdout is still a failure."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import MOONISH
from tests.support.paths import ROOT
from tests.support.wal import kv, open_writer

SHELL_MOONISH = f"{sys.executable} -c 'from cli.main import entry; entry()'"


@pytest.fixture(scope="module")
def big_shard(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shard of 5,000 records: about 2 MB of envelopes, far more than a pipe buffer."""
    shard = tmp_path_factory.mktemp("big") / "shard-0"
    with open_writer(shard) as writer:
        for start in range(0, 5000, 500):
            writer.append_batch([kv(b"key-%d" % i, b"v" * 100) for i in range(start, start + 500)])
    return shard


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
@pytest.mark.slow
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
            stdout=write_end,
            stderr=subprocess.PIPE,
            timeout=60,
            cwd=ROOT,
        )
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
        capture_output=True,
        timeout=60,
        cwd=ROOT,
    )
    assert out.returncode == 1 and b"a socket went away" in out.stderr
