"""A capture's writers gather appends (moonish.redis.capture.apply ``GATHER_BYTES``): what a
batch appended is in the log, for a reader in another process, once ``apply_batch``
returns, each record storing the exact position a per-command append stored, and the
idle marks of ``tick`` are written too. Without a server."""

from __future__ import annotations

from pathlib import Path

from moonish.clock import FixedClock
from moonish.log.reader import ShardReader
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.redis.capture.apply import GATHER_BYTES, ResumePoint, ShardApplier
from moonish.redis.capture.status import CaptureOptions
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.routing.sources import decode_position, encode_position, stored_position
from moonish.slots import shard_of_key
from moonish.state.shard import ShardOptions, ShardWriter

REPLID = "8c1f" * 10


def _writers(root: Path, clock: FixedClock) -> list[ShardWriter]:
    log = WriterOptions(fsync=FsyncPolicy.NEVER, write_buffer_bytes=GATHER_BYTES)
    options = ShardOptions(log=log, expiry_sweep_ms=0)
    return [ShardWriter(root / f"shard-{n}", options, clock) for n in range(2)]


def _on_disk(shard_dir: Path) -> int:
    """Records a reader finds in the shard's segments now."""
    with ShardReader(shard_dir) as reader:
        reader.seek(1)
        found = 0
        while frames := reader.poll(4096):
            found += len(frames)
    return found


def test_a_batch_is_in_the_log_when_apply_batch_returns(tmp_path: Path) -> None:
    clock = FixedClock(1_700_000_000_000_000, step_us=1)
    writers = _writers(tmp_path, clock)
    try:
        applier = ShardApplier(writers, None, CaptureOptions(), clock)
        applier.start(ResumePoint(REPLID, 100, 0, [100, 100]))
        commands = [[b"SELECT", b"3"]] + [[b"SET", b"k%d" % i, b"v%d" % i] for i in range(200)]
        batch, offset = [], 101
        for argv in commands:
            batch.append(ReplCommand(offset, offset + 30, argv))
            offset += 30
        applier.apply_batch(batch, "redis://test")
        per_shard = [0, 0]
        for argv in commands[1:]:
            per_shard[shard_of_key(argv[1], 2)] += 1
        assert [_on_disk(tmp_path / f"shard-{n}") for n in range(2)] == per_shard
        for n in range(2):
            found = stored_position(str(tmp_path / f"shard-{n}"))
            assert found is not None
            last = max(
                end
                for (start, end, argv) in batch
                if argv[0] == b"SET" and shard_of_key(argv[1], 2) == n
            )
            assert found[1] == {"replid": REPLID, "offset": last, "db": 3}
        stored = writers[0].source
        assert stored == encode_position(decode_position(stored))  # the same bytes
    finally:
        for writer in writers:
            writer.close()


def test_the_marks_of_an_idle_shard_are_written_by_tick(tmp_path: Path) -> None:
    clock = FixedClock(1_700_000_000_000_000)
    writers = _writers(tmp_path, clock)
    try:
        options = CaptureOptions(mark_interval_ms=10, sync_interval_ms=3_600_000)
        applier = ShardApplier(writers, None, options, clock)
        applier.start(ResumePoint(REPLID, 100, 0, [100, 100]))
        key = next(b"k%d" % i for i in range(99) if shard_of_key(b"k%d" % i, 2) == 0)
        applier.apply_batch([ReplCommand(101, 131, [b"SET", key, b"v"])], "redis://test")
        assert _on_disk(tmp_path / "shard-1") == 0
        clock.advance(20_000)
        applier.tick()
        found = stored_position(str(tmp_path / "shard-1"))
        assert found is not None and found[1]["offset"] == 131
    finally:
        for writer in writers:
            writer.close()
