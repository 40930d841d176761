"""What the retention tests look at: segment sizes, the LSNs a reader returns, a shard's files, and
a log that verifies and reads without a gap."""

from __future__ import annotations

import os
from pathlib import Path

from moonish.log.reader import ShardReader
from moonish.log.segment import list_segments, segment_path
from moonish.log.verify import verify_shard
from moonish.state.shard import ShardWriter
from moonish.values.model import state_image


def sizes(shard: Path) -> dict[int, int]:
    return {b: os.path.getsize(segment_path(str(shard), b)) for b in list_segments(str(shard))}


def lsns(shard: Path, start: int = 0) -> list[int]:
    """Every LSN a reader returns from ``start`` (raises if it is not retained)."""
    with ShardReader(shard) as reader:
        reader.seek(start)
        return [frame.lsn for frame in reader.poll(1_000_000)]


def log_files(shard: Path) -> list[str]:
    """The shard's files but the retention lock (which a dry run takes too)."""
    return sorted(name for name in os.listdir(shard) if name != "RETENTION.lock")


def keyspace_state(writer: ShardWriter) -> list[bytes]:
    return sorted(state_image(db, key, entry) for db, key, entry in writer.keyspace.items())


def assert_sound(shard: Path) -> None:
    """The log verifies and reads from its oldest LSN to its end without a gap."""
    report = verify_shard(shard)
    got = lsns(shard, list_segments(str(shard))[0])
    assert got == list(range(got[0], report.next_lsn)) and len(got) == report.records
