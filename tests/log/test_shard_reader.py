"""ShardReader under a live writer: a follower drops stale bytes after a new writer cuts a torn
tail, survives fills, rotations and listings that race it, never spins on a tail cut under it,
and delivers every record before a damaged segment, then the error, skipping none."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

import crc32c
import pytest

import moonish.log.reader
import moonish.log.repair
import moonish.log.writer
from moonish.errors import (
    CorruptionError,
    LsnNotRetainedError,
)
from moonish.log.format import MAGIC, SEGMENT_HEADER, SEGMENT_HEADER_CRC, RecordType, segment_name
from moonish.log.frames import encode_frame
from moonish.log.payloads import encode_payload
from moonish.log.reader import ShardReader
from moonish.log.segment import list_segments, segment_path
from tests.support.golden import as_if_killed, segments
from tests.support.wal import flip, kv, open_writer


def test_a_follower_drops_stale_bytes_after_a_new_writer_cuts_a_torn_tail(shard: Path) -> None:
    with open_writer(shard) as writer:
        for i in range(5):
            writer.append(kv(b"key-%d" % i))
    with ShardReader(shard) as reader:
        reader.seek(1)
        assert [f.lsn for f in reader.poll(100)] == [1, 2, 3, 4, 5]
        seg = segments(shard)[-1]
        # the start of a frame that never finished: a torn tail, longer than what follows
        torn = encode_frame(6, RecordType.KV, encode_payload(kv(b"big", b"x" * 4000))[1], 1)
        with open(seg, "ab") as handle:
            handle.write(torn[:300])
        assert reader.poll(100) == []  # nothing yet
        with open_writer(shard) as writer:  # cuts the torn bytes, appends a shorter record
            assert writer.recovery.discarded == (6, 6)  # the torn frame's header names LSN 6
            assert writer.append(kv(b"new")) == 7
        assert [f.lsn for f in reader.poll(100)] == [7]
        with open_writer(shard, segment_bytes=400) as writer:  # rotate: still no error
            for i in range(20):
                writer.append(kv(b"more-%d" % i))
        got = []
        while frames := reader.poll(100):
            got += [f.lsn for f in frames]
        assert got == list(range(8, 28))


def test_a_reader_at_an_empty_segment_survives_fill_and_rotation_during_its_listing(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def newest() -> int:
        return max(int(path.stem, 16) for path in segments(shard))

    monkeypatch.setattr(moonish.log.reader, "EDGE_LISTING_INTERVAL_S", 0.0)  # list every poll
    with open_writer(shard, segment_bytes=400) as writer, ShardReader(shard) as reader:
        while len(segments(shard)) < 3:
            writer.append(kv(b"key"))
        reader.seek(1)
        while reader.poll(1000):
            pass
        # the reader is at the end of the newest segment: it finds no more bytes there and
        # lists the directory, and between its fstat and that listing the writer fills the
        # segment and rotates (the reader must read the rest, not report a gap)
        rotated = newest()
        while newest() == rotated:
            writer.append(kv(b"fill"))
        assert reader.poll(1000)
        start, real_list, raced = writer.next_lsn, moonish.log.reader.list_segments, []

        def list_after_the_writer_moved(shard_dir: str) -> list[int]:
            if not raced:
                raced.append(newest())
                while newest() == raced[0]:
                    writer.append(kv(b"race"))
            return real_list(shard_dir)

        monkeypatch.setattr(moonish.log.reader, "list_segments", list_after_the_writer_moved)
        got = []
        while frames := reader.poll(1000):
            got += [f.lsn for f in frames]
        assert raced and got == list(range(start, writer.next_lsn))


def test_records_before_a_damaged_segment_are_delivered_then_the_error_and_none_skipped(
    shard: Path,
) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
    damaged = segments(shard)[3]
    first_damaged = int(damaged.stem, 16)
    flip(damaged, 0)  # the magic
    reader = ShardReader(shard)
    reader.seek(1)
    assert [f.lsn for f in reader.poll(1000)] == list(range(1, first_damaged))
    with pytest.raises(CorruptionError, match="magic") as info:
        reader.poll(1000)
    assert info.value.path == str(damaged)
    flip(damaged, 0)  # restored: the reader continues exactly where it stopped
    assert [f.lsn for f in reader.poll(1000)] == list(range(first_damaged, 61))
    reader.close()


# -- found by the crash adversary (tests/log/test_killed_writers.py) ---------------------------
class _FstatHook:
    """Stands in for ``os`` in moonish.log.reader: runs ``hook`` once, right after the
    reader's first ``fstat``, the moment a racing writer acts."""

    def __init__(self, hook: Callable[[], None]) -> None:
        self.hook, self.fired = hook, False

    def __getattr__(self, name: str) -> object:
        return getattr(os, name)

    def fstat(self, fd: int) -> os.stat_result:
        result = os.fstat(fd)
        if not self.fired:
            self.fired = True
            self.hook()
        return result


def test_a_tail_cut_between_fstat_and_pread_does_not_make_the_reader_spin(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = {"segment_bytes": 4096}
    with open_writer(shard, **options) as writer:
        for i in range(10):
            writer.append(kv(b"k%d" % i, b"v" * 300))
    with open(segments(shard)[-1], "ab") as handle:
        handle.write(b"\x01" * 10)  # a header cut short: a torn tail
    as_if_killed(shard, started_at=1)
    with ShardReader(shard) as reader:
        reader.seek(1)
        assert len(reader.poll(100)) == 10

        def new_writer_cuts_and_rotates() -> None:
            with open_writer(shard, **options) as writer:
                writer.append(kv(b"new", b"v" * 1000))  # the segment is full: a new one

        monkeypatch.setattr(moonish.log.reader, "os", _FstatHook(new_writer_cuts_and_rotates))
        done: list[list[int]] = []
        poller = threading.Thread(
            target=lambda: done.append([f.lsn for f in reader.poll(100)]), daemon=True
        )
        poller.start()
        poller.join(10)
        assert done == [[11]], "the reader spun in _fetch"


def test_a_listing_that_misses_a_just_created_segment_is_not_a_gap(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(moonish.log.reader, "EDGE_LISTING_INTERVAL_S", 0.0)  # list every poll
    with open_writer(shard, segment_bytes=4096) as writer, ShardReader(shard) as reader:
        for i in range(11):  # segment 1 holds LSNs 1..11
            writer.append(kv(b"k%d" % i, b"v" * 300))
        reader.seek(1)
        assert len(reader.poll(100)) == 11
        real_list, calls = moonish.log.reader.list_segments, []

        def racing_listing(shard_dir: str) -> list[int]:
            if calls:
                return real_list(shard_dir)
            calls.append(1)  # the writer rotates twice while the directory is listed ...
            for i in range(11, 23):
                writer.append(kv(b"k%d" % i, b"v" * 300))
            # ... and the listing (readdir is no snapshot) holds the second new segment only
            return [base for base in real_list(shard_dir) if base != 12]

        monkeypatch.setattr(moonish.log.reader, "list_segments", racing_listing)
        assert [f.lsn for f in reader.poll(100)] == list(range(12, 24))
        monkeypatch.setattr(
            moonish.log.reader, "list_segments", lambda d: [b for b in real_list(d) if b != 12]
        )
        reader.seek(15)  # positioning through such a listing, too
        assert [f.lsn for f in reader.poll(100)] == list(range(15, 24))


def lsns(frames: list[object]) -> list[int]:
    return [frame.lsn for frame in frames]  # type: ignore[attr-defined]


def test_a_follower_of_an_empty_version_1_segment_follows_the_writer_that_replaces_it(
    shard: Path,
) -> None:
    shard.mkdir()
    head = SEGMENT_HEADER.pack(MAGIC, 1, 40, 0, 1, 1, 0)
    (shard / segment_name(1)).write_bytes(head + SEGMENT_HEADER_CRC.pack(crc32c.crc32c(head)))
    with ShardReader(shard) as reader:
        reader.seek(0)
        assert reader.poll(10) == []
        with open_writer(shard) as writer:  # a version 2 segment under the same name
            for i in range(3):
                writer.append(kv(b"k%d" % i))
            assert lsns(reader.poll(10)) == [1, 2, 3]
        assert reader.poll(10) == []  # and no false "records were lost" after the close


def test_retention_under_a_follower_is_not_retained_not_corruption(shard: Path) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(20):
            writer.append(kv(b"k%d" % i))
    bases = list_segments(str(shard))
    with ShardReader(shard) as reader:
        reader.seek(1)
        assert lsns(reader.poll(2)) == [1, 2]
        for base in bases[:2]:  # the two oldest segments, while the follower is in the first
            os.unlink(segment_path(str(shard), base))
        got = lsns(reader.poll(100))  # what it still holds open it may deliver
        with pytest.raises(LsnNotRetainedError) as info:
            reader.poll(100)
        assert info.value.oldest_lsn == bases[2] and got == list(range(3, bases[1]))


def test_removing_every_segment_under_a_follower_is_not_retained(shard: Path) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(20):
            writer.append(kv(b"k%d" % i))
    with ShardReader(shard) as reader:
        reader.seek(1)
        reader.poll(2)
        for base in list_segments(str(shard)):
            os.unlink(segment_path(str(shard), base))
        with pytest.raises(LsnNotRetainedError) as info:
            while reader.poll(100):
                pass
        assert info.value.oldest_lsn == 21


def test_a_reader_at_the_end_lists_the_directory_at_most_once_an_interval(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polls at the end of the log cost stats, not a listing of every segment; a segment at
    the next LSN is still found at once (by its name)."""
    listings = []
    real_list = moonish.log.reader.list_segments

    def counted(shard_dir: str) -> list[int]:
        listings.append(shard_dir)
        return real_list(shard_dir)

    monkeypatch.setattr(moonish.log.reader, "list_segments", counted)
    monkeypatch.setattr(moonish.log.reader, "EDGE_LISTING_INTERVAL_S", 3600.0)
    with open_writer(shard, segment_bytes=400) as writer, ShardReader(shard) as reader:
        writer.append(kv(b"key"))
        reader.seek(1)
        assert len(reader.poll(100)) == 1
        listings.clear()
        for _ in range(50):
            assert reader.poll(100) == []
        assert len(listings) <= 1
        while len(segments(shard)) < 3:  # rotations: each next segment found by its name
            writer.append(kv(b"more"))
        got = []
        while frames := reader.poll(1000):
            got += [f.lsn for f in frames]
        assert got == list(range(2, writer.next_lsn))
