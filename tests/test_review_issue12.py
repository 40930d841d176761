"""Review of issue 12 (merged reads, tokens, consumers, retention, closed time): each test
reproduces one bug found in review and fails until it is fixed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import moonish
from cli.main import main
from moonish.cdc.merged_read import MergedTail, read_merged
from moonish.clock import FixedClock
from moonish.datadir import consumers
from moonish.errors import CorruptionError
from moonish.log.format import FRAME_HEADER_BYTES
from moonish.log.reader import ShardReader
from moonish.log.records import KvChange, ViewType
from moonish.log.segment import list_segments, segment_path
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from tests.conftest import START_US, kv

ROOT = Path(__file__).resolve().parent.parent


def _writer(shard: Path, k: int, clock: FixedClock, **options: object) -> WalWriter:
    opts = {"shard_id": k, "fsync": FsyncPolicy.NEVER, "heartbeat_ms": None, **options}
    return WalWriter(shard, WriterOptions(**opts), clock)  # type: ignore[arg-type]


def _stream_off(n: int) -> KvChange:
    """A change written while the shard's stream was off: no event, but an LSN."""
    return KvChange("u", 0, b"SET", f"off{n}".encode(), b"", b"", ViewType.OFF)


# -- 1. damage the reader finds mid-merge must hold the other shards back ----------------------


def _interleaved_with_damage(data: Path) -> int:
    """Two shards, six records each, commit times interleaved 10 µs apart (shard 0 at
    +10, +30, ...; shard 1 at +20, +40, ...); shard 0's third record (commit +50) gets a
    flipped payload byte (a CRC failure in the middle of the segment). Returns the damaged
    record's commit time."""
    clock = FixedClock(START_US)
    writers = [_writer(data / f"shard-{k}", k, clock) for k in range(2)]
    try:
        for n in range(6):
            for k in range(2):
                clock.advance(10)
                writers[k].append(kv(f"s{k}n{n}".encode()))
    finally:
        for writer in writers:
            writer.close()
    shard0 = str(data / "shard-0")
    reader = ShardReader(shard0)
    try:
        reader.seek(1)
        third = reader.poll(10)[2]
    finally:
        reader.close()
    path = segment_path(shard0, list_segments(shard0)[0])
    raw = bytearray(Path(path).read_bytes())
    raw[third.offset + FRAME_HEADER_BYTES + 3] ^= 0xFF
    Path(path).write_bytes(bytes(raw))
    return third.commit_us


def test_damage_found_by_the_shard_reader_stops_the_merge_at_its_commit_time(
    tmp_path: Path,
) -> None:
    """CorruptionError comes "once the events that come before it in stream order are
    returned". Shard 1's records committed after the damaged record of shard 0 come after it
    in stream order, so they must not be delivered before the error (damage that the
    *encoder* finds does hold the frontier; damage the *reader* finds after returning the
    valid frames before it marks the feed ``at_end`` and lets shard 1 run on)."""
    damaged_us = _interleaved_with_damage(tmp_path)
    delivered: list[tuple[int, int, int]] = []
    token: object = "earliest"
    with pytest.raises(CorruptionError):
        for _ in range(10):
            result = read_merged(tmp_path, token, 100)  # type: ignore[arg-type]
            delivered += [(e.shard, e.lsn, e.commit_us) for e in result.events]
            token = result.token
    after = [row for row in delivered if row[0] == 1 and row[2] > damaged_us]
    assert not after, f"shard 1 ran past shard 0's damage (commit {damaged_us}): {after}"

    streamed: list[tuple[int, int, int]] = []
    with MergedTail(tmp_path, "earliest") as stream, pytest.raises(CorruptionError):
        for event in stream:
            streamed.append((event.shard, event.lsn, event.commit_us))
    after = [row for row in streamed if row[0] == 1 and row[2] > damaged_us]
    assert not after, f"the tail ran past shard 0's damage (commit {damaged_us}): {after}"


# -- 2. a writer restarted after a crash right after rotation lowers commit times ------------


def test_commit_times_never_decrease_after_a_crash_right_after_rotation(tmp_path: Path) -> None:
    """The writer clamps commit times to the last record of the *newest segment* and to
    closed time; after a crash right after a rotation the newest segment is empty, the last
    record is in the previous one, and a writer whose clock is behind stamps a commit time
    below it (the shard's order and any resolved marker already emitted are broken)."""
    shard = tmp_path / "shard-0"
    ahead_us = START_US + 10_000_000
    child = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from moonish.clock import FixedClock
        from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
        from tests.conftest import kv
        options = WriterOptions(fsync=FsyncPolicy.NEVER, heartbeat_ms=None, segment_bytes=300,
                                on_rotate=lambda base: os._exit(0))  # killed right after it
        writer = WalWriter({str(shard)!r}, options, FixedClock({ahead_us}))
        while True:
            writer.append(kv(b"k"))
        """
    )
    subprocess.run([sys.executable, "-c", child], check=True, cwd=ROOT, timeout=30)
    bases = list_segments(str(shard))
    assert len(bases) == 2  # the newest, created by the rotation, holds no record
    with _writer(shard, 0, FixedClock(START_US)) as writer:  # a clock 10 s behind
        writer.append(kv(b"after"))
    with moonish.tail(shard, 0) as stream:
        commits = [event.commit_us for event in stream]
    assert commits[-1] >= commits[-2], (
        f"commit time went back from {commits[-2]} to {commits[-1]} across the restart"
    )


# -- 3. a consumer of a shard directory named shard-<k> is looked up in its parent ------------


def test_a_consumer_created_on_a_shard_directory_is_read_from_it(tmp_path: Path) -> None:
    """consumers.create/ack/lag treat a shard directory as a data directory of one shard whose
    consumers live in ``<shard>/consumers`` (docs and moonish.datadir.consumers), but
    merged_read.consumer_root maps ``.../shard-0`` to its parent: reading the consumer it
    created fails with ConsumerNotFoundError (or reads another consumer of the same name)."""
    shard = tmp_path / "shard-0"
    with _writer(shard, 0, FixedClock(START_US, 1)) as writer:
        writer.append(kv(b"a"))
        writer.append(kv(b"b"))
    consumers.create(shard, "billing", (0,))
    result = moonish.read(shard, consumer="billing")
    assert [event.lsn for event in result.events] == [1, 2]
    assert main(["cdc", "read", str(shard), "--consumer", "billing", "--ack"]) == 0
    assert consumers.load(shard, "billing").positions == (2,)


# -- 4. MergedTail's token does not move past trailing stream-off records ---------------------


def test_the_tail_token_moves_past_records_of_a_disabled_stream(tmp_path: Path) -> None:
    """Records written with the stream off produce no event but must move the position.
    read_merged does; MergedTail drops the token of a round that found only such records,
    so after a full poll of events followed by stream-off records its token (what `cdc tail
    --cursor-file` writes and `--ack` confirms) stays behind: a caught-up consumer keeps
    lag and pins the log until max_pinned_bytes marks it lost."""
    shard = tmp_path / "shard-0"
    with _writer(shard, 0, FixedClock(START_US, 1)) as writer:
        for n in range(1024):  # one full poll of events (TAIL_BATCH_RECORDS)
            writer.append(kv(f"k{n}".encode()))
        for n in range(3):
            writer.append(_stream_off(n))
    expected = read_merged(tmp_path, "earliest", 10_000).token
    assert str(expected) == "m1.d1027"
    with MergedTail(tmp_path, "earliest") as stream:
        assert sum(1 for _ in stream) == 1024
        assert stream.token == expected
    with MergedTail(tmp_path, "earliest") as stream:
        for _ in stream.batches():
            pass
        assert stream.token == expected
