"""Shards written step by step with one shared clock, so that commit times interleave across shards
(merged reads, the server, the remote client)."""

from __future__ import annotations

from pathlib import Path

from moonish.clock import FixedClock
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from tests.support.wal import START_US, kv

Step = tuple[int, int, int]  # (shard, records in the append (>1: an atomic batch), µs to advance)


def write_steps(data: Path, shards: int, steps: list[Step], segment_bytes: int = 4096) -> None:
    """Append ``steps`` to ``shards`` shards sharing one clock (commit times interleave)."""
    clock = FixedClock(START_US)
    options = WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=segment_bytes)
    writers = [
        WalWriter(data / f"shard-{k}", WriterOptions(**{**_fields(options), "shard_id": k}), clock)
        for k in range(shards)
    ]
    try:
        for n, (shard, size, advance) in enumerate(steps):
            clock.advance(advance)
            records = [kv(f"k{n}.{i}".encode()) for i in range(size)]
            if size == 1:
                writers[shard].append(records[0])
            else:
                writers[shard].append_batch(records)
    finally:
        for writer in writers:
            writer.close()


def _fields(options: WriterOptions) -> dict[str, object]:
    return {name: getattr(options, name) for name in options.__slots__}


WRITER = """
import sys, time
from pathlib import Path
from tests.support.steps import write_steps
data, rounds = Path(sys.argv[1]), int(sys.argv[2])
for n in range(rounds):
    write_steps(data, 2, [(n % 2, 1 + (n % 5 == 0) * 2, 1), ((n + 1) % 2, 1, 1)])
    time.sleep(0.002)
"""
