"""Readers under a live writer and around damage (issue: followers that never stall or cry
corruption on a healthy log; every valid record delivered before damage, nothing skipped)."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

import moonish.log.reader
from moonish.cdc import shard_read
from moonish.errors import CorruptionError
from moonish.log.format import FLAG_BATCH, MAGIC, SEGMENT_HEADER_BYTES, RecordType
from moonish.log.frames import encode_frame
from moonish.log.payloads import encode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import KV_HEAD, KvChange, Message, Replay, ViewType
from moonish.log.verify import verify_shard
from moonish.sinks.export import Exporter
from moonish.state.shard import ShardOptions, ShardWriter
from tests.conftest import kv, open_writer
from tests.golden import as_if_killed, segments


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
            assert writer.append(kv(b"new")) == 6
        assert [f.lsn for f in reader.poll(100)] == [6]
        with open_writer(shard, segment_bytes=400) as writer:  # rotate: still no error
            for i in range(20):
                writer.append(kv(b"more-%d" % i))
        got = []
        while frames := reader.poll(100):
            got += [f.lsn for f in frames]
        assert got == list(range(7, 27))


def test_a_reader_at_an_empty_segment_survives_fill_and_rotation_during_its_listing(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def newest() -> int:
        return max(int(path.stem, 16) for path in segments(shard))

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


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def test_records_before_a_damaged_segment_are_delivered_then_the_error_and_none_skipped(
    shard: Path,
) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
    damaged = segments(shard)[3]
    first_damaged = int(damaged.stem, 16)
    _flip(damaged, 0)  # the magic
    reader = ShardReader(shard)
    reader.seek(1)
    assert [f.lsn for f in reader.poll(1000)] == list(range(1, first_damaged))
    with pytest.raises(CorruptionError, match="magic") as info:
        reader.poll(1000)
    assert info.value.path == str(damaged)
    _flip(damaged, 0)  # restored: the reader continues exactly where it stopped
    assert [f.lsn for f in reader.poll(1000)] == list(range(first_damaged, 61))
    reader.close()


def test_tail_delivers_every_event_before_a_damaged_segment_and_skips_none(shard: Path) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
    damaged = segments(shard)[3]
    first_damaged = int(damaged.stem, 16)
    _flip(damaged, 0)
    with shard_read.tail(shard, 0) as stream:
        got = []
        with pytest.raises(CorruptionError):
            for event in stream:
                got.append(event.lsn)
        assert got == list(range(1, first_damaged))
        assert stream.cursor.lsn == first_damaged
        _flip(damaged, 0)
        assert [event.lsn for event in stream] == list(range(first_damaged, 61))


def test_cdc_tail_prints_every_record_before_the_damage_then_exits_4(shard: Path) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
    damaged = segments(shard)[3]
    data = bytearray(damaged.read_bytes())
    data[: len(MAGIC)] = b"NOTAWAL\x00"
    damaged.write_bytes(bytes(data))
    run = subprocess.run(
        [sys.executable, "-m", "cli.main", "cdc", "tail", str(shard)],
        capture_output=True,
        check=False,
    )
    assert run.returncode == 4, run.stderr
    assert len(run.stdout.splitlines()) == int(damaged.stem, 16) - 1
    assert str(damaged).encode() in run.stderr


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


def test_export_places_every_change_before_the_damage_in_files_then_raises(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with open_writer(data / "shard-0", segment_bytes=400) as writer:
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
    damaged = segments(data / "shard-0")[3]
    _flip(damaged, 0)
    out = tmp_path / "export"
    with Exporter(data, out) as exporter, pytest.raises(CorruptionError):
        exporter.run()
    lines = b"".join(path.read_bytes() for path in sorted(out.glob("shard-*.ndjson")))
    lsns = [orjson.loads(line)["source"]["lsn"] for line in lines.splitlines()]
    assert lsns == list(range(1, int(damaged.stem, 16)))
    _flip(damaged, 0)
    with Exporter(data, out) as exporter:
        assert exporter.run().records == 60 - len(lsns)


# -- smaller findings: every damaged byte is corruption, with its file, offset and LSN -------


def test_a_flipped_segment_version_byte_is_corruption_not_an_unsupported_format(
    shard: Path,
) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))
    seg = segments(shard)[0]
    _flip(seg, 8)  # version 2 -> 3, the header checksum not updated
    with pytest.raises(CorruptionError, match="header checksum") as info:
        shard_read.read(shard, 0)
    assert (info.value.path, info.value.offset, info.value.lsn) == (str(seg), 0, 1)


def _keyspace_shard(path: Path) -> Path:
    with ShardWriter(path, ShardOptions(expiry_sweep_ms=0)) as writer:
        writer.execute(0, ["SET", "k", "v"])
        writer.execute(0, ["HSET", "h", "f", "v"])
        writer.checkpoint()
    return path


@pytest.mark.parametrize(
    "target", [b'"format"', b'"version":2', b'"keys"', b'"lsn"', b'"libraries"']
)
def test_any_damaged_snapshot_byte_is_corruption_never_a_traceback(
    tmp_path: Path, target: bytes
) -> None:
    shard = _keyspace_shard(tmp_path / "shard-0")
    (snap,) = shard.glob("*.snap")
    data = snap.read_bytes()
    position = data.index(target) + len(target) - 2
    for bit in range(8):
        damaged = bytearray(data)
        damaged[position] ^= 1 << bit
        snap.write_bytes(bytes(damaged))
        with pytest.raises(CorruptionError) as info:
            shard_read.read(shard, 0, snapshot=True)
        assert info.value.path == str(snap)


def test_a_flipped_stream_configuration_byte_is_corruption(tmp_path: Path) -> None:
    shard = _keyspace_shard(tmp_path / "shard-0")
    config = shard / "stream.json"
    data = config.read_bytes()
    position = data.index(b"4096") + 3  # 4096 -> 4097: still a valid configuration
    damaged = bytearray(data)
    damaged[position] ^= 0x01
    config.write_bytes(bytes(damaged))
    with pytest.raises(CorruptionError, match="checksum") as info:
        shard_read.info(shard)
    assert info.value.path == str(config)


def test_a_stream_configuration_of_0_1_0_is_read_and_given_a_checksum(tmp_path: Path) -> None:
    shard = _keyspace_shard(tmp_path / "shard-0")
    config = shard / "stream.json"
    config.write_bytes(b'{"enabled": true, "view_type": "KEYS_ONLY", "max_value_bytes": 10}\n')
    assert shard_read.info(shard)["stream"]["view_type"] == "KEYS_ONLY"
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)):
        pass
    assert b'"crc32c"' in config.read_bytes()
    assert shard_read.info(shard)["stream"]["max_value_bytes"] == 10


def _change(**fields: object) -> KvChange:
    base: dict[str, object] = {
        "op": "u", "db": 0, "command": b"SET", "key": b"k", "before": b"", "after": b'"v"',
        "view": ViewType.NEW_IMAGE, "replay": Replay.COMMAND, "argv": (b"SET", b"k", b"v"),
    }  # fmt: skip
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


# -- found by the crash adversary (tests/test_crash.py) ---------------------------------------


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


def test_a_sealed_segment_cut_to_its_header_is_a_gap_not_a_loop(shard: Path) -> None:
    with open_writer(shard, segment_bytes=400) as writer:
        for i in range(40):
            writer.append(kv(b"key-%d" % i))
    emptied = segments(shard)[2]
    os.truncate(emptied, SEGMENT_HEADER_BYTES)  # found by tests/test_damage.py at 5,000 trials
    first = int(emptied.stem, 16)
    with shard_read.tail(shard, 0) as stream:
        got = []
        with pytest.raises(CorruptionError, match=f"no segment starts at LSN {first}") as info:
            for event in stream:
                got.append(event.lsn)
    assert got == list(range(1, first))
    assert (info.value.path, info.value.offset) == (str(emptied), SEGMENT_HEADER_BYTES)
