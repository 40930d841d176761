"""Data directories for the consumer, lag and retention tests: shards of plain records with known
commit times, and keyspace shards with a snapshot."""

from __future__ import annotations

from pathlib import Path

from moonish.clock import FixedClock
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.wal import START_US, kv


def fill(
    shard: Path,
    records: int,
    *,
    segment_bytes: int = 1024,
    first_us: int = START_US,
    step_us: int = 1000,
    shard_id: int = 0,
) -> None:
    """Append ``records`` plain kv records; record ``i`` (1-based LSN ``i`` of a new shard)
    is committed at ``first_us + (i - 1) * step_us``."""
    options = WriterOptions(
        shard_id=shard_id, fsync=FsyncPolicy.NEVER, segment_bytes=segment_bytes, heartbeat_ms=None
    )
    with WalWriter(shard, options, FixedClock(START_US)) as writer:
        base = writer.next_lsn - 1
        for i in range(records):
            writer.append(kv(b"k%d" % i, b"v" * 40), first_us + (base + i) * step_us)


def data_dir(tmp_path: Path, shards: int = 2, records: int = 100) -> Path:
    root = tmp_path / "data"
    for k in range(shards):
        fill(root / f"shard-{k}", records, shard_id=k)
    return root


def keyspace_shard(path: Path, commands: int, *, segment_bytes: int = 2048) -> None:
    """A ShardWriter shard of ``commands`` SETs, then a checkpoint (snapshot at the end)."""
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=segment_bytes, heartbeat_ms=None),
        expiry_sweep_ms=0,
    )
    with ShardWriter(path, options, FixedClock(START_US, 1000)) as writer:
        for i in range(commands):
            writer.execute(0, ["SET", f"key:{i % 17}", "v" * 30])
        writer.checkpoint()
