"""Edge cases a review of the reliability work reproduced, each pinned by a test that failed
before its fix: segments replaced or removed under a follower, writes that fail half-way,
repairs that undercount or are cut short, snapshot rows before damage, index entries into
nowhere, and the end of the log as `cdc info` reports it."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

import moonish.log.repair
import moonish.log.writer
from moonish.cdc import shard_read
from moonish.errors import (
    CorruptionError,
    InvalidArgumentError,
    LsnNotRetainedError,
    UnavailableError,
)
from moonish.log.control import Control, load_control, store_control
from moonish.log.format import MAGIC, SEGMENT_HEADER, SEGMENT_HEADER_CRC, segment_name
from moonish.log.reader import ShardReader
from moonish.log.repair import set_next_lsn, truncate_at
from moonish.log.segment import index_path, list_segments, read_index, segment_path
from moonish.log.verify import verify_shard
from moonish.state.shard import ShardOptions, ShardWriter
from tests.conftest import kv, open_writer
from tests.golden import frame_spans, segments


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


WRITE_TOO_BIG = """
import os, resource, signal, sys
from moonish.errors import UnavailableError
from moonish.log.records import KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
writer = WalWriter(sys.argv[1], WriterOptions(fsync=FsyncPolicy.NEVER))
for i in range(5):
    writer.append(KvCommand(0, (b"SET", b"k%d" % i, b"v")))
segment = os.path.join(sys.argv[1], "0000000000000001.seg")
size = os.path.getsize(segment)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 30, hard))  # the disk is full after 30 bytes
try:
    writer.append(KvCommand(0, (b"SET", b"big", b"v" * 200)))
except UnavailableError as error:
    print("refused:", error)
print("size unchanged:", os.path.getsize(segment) == size)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
print("then:", writer.append(KvCommand(0, (b"SET", b"after", b"v"))))
writer.close()
"""


def test_a_write_that_fails_half_way_is_undone_and_the_writer_goes_on(shard: Path) -> None:
    run = subprocess.run([sys.executable, "-c", WRITE_TOO_BIG, str(shard)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert "refused: the append of LSN 6 failed" in run.stdout and "nothing was appended" in (
        run.stdout
    )
    assert "size unchanged: True" in run.stdout and "then: 6" in run.stdout
    assert [e.lsn for e in shard_read.read(shard, 0).events] == [1, 2, 3, 4, 5, 6]
    assert verify_shard(shard).next_lsn == 7


def test_a_failed_fdatasync_stops_the_writer_for_good(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))

        def failing(fd: int) -> None:
            raise OSError(errno.EIO, "Input/output error")

        monkeypatch.setattr(moonish.log.writer.os, "fdatasync", failing)
        with pytest.raises(UnavailableError, match="may not be durable"):
            writer.sync()
        monkeypatch.undo()
        with pytest.raises(UnavailableError, match="stopped"):
            writer.append(kv(b"b"))
    assert not load_control(str(shard)).clean  # type: ignore[union-attr]
    with open_writer(shard) as writer:  # a new writer recovers from the disk
        assert writer.append(kv(b"c")) == 2


def test_a_shard_writer_whose_append_failed_stops_rather_than_keep_a_keyspace_the_log_lacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = tmp_path / "shard-0"
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)) as writer:
        writer.execute(0, ["INCR", "n"])

        def full(fd: int, data: bytes) -> int:
            raise OSError(errno.ENOSPC, "No space left on device")

        # The disk is full (os.write, not the writer's method: compiled by mypyc, docs/build.md,
        # its classes cannot be patched).
        monkeypatch.setattr(os, "write", full)
        with pytest.raises(UnavailableError, match="the append of LSN 2 failed"):
            writer.execute(0, ["INCR", "n"])
        monkeypatch.undo()
        with pytest.raises(UnavailableError, match="stopped"):
            writer.execute(0, ["INCR", "n"])
        with pytest.raises(UnavailableError, match="stopped"):
            writer.checkpoint()
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)) as writer:
        assert writer.execute(0, ["INCR", "n"]).reply == 2


def test_descriptors_are_closed_once_when_a_rotation_cannot_create_its_segment(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = open_writer(shard, segment_bytes=300)
    writer.append(kv(b"a", b"v" * 100))
    real_open = moonish.log.writer.os.open

    def no_descriptors(path: str, *args: object, **kwargs: object) -> int:
        if str(path).endswith(".seg.tmp"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(moonish.log.writer.os, "open", no_descriptors)
    with pytest.raises(UnavailableError, match="new segment"):
        writer.append(kv(b"b", b"v" * 300))
    monkeypatch.undo()
    with pytest.raises(UnavailableError):
        writer.append(kv(b"c"))
    writer.close()  # releases the lock: the next writer opens
    with open_writer(shard) as again:
        assert again.next_lsn == 2


def _killed_writer(shard: Path, count: int, **options: object) -> None:
    """``count`` records by a writer process that is then SIGKILLed (control.json unclean)."""
    script = (
        "import os, signal, sys\n"
        "from moonish.log.payloads import KvCommand\n"
        "from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions\n"
        f"w = WalWriter(sys.argv[1], WriterOptions(fsync=FsyncPolicy.NEVER, **{options!r}))\n"
        f"for i in range({count}):\n"
        "    w.append(KvCommand(0, (b'SET', b'k%d' % i, b'v')))\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    run = subprocess.run([sys.executable, "-c", script, str(shard)], check=False)
    assert run.returncode == -signal.SIGKILL


def test_repair_counts_every_intact_record_after_wide_damage(shard: Path) -> None:
    _killed_writer(shard, 200, index_interval_bytes=1024)
    seg = segments(shard)[0]
    spans = frame_spans(seg)
    data = bytearray(seg.read_bytes())
    start, stop = spans[49][0], spans[130][0]  # LSNs 50..130 zeroed: more than any window
    data[start:stop] = bytes(stop - start)
    seg.write_bytes(bytes(data))
    report = truncate_at(shard, start)
    assert report.discarded == (50, 200) and report.intact_records_discarded == 70
    with open_writer(shard) as writer:
        assert writer.append(kv(b"x")) == 201  # no LSN that was on disk is written again


def test_a_repair_cut_short_still_never_lets_the_discarded_lsns_be_written_again(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _killed_writer(shard, 30, segment_bytes=500)
    bases = list_segments(str(shard))
    seg = Path(segment_path(str(shard), bases[1]))
    start, _ = frame_spans(seg)[1]
    data = bytearray(seg.read_bytes())
    data[start + 40] ^= 0xFF
    seg.write_bytes(bytes(data))

    def crash(path: str) -> None:
        raise KeyboardInterrupt  # the repair is killed after control.json, before the cut

    monkeypatch.setattr(moonish.log.repair.os, "unlink", crash)
    monkeypatch.setattr(moonish.log.repair, "_cut", crash)
    with pytest.raises(KeyboardInterrupt):
        truncate_at(shard, start, segment_base=bases[1])
    monkeypatch.undo()
    control = load_control(str(shard))
    assert control is not None and control.next_lsn == 31
    with pytest.raises(CorruptionError):  # the damage is still there: the writer refuses
        open_writer(shard)
    report = truncate_at(shard, start, segment_base=bases[1])  # running it again finishes
    assert report.next_lsn == 31
    assert load_control(str(shard)).discarded == ((bases[1] + 1, 30),)  # type: ignore[union-attr]
    with open_writer(shard) as writer:
        assert writer.append(kv(b"x")) == 31


def test_next_lsn_may_not_go_below_what_control_json_shows_was_used(shard: Path) -> None:
    with open_writer(shard, segment_bytes=600) as writer:
        for i in range(60):
            writer.append(kv(b"k%d" % i))
    for base in list_segments(str(shard))[-3:]:
        os.unlink(segment_path(str(shard), base))  # records up to 60 were used, then lost
    end = list_segments(str(shard))[-1]
    with pytest.raises(InvalidArgumentError, match="at least 61"):
        set_next_lsn(shard, end + 7)
    set_next_lsn(shard, 61)
    with open_writer(shard) as writer:
        assert writer.append(kv(b"x")) == 61


def test_next_lsn_accepts_a_torn_tail_and_replaces_a_damaged_control_file(shard: Path) -> None:
    _killed_writer(shard, 10)
    with open(segments(shard)[-1], "ab") as handle:
        handle.write(b"\x01\x02\x03")  # a torn tail
    (shard / "control.json").write_bytes(b"{not json")
    set_next_lsn(shard, 50)
    assert load_control(str(shard)) == Control(0, 50, True, ((11, 49),))


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
            handle.write(encode_frame(1021 + index, RecordType.KV, payload, 5, index, 10,
                                      FLAG_BATCH))  # fmt: skip
    store_control(str(shard), Control(0, 1031, True))
    got: list[int] = []
    with shard_read.tail(shard, 0) as stream, pytest.raises(CorruptionError) as info:
        for event in stream:
            got.append(event.lsn)
    assert got == list(range(1, 1021)) and info.value.lsn == 1027


def test_a_shard_writer_over_an_undecodable_record_is_corruption_not_a_traceback(
    tmp_path: Path,
) -> None:
    from moonish.log.format import RecordType
    from moonish.log.frames import encode_frame

    shard = tmp_path / "shard-0"
    with ShardWriter(shard, ShardOptions(expiry_sweep_ms=0)) as writer:
        writer.execute(0, ["SET", "k", "v"])
    with open(segments(shard)[-1], "ab") as handle:
        handle.write(encode_frame(2, RecordType.KV_CHANGE, b"\x63" * 9, 5))  # bad grammar
    store_control(str(shard), Control(0, 3, True))
    with pytest.raises(CorruptionError) as info:
        ShardWriter(shard, ShardOptions(expiry_sweep_ms=0))
    assert info.value.lsn == 2 and info.value.path == str(segments(shard)[-1])
