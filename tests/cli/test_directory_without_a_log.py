"""A directory with no log is an error, not an idle shard: every command that reads a shard refuses
it (exit 2, naming it) and creates nothing there; a shard whose segments were removed is still a
shard."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest

from moonish.log.segment import list_segments, segment_path
from moonish.state.shard import ShardWriter
from tests.support.cli import run


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


@pytest.mark.slow
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
