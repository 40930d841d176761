"""An LSN a reader may have seen is never given to another record (docs/wal-format.md, "LSNs
are never reused"): ``wal repair`` and the writer's torn-tail cut count every LSN a frame
header with a valid checksum names as used (the damaged record's own, records of every type,
whole frames of a torn batch), record the cut ones as discarded, and repair cuts at every
offset the writer and ``wal verify`` name; the writer's refusals name the remedy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moonish.cdc import shard_read
from moonish.errors import CorruptionError, LsnDiscardedError
from moonish.log.control import load_control
from moonish.log.format import SEGMENT_HEADER_BYTES
from moonish.log.frames import ZERO_FILL_ALIGN_BYTES
from moonish.log.reader import ShardReader
from moonish.log.records import Message
from moonish.log.repair import set_next_lsn, truncate_at
from moonish.log.verify import verify_shard
from tests.support.cli import run
from tests.support.golden import as_if_killed, frame_spans, segments
from tests.support.wal import flip, kv, open_writer


def written(shard: Path, count: int, **options: object) -> None:
    """``count`` records by a writer that then died (control.json unclean)."""
    with open_writer(shard, **options) as writer:
        for i in range(count):
            writer.append(kv(b"key-%d" % i))
    as_if_killed(shard)


def writer_error(shard: Path) -> CorruptionError:
    with pytest.raises(CorruptionError) as info:
        open_writer(shard)
    return info.value


def read_lsns(shard: Path, cursor: int = 0) -> list[int]:
    return [event.lsn for event in shard_read.read(shard, cursor, limit=10_000).events]


# -- wal repair ---------------------------------------------------------------------------------


def test_repair_counts_the_lsn_of_a_damaged_last_record_as_used(shard: Path) -> None:
    written(shard, 5)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[4]
    flip(seg, start + 40)  # a payload byte of LSN 5: its header and header checksum hold
    error = writer_error(shard)
    report = truncate_at(shard, int(error.message.rsplit(" ", 1)[-1]))
    assert (report.cut_offset, report.discarded, report.next_lsn) == (start, (5, 5), 6)
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == 6  # LSN 5, which a follower may hold, is not
    with pytest.raises(LsnDiscardedError):
        shard_read.read(shard, 5)
    assert read_lsns(shard, 6) == [6]


def test_repair_sees_message_records_after_the_damage(shard: Path) -> None:
    with open_writer(shard) as writer:
        for i in range(4):
            writer.append(kv(b"key-%d" % i))
        for i in range(4):
            writer.append(Message("moonish.skipped", b"SET k%d v" % i))
    as_if_killed(shard)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[3]
    flip(seg, start + 8)  # the LSN field of LSN 4: only the messages after it name LSNs
    report = truncate_at(shard, start)
    assert report.discarded == (4, 8) and report.intact_records_discarded == 4
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == 9


def test_repair_cuts_a_segment_whose_first_record_is_damaged_at_the_offset_named(
    shard: Path,
) -> None:
    written(shard, 30, segment_bytes=600)
    seg = segments(shard)[-1]
    base = int(seg.stem, 16)
    flip(seg, SEGMENT_HEADER_BYTES + 40)  # the first record's payload
    error = writer_error(shard)
    assert f"--truncate-at {SEGMENT_HEADER_BYTES}" in error.message
    dry = run("wal", "repair", str(shard), "--truncate-at", str(SEGMENT_HEADER_BYTES), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    report = truncate_at(shard, SEGMENT_HEADER_BYTES)
    assert report.discarded == (base, 30) and report.next_lsn == 31
    for _ in range(2):  # the emptied segment stays; the writer opens over it again and again
        with open_writer(shard) as writer:
            lsn = writer.append(kv(b"after"))
    assert lsn == 32 and verify_shard(shard).discarded == ((base, 30),)
    assert read_lsns(shard, 31) == [31, 32]


def test_repair_accepts_the_offset_verify_names_inside_an_atomic_batch(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))
        writer.append_batch([kv(b"b%d" % i) for i in range(4)])
        writer.append(kv(b"c"))
    as_if_killed(shard)
    seg = segments(shard)[-1]
    spans = frame_spans(seg)
    flip(seg, spans[3][0] + 40)  # the third record of the batch (LSN 4)
    with pytest.raises(CorruptionError) as verified:
        verify_shard(shard)
    assert verified.value.offset == spans[3][0]
    cut = run("wal", "repair", str(shard), "--truncate-at", str(verified.value.offset))
    assert cut.returncode == 0, cut.stderr
    assert b'"cut_offset": %d' % spans[1][0] in cut.stdout  # the batch is cut whole
    assert load_control(str(shard)).discarded == ((2, 6),)  # type: ignore[union-attr]
    assert read_lsns(shard) == [1]


# -- the writer's torn-tail cut -----------------------------------------------------------------


def power_loss(shard: Path, batch: int, keep_bytes: int | None) -> tuple[int, int]:
    """Records 1..3, then a batch of ``batch`` big records, read whole by a follower; then the
    end of the batch is lost as a power loss loses it: its last frame cut ``keep_bytes`` into
    it (``None``: zeros from the first sector boundary 100 bytes into it). Returns the LSNs of
    the batch."""
    with open_writer(shard) as writer:
        for i in range(3):
            writer.append(kv(b"key-%d" % i))
        lsns = writer.append_batch([kv(b"big-%d" % i, b"x" * 3000) for i in range(batch)])
    as_if_killed(shard)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[-1]
    if keep_bytes is not None:
        os.truncate(seg, start + keep_bytes)
    else:
        zero_from = -(-(start + 100) // ZERO_FILL_ALIGN_BYTES) * ZERO_FILL_ALIGN_BYTES
        data = bytearray(seg.read_bytes())
        data[zero_from:] = bytes(len(data) - zero_from)
        seg.write_bytes(bytes(data))
    return lsns[0], lsns[-1]


@pytest.mark.parametrize("keep_bytes", [None, 36, 1000])
def test_lsns_a_torn_tail_names_are_discarded_not_given_again(
    shard: Path, keep_bytes: int | None
) -> None:
    first, last = power_loss(shard, 2, keep_bytes)
    assert verify_shard(shard).torn_tail_lsns == (first, last)
    with ShardReader(shard) as behind:  # a follower that had read up to the batch, not into it
        behind.seek(1)
        assert [frame.lsn for frame in behind.poll(100)] == [1, 2, 3]  # the batch is torn now
        with open_writer(shard) as writer:
            assert writer.recovery.discarded == (first, last)
            assert writer.append(kv(b"after")) == last + 1
        assert [frame.lsn for frame in behind.poll(100)] == [last + 1]  # read none: goes on
    assert load_control(str(shard)).torn == ((first, last),)  # type: ignore[union-attr]
    assert read_lsns(shard) == [1, 2, 3, last + 1]
    with pytest.raises(LsnDiscardedError):
        shard_read.read(shard, last)  # a follower that had read LSN first: told, not misled
    assert verify_shard(shard).next_lsn == last + 2


def test_a_writer_killed_while_it_cuts_a_torn_tail_still_never_reuses_its_lsns(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, last = power_loss(shard, 3, 1000)

    ftruncate = os.ftruncate

    def killed(fd: int, length: int) -> None:
        if length:  # the cut, after control.json recorded it (not the lock file's reset)
            raise KeyboardInterrupt
        ftruncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", killed)
    with pytest.raises(KeyboardInterrupt):
        open_writer(shard)
    monkeypatch.undo()
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == last + 1
    assert read_lsns(shard) == [1, 2, 3, last + 1]


# -- the writer's refusals name the remedy ------------------------------------------------------


def test_a_damaged_newest_segment_header_names_the_repair(shard: Path) -> None:
    written(shard, 30, segment_bytes=600)
    seg = segments(shard)[-1]
    base = int(seg.stem, 16)
    flip(seg, 20)  # base_lsn in the segment header
    error = writer_error(shard)
    assert error.message.endswith(f"moonish wal repair {shard} --truncate-at 0")
    report = truncate_at(shard, 0)
    assert report.discarded == (base, 30)
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == 31


def test_records_lost_from_the_end_of_a_cleanly_closed_log_name_the_repair(shard: Path) -> None:
    with open_writer(shard) as writer:
        for i in range(10):
            writer.append(kv(b"key-%d" % i))
    seg = segments(shard)[-1]
    os.truncate(seg, frame_spans(seg)[7][0])  # records 8..10, durable once, are gone
    error = writer_error(shard)
    assert error.message.endswith(f"moonish wal repair {shard} --next-lsn 11")
    set_next_lsn(shard, 11)
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == 11
    with pytest.raises(LsnDiscardedError):
        shard_read.read(shard, 8)
