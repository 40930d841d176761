"""``--segment-bytes`` on the commands that create shards: ``wal import-aof`` rotates segments at
that size, and a size the writer refuses is refused before anything is created."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson
import pytest

from moonish.errors import InvalidArgumentError
from moonish.log.segment import list_segments, segment_path
from moonish.log.verify import verify_shard
from moonish.redis.aof.importer import import_aof
from moonish.state.snapshot import list_snapshots
from tests.support.cli import run
from tests.support.paths import SLICE
from tests.support.wal import checkpoints


@pytest.mark.slow
def test_import_aof_rotates_segments_at_segment_bytes(tmp_path: Path) -> None:
    out = run(
        "wal",
        "import-aof",
        str(SLICE),
        str(tmp_path / "data"),
        "--shards",
        "2",
        "--segment-bytes",
        "65536",
    )
    assert out.returncode == 0, out.stderr
    for shard in ("shard-0", "shard-1"):
        shard_dir = tmp_path / "data" / shard
        sizes = [
            os.path.getsize(segment_path(str(shard_dir), base))
            for base in list_segments(str(shard_dir))
        ]
        assert len(sizes) >= 5 and max(sizes) <= 65536, sizes
        records = orjson.loads(out.stdout)["per_shard"][int(shard[-1])]
        assert verify_shard(shard_dir).records == records
    assert run("wal", "verify", str(tmp_path / "data")).returncode == 0


def test_segment_bytes_the_writer_refuses_is_refused_before_anything_is_created(
    tmp_path: Path,
) -> None:
    out = run(
        "wal",
        "import-aof",
        str(SLICE),
        str(tmp_path / "data"),
        "--shards",
        "2",
        "--segment-bytes",
        "40",
    )
    assert out.returncode == 2 and b"--segment-bytes" in out.stderr, out.stderr
    with pytest.raises(InvalidArgumentError, match="segment_bytes must exceed 40"):
        import_aof(SLICE, tmp_path / "data", 2, segment_bytes=40)
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_import_aof_takes_snapshots_by_the_snapshot_options(tmp_path: Path) -> None:
    """``--snapshot-every-records`` makes each writer snapshot on its own while it imports
    (a checkpoint record labelled by the rule after each); every rule 0: none; only the close
    rule: one, as the import ends."""
    rules_off = ["--snapshot-every-records", "0", "--snapshot-every-bytes", "0"]
    rules_off += ["--snapshot-every-seconds", "0"]

    def imported(name: str, *options: str) -> subprocess.CompletedProcess[bytes]:
        data = str(tmp_path / name)
        return run("wal", "import-aof", str(SLICE), data, "--shards", "2", *options)

    every = imported("every", "--snapshot-every-records", "300")
    never = imported("never", *rules_off, "--snapshot-on-close-records", "0")
    at_close = imported("at_close", *rules_off, "--snapshot-on-close-records", "100")
    assert every.returncode == never.returncode == at_close.returncode == 0, (
        every.stderr,
        never.stderr,
        at_close.stderr,
    )
    for shard in ("shard-0", "shard-1"):
        taken = list_snapshots(str(tmp_path / "every" / shard))
        assert len(taken) == 2, taken  # the two newest kept
        assert list_snapshots(str(tmp_path / "never" / shard)) == []
        closing = checkpoints(tmp_path / "at_close" / shard)
        assert [mark.label for mark in closing] == ["auto:close"]
        assert list_snapshots(str(tmp_path / "at_close" / shard)) == [closing[0].checkpoint_lsn]
        marks = checkpoints(tmp_path / "every" / shard)
        assert marks[-1].checkpoint_lsn == taken[-1]
        assert {mark.label for mark in marks} == {"auto:records"}
    for data in ("every", "never"):
        assert run("wal", "verify", str(tmp_path / data)).returncode == 0
    again = run("wal", "import-aof", str(SLICE), str(tmp_path / "every"), "--shards", "2")
    assert again.returncode == 0, again.stderr
    for shard in ("shard-0", "shard-1"):  # the rebuild starts at the newest snapshot
        newest = list_snapshots(str(tmp_path / "every" / shard))[-1]
        assert f"{shard}: rebuilding the keyspace: LSN {newest:,} of ".encode() in again.stderr
