"""``moonish wal checkpoint`` of a shard a running writer holds asks that writer
(moonish.state.requests): the snapshot is written while the writer goes on appending, its
checkpoint record follows, and the command returns once it is in place; a shard no writer
holds is still opened and written by the command itself."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from moonish.state.snapshot import read_snapshot
from tests.support.cli import run
from tests.support.paths import ROOT
from tests.support.wal import checkpoints

WRITER = """
import sys, time
from pathlib import Path
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.shard import ShardOptions, ShardWriter
shard, stop = Path(sys.argv[1]), Path(sys.argv[2])
options = ShardOptions(expiry_sweep_ms=0, snapshots=SnapshotPolicy.off())
with ShardWriter(shard, options) as writer:
    i = 0
    while not stop.exists():
        writer.execute(0, [b"SET", b"k%d" % (i % 500), b"v%d" % i])
        i += 1
        if i == 1000:
            print("ready", flush=True)
        time.sleep(0.0002)
    print(writer.next_lsn - 1, flush=True)
"""


@pytest.mark.slow
def test_checkpoint_asks_the_running_writer(tmp_path: Path) -> None:
    shard, stop = tmp_path / "shard", tmp_path / "stop"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(shard), str(stop)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        assert writer.stdout is not None
        assert writer.stdout.readline() == b"ready\n"
        out = run("wal", "checkpoint", str(shard), "--label", "before-upgrade")
        assert out.returncode == 0, out.stderr
        line = orjson.loads(out.stdout)
        assert line["by"] == "the running writer" and line["keys"] == 500
        snapshot = read_snapshot(line["snapshot"])
        assert snapshot.lsn == line["lsn"] >= 1000 and len(snapshot.images) == 500
        time.sleep(0.1)  # the writer goes on appending
    finally:
        stop.touch()
        last, _ = writer.communicate(timeout=30)
    assert writer.returncode == 0
    assert int(last) > line["lsn"]
    assert [(c.checkpoint_lsn, c.label) for c in checkpoints(shard)] == [
        (line["lsn"], "before-upgrade")
    ]
    again = run("wal", "checkpoint", str(shard))  # no writer now: written here
    assert again.returncode == 0, again.stderr
    offline = orjson.loads(again.stdout)
    assert "by" not in offline and offline["lsn"] == int(last)
