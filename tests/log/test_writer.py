"""The writer: dense LSNs, atomic batches, rotation, crash recovery, one writer per shard."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import moonish
from moonish.clock import FixedClock
from moonish.errors import CorruptionError, InvalidArgumentError, WriterLockedError
from moonish.log.format import (
    FRAME_HEADER_BYTES,
    FRAME_TRAILER_BYTES,
    SEGMENT_HEADER_BYTES,
    segment_name,
)
from moonish.log.reader import ShardReader
from moonish.log.segment import list_segments
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from tests.support.golden import as_if_killed, frame_offsets, segments
from tests.support.paths import ROOT
from tests.support.wal import START_US, kv, open_writer, writer_at


def read_lsns(path: Path) -> list[int]:
    reader = ShardReader(path)
    reader.seek(0)
    return [frame.lsn for frame in reader.poll(1_000_000)]


def test_lsns_start_at_one_and_are_dense(shard: Path) -> None:
    with open_writer(shard) as writer:
        assert writer.append(kv(b"a")) == 1
        assert writer.append_batch([kv(b"b"), kv(b"c"), kv(b"d")]) == [2, 3, 4]
        assert writer.append(kv(b"e")) == 5
        assert writer.next_lsn == 6
    assert read_lsns(shard) == [1, 2, 3, 4, 5]


def test_empty_batch_is_refused(shard: Path) -> None:
    with open_writer(shard) as writer, pytest.raises(ValueError):
        writer.append_batch([])


def test_rotation_keeps_segments_under_the_size_and_names_them_by_base_lsn(shard: Path) -> None:
    with open_writer(shard, segment_bytes=300) as writer:
        for i in range(40):
            writer.append(kv(b"key-%d" % i))
    segs = segments(shard)
    assert len(segs) > 5
    assert all(seg.stat().st_size <= 300 for seg in segs)
    bases = [int(seg.stem, 16) for seg in segs]
    assert bases[0] == 1 and bases == sorted(bases)
    assert read_lsns(shard) == list(range(1, 41))


def test_a_batch_larger_than_a_segment_gets_its_own_segment(shard: Path) -> None:
    with open_writer(shard, segment_bytes=200) as writer:
        writer.append(kv(b"first"))
        lsns = writer.append_batch([kv(b"k%d" % i, b"x" * 50) for i in range(10)])
        writer.append(kv(b"after"))
    assert lsns == list(range(2, 12))
    assert (shard / segment_name(2)).exists() and (shard / segment_name(12)).exists()
    assert read_lsns(shard) == list(range(1, 13))


def test_reopen_continues_lsns(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append_batch([kv(b"a"), kv(b"b")])
    with open_writer(shard) as writer:
        assert writer.recovery.truncated_bytes == 0
        assert writer.append(kv(b"c")) == 3


def test_recovery_cuts_a_torn_record_and_reuses_no_visible_lsn(shard: Path) -> None:
    with open_writer(shard) as writer:
        for key in (b"a", b"b", b"c"):
            writer.append(kv(key))
    seg = segments(shard)[-1]
    last = frame_offsets(seg)[-1]
    os.truncate(seg, last + FRAME_HEADER_BYTES - 1)
    as_if_killed(shard)
    assert read_lsns(shard) == [1, 2]
    with open_writer(shard) as writer:
        assert writer.recovery.truncated_bytes == FRAME_HEADER_BYTES - 1
        assert writer.next_lsn == 3
        assert writer.append(kv(b"c2")) == 3
    assert read_lsns(shard) == [1, 2, 3]
    overhead = FRAME_HEADER_BYTES + FRAME_TRAILER_BYTES
    assert seg.stat().st_size == frame_offsets(seg)[-1] + overhead + len(b"c2") + 24


def test_recovery_cuts_a_torn_batch_whole(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))
        writer.append_batch([kv(b"b"), kv(b"c"), kv(b"d")])
    seg = segments(shard)[-1]
    os.truncate(seg, frame_offsets(seg)[-1] + 5)  # first two frames of the batch are complete
    as_if_killed(shard)
    assert read_lsns(shard) == [1]
    with open_writer(shard) as writer:  # LSNs 2 and 3 were written whole: never given again
        assert writer.recovery.discarded == (2, 3)
        assert writer.next_lsn == 4
        assert writer.append(kv(b"x")) == 4
    assert read_lsns(shard) == [1, 4]


def test_writer_refuses_to_open_over_damage_that_is_not_a_torn_tail(shard: Path) -> None:
    with open_writer(shard) as writer:
        for key in (b"a", b"b", b"c"):
            writer.append(kv(key))
    seg = segments(shard)[-1]
    data = bytearray(seg.read_bytes())
    data[frame_offsets(seg)[1] + FRAME_HEADER_BYTES] ^= 0xFF
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptionError) as info:
        open_writer(shard)
    assert info.value.path == str(seg) and info.value.lsn == 2
    assert info.value.offset == frame_offsets(seg)[1]
    assert seg.read_bytes() == bytes(data)  # nothing was truncated away


def test_second_writer_in_the_same_process_is_refused(shard: Path) -> None:
    with open_writer(shard):
        with pytest.raises(WriterLockedError) as info:
            open_writer(shard)
        assert f"pid={os.getpid()}" in info.value.holder
    with open_writer(shard) as writer:  # released on close
        assert writer.next_lsn == 1


def test_second_writer_in_another_process_is_refused(shard: Path) -> None:
    code = (
        "import sys, time\n"
        "from moonish.log.writer import WalWriter\n"
        "w = WalWriter(sys.argv[1]); print('ready', flush=True); time.sleep(30)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", code, str(shard)], stdout=subprocess.PIPE, text=True
    ) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
            with pytest.raises(WriterLockedError) as info:
                open_writer(shard)
            assert f"pid={holder.pid}" in str(info.value)
        finally:
            holder.kill()
    with open_writer(shard):  # the lock died with its process
        pass


def test_shard_id_is_kept_and_checked(shard: Path) -> None:
    with open_writer(shard, shard_id=7) as writer:
        writer.append(kv(b"a"))
    with open_writer(shard) as writer:
        assert writer.shard_id == 7
    with pytest.raises(InvalidArgumentError):
        open_writer(shard, shard_id=3)


@pytest.mark.parametrize("policy", list(FsyncPolicy))
def test_every_durability_policy_writes_readable_records(shard: Path, policy: FsyncPolicy) -> None:
    writer = WalWriter(shard, WriterOptions(fsync=policy, fsync_interval_ms=5))
    writer.append(kv(b"a"))
    writer.append_batch([kv(b"b"), kv(b"c")])
    if policy is FsyncPolicy.EVERY:
        deadline = time.monotonic() + 5
        while writer._dirty and time.monotonic() < deadline:  # the background syncer runs
            time.sleep(0.005)
        assert not writer._dirty
    writer.close()
    writer.close()  # idempotent
    assert read_lsns(shard) == [1, 2, 3]


def test_closed_writer_refuses_appends(shard: Path) -> None:
    writer = open_writer(shard)
    writer.close()
    with pytest.raises(InvalidArgumentError):
        writer.append(kv(b"a"))


def test_new_shard_has_one_empty_segment(shard: Path) -> None:
    with open_writer(shard):
        pass
    assert [seg.name for seg in segments(shard)] == [segment_name(1)]
    assert segments(shard)[0].stat().st_size == SEGMENT_HEADER_BYTES


# -- commit times never go back across a crash right after a rotation --------------------------
def test_commit_times_never_decrease_after_a_crash_right_after_rotation(tmp_path: Path) -> None:
    """After a crash right after a rotation the newest segment is empty and the last record
    is in the previous one: a writer whose clock is behind must still clamp its commit times
    to that record (not only to the newest segment's) and to closed time, or the shard's
    order and any resolved marker already emitted would be broken."""
    shard = tmp_path / "shard-0"
    ahead_us = START_US + 10_000_000
    child = textwrap.dedent(
        f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from moonish.clock import FixedClock
        from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
        from tests.support.wal import kv
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
    with writer_at(shard, 0, FixedClock(START_US)) as writer:  # a clock 10 s behind
        writer.append(kv(b"after"))
    with moonish.tail(shard, 0) as stream:
        commits = [event.commit_us for event in stream]
    assert commits[-1] >= commits[-2], (
        f"commit time went back from {commits[-2]} to {commits[-1]} across the restart"
    )
