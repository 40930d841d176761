"""Reads and tails around damage: every valid change before the damage is delivered and none
skipped, an undecodable record holds back its whole batch, readers accept exactly what ``wal
verify`` accepts, every damaged byte is corruption naming its file, offset and LSN, and a merged
read stops at the commit time of damage a shard reader finds."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from moonish.cdc import shard_read
from moonish.cdc.merged_read import MergedTail, read_merged
from moonish.clock import FixedClock
from moonish.errors import (
    CorruptionError,
    InvalidArgumentError,
)
from moonish.log.control import Control, store_control
from moonish.log.format import (
    FLAG_BATCH,
    FRAME_HEADER_BYTES,
    SEGMENT_HEADER_BYTES,
    RecordType,
)
from moonish.log.frames import encode_frame
from moonish.log.payloads import encode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import KV_HEAD, KvChange, Message, Replay, ViewType
from moonish.log.segment import index_path, list_segments, read_index, segment_path
from moonish.log.verify import verify_shard
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.golden import frame_spans, segments
from tests.support.wal import START_US, flip, kv, open_writer, writer_at


def test_tail_delivers_every_event_before_a_damaged_segment_and_skips_none(shard: Path) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
    damaged = segments(shard)[3]
    first_damaged = int(damaged.stem, 16)
    flip(damaged, 0)
    with shard_read.tail(shard, 0) as stream:
        got = []
        with pytest.raises(CorruptionError):
            for event in stream:
                got.append(event.lsn)
        assert got == list(range(1, first_damaged))
        assert stream.cursor.lsn == first_damaged
        flip(damaged, 0)
        assert [event.lsn for event in stream] == list(range(first_damaged, 61))


def _kv_payload(lengths: tuple[int, int], argv: bytes) -> bytes:
    return KV_HEAD.pack(0, 1, 2) + struct.pack("<2I", *lengths) + argv


GOOD = _kv_payload((3, 50), b"SET" + b"x" * 50)


BAD = _kv_payload((3, 100), b"SET" + b"x" * 50)  # lengths overrun: the writer was broken


def _with_bad_payload_in_a_batch(shard: Path) -> Path:
    """Records 1..10 alone, a batch 11..13 whose record 12's payload breaks its grammar (its
    frame checksum is valid), then 14..20."""
    with open_writer(shard) as writer:
        for i in range(10):
            writer.append(kv(b"key-%d" % i))
    seg = segments(shard)[-1]
    with open(seg, "ab") as handle:
        for index, payload in enumerate((GOOD, BAD, GOOD)):
            handle.write(encode_frame(11 + index, RecordType.KV, payload, 5, index, 3, FLAG_BATCH))
    with open_writer(shard) as writer:
        for i in range(7):
            writer.append(kv(b"after-%d" % i))
    return seg


def _repair_payload(seg: Path) -> None:
    bad, good = (encode_frame(12, RecordType.KV, p, 5, 1, 3, FLAG_BATCH) for p in (BAD, GOOD))
    data = seg.read_bytes()
    assert data.count(bad) == 1
    seg.write_bytes(data.replace(bad, good))  # same length: every offset stays valid


def test_an_undecodable_record_ends_the_events_at_its_batch_and_the_tail_resumes_there(
    shard: Path,
) -> None:
    seg = _with_bad_payload_in_a_batch(shard)
    with shard_read.tail(shard, 0) as stream:
        got = []
        with pytest.raises(CorruptionError, match="payload") as info:
            for event in stream:
                got.append(event.lsn)
        assert got == list(range(1, 11))  # the whole batch 11..13 is held back
        assert (info.value.path, info.value.lsn) == (str(seg), 12)
        assert stream.cursor.lsn == 11
        _repair_payload(seg)
        assert [event.lsn for event in stream] == list(range(11, 21))


def test_read_returns_the_records_before_an_undecodable_batch_then_raises(shard: Path) -> None:
    seg = _with_bad_payload_in_a_batch(shard)
    first = shard_read.read(shard, 0, limit=100)
    assert [event.lsn for event in first.events] == list(range(1, 11))
    assert first.cursor.lsn == 11
    with pytest.raises(CorruptionError) as info:
        shard_read.read(shard, first.cursor, limit=100)
    assert (info.value.path, info.value.lsn) == (str(seg), 12)
    _repair_payload(seg)
    assert [e.lsn for e in shard_read.read(shard, 11, limit=100).events] == list(range(11, 21))


# -- every damaged byte is corruption, with its file, offset and LSN ---------------------------
def test_a_flipped_segment_version_byte_is_corruption_not_an_unsupported_format(
    shard: Path,
) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))
    seg = segments(shard)[0]
    flip(seg, 8)  # version 2 -> 3, the header checksum not updated
    with pytest.raises(CorruptionError, match="header checksum") as info:
        shard_read.read(shard, 0)
    assert (info.value.path, info.value.offset, info.value.lsn) == (str(seg), 0, 1)


def _change(**fields: object) -> KvChange:
    base: dict[str, object] = {
        "op": "u",
        "db": 0,
        "command": b"SET",
        "key": b"k",
        "before": b"",
        "after": b'"v"',
        "view": ViewType.NEW_IMAGE,
        "replay": Replay.COMMAND,
        "argv": (b"SET", b"k", b"v"),
    }
    return KvChange(**{**base, **fields})  # type: ignore[arg-type]


def _with_flags(payload: bytes, flags: int) -> bytes:
    """A kv_change payload with its change_flags byte set to ``flags``."""
    return payload[:1] + bytes([flags]) + payload[2:]


def _payload_variants() -> dict[str, bytes]:
    """kv_change payloads that break one rule each (frames with valid checksums)."""
    good = encode_payload(_change())[1]
    reserved = bytearray(good)
    reserved[6] = 1
    flags = bytearray(good)
    flags[1] = 0x80
    return {
        "good": good,
        "good, stream off": encode_payload(_change(view=ViewType.OFF))[1],
        "non-zero reserved": bytes(reserved),
        "unknown change flags": bytes(flags),
        "trailing bytes": good + b"\x00",
        "argv overruns": good[:-1],
        "state without replay by value": encode_payload(_change(state=b"{}"))[1],
        "argv with replay by value": encode_payload(_change(replay=Replay.STATE))[1],
        "no argv with replay by command": encode_payload(_change(argv=()))[1],
        "a first-row flag on op c": _with_flags(encode_payload(_change())[1], 8),
        "stream off, trailing bytes": encode_payload(_change(view=ViewType.OFF))[1] + b"x",
    }


@pytest.mark.parametrize("variant", sorted(_payload_variants()))
def test_readers_accept_exactly_what_verify_accepts(shard: Path, variant: str) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"before"))
    seg = segments(shard)[-1]
    with open(seg, "ab") as handle:
        handle.write(encode_frame(2, RecordType.KV_CHANGE, _payload_variants()[variant], 5))
    try:
        verify_shard(shard)
        verified = True
    except CorruptionError:
        verified = False
    try:
        shard_read.read(shard, 2)
        read = True
    except CorruptionError as error:
        read = False
        assert (error.path, error.lsn) == (str(seg), 2)
    assert verified == read == variant.startswith("good"), variant


def _message_variants() -> dict[str, bytes]:
    """message payloads that break one rule each (frames with valid checksums)."""
    good = encode_payload(Message("moonish.function", b"{}", 3))[1]
    reserved = bytearray(good)
    reserved[2] = 1
    return {
        "good": good,
        "good, empty": encode_payload(Message("", b""))[1],
        "non-zero reserved": bytes(reserved),
        "trailing bytes": good + b"\x00",
        "content overruns": good[:-1],
        "prefix not UTF-8": encode_payload(Message("x", b""))[1].replace(b"x", b"\xff"),
        "no header": b"\x00",
    }


@pytest.mark.parametrize("variant", sorted(_message_variants()))
def test_readers_accept_exactly_the_messages_verify_accepts(shard: Path, variant: str) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"before"))
    with open(segments(shard)[-1], "ab") as handle:
        handle.write(encode_frame(2, RecordType.MESSAGE, _message_variants()[variant], 5))
    outcomes = []
    for check in (verify_shard, lambda path: shard_read.read(path, 2)):
        try:
            check(shard)
            outcomes.append(True)
        except CorruptionError as error:
            outcomes.append(False)
            assert error.lsn == 2
    assert outcomes == [variant.startswith("good")] * 2, variant


def test_a_sealed_segment_cut_to_its_header_is_a_gap_not_a_loop(shard: Path) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(40):
            writer.append(kv(b"key-%d" % i))
    emptied = segments(shard)[2]
    os.truncate(
        emptied, SEGMENT_HEADER_BYTES
    )  # found by tests/log/test_random_damage.py at 5,000 trials
    first = int(emptied.stem, 16)
    with shard_read.tail(shard, 0) as stream:
        got = []
        with pytest.raises(CorruptionError, match=f"no segment starts at LSN {first}") as info:
            for event in stream:
                got.append(event.lsn)
    assert got == list(range(1, first))
    assert (info.value.path, info.value.offset) == (str(emptied), SEGMENT_HEADER_BYTES)


def test_snapshot_rows_come_before_damage_just_after_the_snapshot(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0"
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)) as writer:
        for i in range(5):
            writer.execute(0, ["SET", f"k{i}", "v"])
        writer.checkpoint()  # snapshot at LSN 5, the checkpoint record is LSN 6
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[5]
    data = bytearray(seg.read_bytes())
    data[start + 40] ^= 0xFF
    seg.write_bytes(bytes(data))
    first = shard_read.read(shard, 0, limit=100, snapshot=True)
    assert [e.op for e in first.events] == ["r"] * 5 and str(first.cursor) == "6"
    with pytest.raises(CorruptionError):
        shard_read.read(shard, first.cursor, limit=100)
    with shard_read.tail(shard, snapshot=True) as stream:
        got = []
        with pytest.raises(CorruptionError):
            for event in stream:
                got.append(event.op)
        assert got == ["r"] * 5


def test_an_index_entry_into_nowhere_is_no_hint_and_verify_names_it(shard: Path) -> None:
    with open_writer(shard, index_interval_bytes=256) as writer:
        for i in range(40):
            writer.append(kv(b"k%d" % i))
    index = Path(index_path(str(shard), 1))
    data = bytearray(index.read_bytes())
    data[16 + 15] ^= 0x80  # the offset of the second entry: at or past 2**63
    index.write_bytes(bytes(data))
    assert [e.lsn for e in shard_read.read(shard, 20, limit=3).events] == [20, 21, 22]
    assert shard_read.info(shard)["next_lsn"] == 41
    with pytest.raises(CorruptionError, match="index entry") as info:
        verify_shard(shard)
    assert info.value.path == str(index)
    with open_writer(shard) as writer:
        assert writer.index_rebuilt
    assert all(offset < 2**63 for _, offset in read_index(str(index)))
    assert verify_shard(shard).records == 40


def test_info_reports_a_lost_end_as_readers_do(shard: Path) -> None:
    with open_writer(shard) as writer:
        for i in range(10):
            writer.append(kv(b"k%d" % i))
    seg = segments(shard)[-1]
    os.truncate(seg, frame_spans(seg)[7][0])  # LSNs 8..10 lost after a clean close
    with pytest.raises(CorruptionError, match="lost from its end"):
        shard_read.info(shard)
    with pytest.raises(CorruptionError, match="lost from its end"):
        shard_read.read(shard, 8)


def test_beyond_the_end_names_the_next_lsn_after_a_discarded_range(shard: Path) -> None:
    with open_writer(shard) as writer:
        for i in range(10):
            writer.append(kv(b"k%d" % i))
    store_control(str(shard), Control(0, 21, True, ((11, 20),)))
    with pytest.raises(InvalidArgumentError, match="the next LSN is 21"):
        shard_read.read(shard, 22)
    assert shard_read.read(shard, 21).cursor.lsn == 21


def test_a_tail_holds_back_a_batch_whole_across_its_poll_size(shard: Path) -> None:
    from moonish.log.format import FLAG_BATCH, RecordType
    from moonish.log.frames import encode_frame
    from moonish.log.payloads import encode_payload
    from moonish.log.records import KV_HEAD

    with open_writer(shard) as writer:
        for i in range(1020):
            writer.append(kv(b"k%d" % i))
    good = encode_payload(kv(b"batch"))[1]
    bad = KV_HEAD.pack(0, 1, 4) + good[8:]  # argc 4 over 3 lengths: the grammar breaks
    with open(segments(shard)[-1], "ab") as handle:  # a batch of 10 at LSNs 1021..1030, whose
        for index in range(10):  # seventh record's checksums hold but whose payload does not
            payload = bad if index == 6 else good
            handle.write(
                encode_frame(1021 + index, RecordType.KV, payload, 5, index, 10, FLAG_BATCH)
            )
    store_control(str(shard), Control(0, 1031, True))
    got: list[int] = []
    with shard_read.tail(shard, 0) as stream, pytest.raises(CorruptionError) as info:
        for event in stream:
            got.append(event.lsn)
    assert got == list(range(1, 1021)) and info.value.lsn == 1027


# -- damage a shard reader finds holds a merged read back at its commit time -------------------
def _interleaved_with_damage(data: Path) -> int:
    """Two shards, six records each, commit times interleaved 10 µs apart (shard 0 at
    +10, +30, ...; shard 1 at +20, +40, ...); shard 0's third record (commit +50) gets a
    flipped payload byte (a CRC failure in the middle of the segment). Returns the damaged
    record's commit time."""
    clock = FixedClock(START_US)
    writers = [writer_at(data / f"shard-{k}", k, clock) for k in range(2)]
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
