"""The recovery rules (docs/wal-format.md, "Incomplete is not corrupt"; docs/reliability.md):
what a torn tail may be, that damage never passes for one and is never cut by the writer, the
end of the log kept in control.json, and `moonish wal repair`. LSNs are never reused."""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import moonish.log.repair
import moonish.log.writer
from moonish.cdc import shard_read
from moonish.clock import FixedClock
from moonish.errors import (
    CorruptionError,
    InvalidArgumentError,
    LsnDiscardedError,
    LsnNotRetainedError,
    WriterLockedError,
)
from moonish.log.control import Control, load_control, store_control
from moonish.log.frames import ZERO_FILL_ALIGN_BYTES
from moonish.log.reader import ShardReader
from moonish.log.repair import set_next_lsn, truncate_at
from moonish.log.segment import list_segments, segment_path, snapshot_path
from moonish.log.verify import verify_shard
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.golden import FIXTURES, as_if_killed, frame_spans, segments
from tests.support.wal import kv, open_writer


def fill(path: Path, count: int, value: bytes = b"v", **options: object) -> None:
    with open_writer(path, **options) as writer:
        for i in range(count):
            writer.append(kv(b"key-%d" % i, value))


def lsns(path: Path, cursor: int = 0) -> list[int]:
    return [event.lsn for event in shard_read.read(path, cursor, limit=10_000).events]


def damage(path: Path, offset: int, mask: int = 0x01) -> bytes:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))
    return bytes(data)


def writer_error(path: Path) -> CorruptionError:
    with pytest.raises(CorruptionError) as info:
        open_writer(path)
    return info.value


# -- damage is never a torn tail -------------------------------------------------------------


def test_a_damaged_length_in_the_active_segment_is_corruption_everywhere(shard: Path) -> None:
    fill(shard, 20)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[9]
    data = damage(seg, start + 5, 0x04)  # the length now points past the end of the file
    assert lsns(shard) == list(range(1, 10))  # every record before the damage
    with pytest.raises(CorruptionError, match="header checksum") as info:
        shard_read.read(shard, 10)
    assert (info.value.path, info.value.offset, info.value.lsn) == (str(seg), start, 10)
    with pytest.raises(CorruptionError):
        verify_shard(shard)
    error = writer_error(shard)
    assert f"--truncate-at {start}" in str(error) and error.lsn == 10
    assert seg.read_bytes() == data  # the writer cut nothing


def test_a_complete_last_record_with_a_bad_checksum_is_not_cut(shard: Path) -> None:
    fill(shard, 5)
    seg = segments(shard)[-1]
    start, end = frame_spans(seg)[-1]
    data = damage(seg, end - 10)  # a flipped payload byte of the last record
    with pytest.raises(CorruptionError, match="frame checksum mismatch"):
        shard_read.read(shard, 5)
    assert writer_error(shard).offset == start
    assert seg.read_bytes() == data


def test_zeros_from_a_sector_boundary_inside_the_last_record_are_a_torn_tail(
    shard: Path,
) -> None:
    fill(shard, 3)
    with open_writer(shard) as writer:
        writer.append(kv(b"big", b"x" * 3000))
    as_if_killed(shard)
    seg = segments(shard)[-1]
    start, end = frame_spans(seg)[-1]
    boundary = (start // ZERO_FILL_ALIGN_BYTES + 2) * ZERO_FILL_ALIGN_BYTES
    data = bytearray(seg.read_bytes())
    data[boundary:] = bytes(len(data) - boundary)  # the blocks a power loss left unwritten
    seg.write_bytes(bytes(data))
    assert lsns(shard) == [1, 2, 3] and shard_read.read(shard, 4).cursor.lsn == 4
    assert verify_shard(shard).torn_tail_bytes == end - start
    with open_writer(shard) as writer:
        assert writer.recovery.truncated_bytes == end - start
        assert writer.recovery.discarded == (4, 4)  # its header survived: LSN 4 was used
        assert writer.append(kv(b"after")) == 5


def test_zeros_that_start_after_the_last_sector_boundary_of_a_whole_record_are_damage(
    shard: Path,
) -> None:
    fill(shard, 3)
    size = 3000
    while True:  # a last record whose trailer does not straddle a sector boundary
        with open_writer(shard) as writer:
            writer.append(kv(b"big", b"x" * size))
        start, end = frame_spans(segments(shard)[-1])[-1]
        if (end - 4) // ZERO_FILL_ALIGN_BYTES == (end - 1) // ZERO_FILL_ALIGN_BYTES and (
            end - 4
        ) % ZERO_FILL_ALIGN_BYTES:
            break
        size += 1
    seg = segments(shard)[-1]
    data = bytearray(seg.read_bytes())
    data[end - 4 : end] = bytes(4)  # a whole record whose checksum was zeroed: not a write cut
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match="frame checksum"):
        shard_read.read(shard, 4, limit=10_000)
    assert writer_error(shard).offset == start


@pytest.mark.parametrize("keep", [3, 36, 37, 100])
def test_a_prefix_of_a_record_is_a_torn_tail_the_writer_cuts(shard: Path, keep: int) -> None:
    fill(shard, 3)
    with open_writer(shard) as writer:
        writer.append(kv(b"big", b"x" * 500))
    as_if_killed(shard)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[-1]
    os.truncate(seg, start + keep)
    assert lsns(shard) == [1, 2, 3] and shard_read.info(shard)["torn_tail_bytes"] == keep
    whole_header = keep >= 36  # then it names LSN 4, which is never given again
    with open_writer(shard) as writer:
        assert writer.recovery.truncated_bytes == keep
        assert writer.recovery.discarded == ((4, 4) if whole_header else None)
        assert writer.append(kv(b"again")) == (5 if whole_header else 4)


def test_a_damaged_header_with_bytes_after_it_is_damage_not_a_torn_tail(shard: Path) -> None:
    fill(shard, 4)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[-1]
    damage(seg, start + 9)  # the LSN field of the last record
    with pytest.raises(CorruptionError, match="header checksum"):
        shard_read.read(shard, 4)
    assert writer_error(shard).lsn == 4


def test_a_damaged_index_entry_is_rebuilt_by_the_writer_and_reported_by_verify(
    shard: Path,
) -> None:
    fill(shard, 200, index_interval_bytes=512)
    index = shard / "0000000000000001.idx"
    damage(index, 16 * 3 + 2)  # the LSN of the fourth entry
    with pytest.raises(CorruptionError, match="index entry") as info:
        verify_shard(shard)
    assert info.value.path == str(index) and info.value.offset == 48
    assert lsns(shard, 150)[:3] == [150, 151, 152]  # readers verify entries before use
    with open_writer(shard) as writer:
        assert writer.index_rebuilt
    assert verify_shard(shard).records == 200


# -- a cleanly closed log is opened from its last indexed batch -------------------------------


def test_a_cleanly_closed_log_is_opened_from_its_last_indexed_batch(shard: Path) -> None:
    """The close synced every frame: damage before the last batch the index names is not
    read by the opening writer, but readers and `wal verify` find it; a log whose writer
    did not close is scanned whole, and the same damage refuses the writer."""
    fill(shard, 300, index_interval_bytes=512)
    seg = segments(shard)[-1]
    _, end = frame_spans(seg)[20]
    damage(seg, end - 10)  # a payload byte of LSN 21, far before the last index entry
    with open_writer(shard, index_interval_bytes=512) as writer:
        assert writer.next_lsn == 301 and not writer.index_rebuilt
        assert writer.append(kv(b"more")) == 301
    assert lsns(shard, 1)[-1] == 20  # a page ends before the damage, the next raises
    with pytest.raises(CorruptionError) as info:
        shard_read.read(shard, 21)
    assert info.value.lsn == 21
    with pytest.raises(CorruptionError):
        verify_shard(shard)
    control = load_control(str(shard))
    assert control is not None
    store_control(str(shard), dataclasses.replace(control, clean=False))
    assert writer_error(shard).lsn == 21


def test_bytes_after_a_clean_close_are_still_refused(shard: Path) -> None:
    fill(shard, 300, index_interval_bytes=512)
    seg = segments(shard)[-1]
    with open(seg, "ab") as handle:
        handle.write(b"not a frame at all, written after the writer closed" * 3)
    assert writer_error(shard).lsn == 301


# -- the end of the log survives the removal of every segment ---------------------------------


def test_removing_every_segment_keeps_the_next_lsn(shard: Path) -> None:
    fill(shard, 30, segment_bytes=400)
    for path in shard.glob("*.seg"):
        path.unlink()
    with pytest.raises(LsnNotRetainedError) as info:
        shard_read.read(shard, 1)
    assert info.value.oldest_lsn == 31
    assert shard_read.read(shard, 31).cursor.lsn == 31
    assert shard_read.info(shard)["next_lsn"] == 31
    cli = subprocess.run(
        [sys.executable, "-m", "cli.main", "cdc", "read", str(shard), "1"],
        capture_output=True,
        check=False,
    )
    assert cli.returncode == 3 and b"the oldest retained LSN is 31" in cli.stderr
    with open_writer(shard) as writer:
        assert writer.append(kv(b"next")) == 31
    assert lsns(shard, 31) == [31]
    with pytest.raises(LsnNotRetainedError):
        shard_read.read(shard, 1)


def test_removing_every_segment_after_a_crash_stops_the_writer_until_an_operator_decides(
    shard: Path,
) -> None:
    fill(shard, 10)
    as_if_killed(shard, started_at=6)  # a writer opened at LSN 6, then died
    for path in shard.glob("*.seg"):
        path.unlink()
    error = writer_error(shard)
    assert "--next-lsn" in str(error) and error.lsn == 6
    with pytest.raises(InvalidArgumentError):
        set_next_lsn(shard, 5)
    set_next_lsn(shard, 100)
    with open_writer(shard) as writer:
        assert writer.append(kv(b"x")) == 100


def test_the_writer_refuses_a_log_that_lost_records_from_its_end(shard: Path) -> None:
    fill(shard, 30, segment_bytes=400)
    segments(shard)[-1].unlink()  # the newest segment, after a clean close
    assert "removed from its end" in str(writer_error(shard))
    with pytest.raises(CorruptionError, match="lost from its end"):
        verify_shard(shard)
    with pytest.raises(CorruptionError, match="lost from its end"):
        shard_read.read(shard, 26)


def test_the_writer_refuses_to_start_below_a_snapshot(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0"
    options = ShardOptions(expiry_sweep_ms=0)
    with ShardWriter(shard, options) as writer:
        for i in range(5):
            writer.execute(0, ["SET", f"k{i}", "v"])
        writer.checkpoint()  # the snapshot at LSN 5, then a checkpoint record (LSN 6)
    assert Path(snapshot_path(str(shard), 5)).exists()
    for path in shard.glob("*.seg"):
        path.unlink()
    store_control(str(shard), Control(0, 3, True))  # an end before the snapshot's LSN
    with pytest.raises(CorruptionError, match="snapshot"):
        ShardWriter(shard, options)


# -- wal repair: an explicit cut, LSNs never reused -------------------------------------------


def test_repair_cuts_at_the_damage_discards_the_lsns_and_the_writer_continues_after_them(
    shard: Path,
) -> None:
    fill(shard, 20)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[9]
    damage(seg, start + 5, 0x04)
    dry = truncate_at(shard, start, dry_run=True)
    assert dry.discarded == (10, 20) and dry.intact_records_discarded == 10
    assert dry.next_lsn == 21
    with pytest.raises(CorruptionError):
        verify_shard(shard)  # a dry run changes nothing
    assert truncate_at(shard, start) == dataclasses.replace(dry, dry_run=False)
    assert verify_shard(shard).discarded == ((10, 20),)
    assert lsns(shard) == list(range(1, 10))
    for cursor in (10, 15, 20):
        with pytest.raises(LsnDiscardedError) as info:
            shard_read.read(shard, cursor)
        assert info.value.oldest_lsn == 21
    with shard_read.tail(shard, 0) as stream:
        got = []
        with pytest.raises(LsnDiscardedError):
            for event in stream:
                got.append(event.lsn)
        assert got == list(range(1, 10))
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after-repair")) == 21
    assert lsns(shard, 21) == [21] and shard_read.info(shard)["next_lsn"] == 22
    assert verify_shard(shard).next_lsn == 22


def test_repair_of_a_sealed_segment_removes_the_later_ones_and_says_how_many_records(
    shard: Path,
) -> None:
    fill(shard, 60, segment_bytes=400)
    damaged = segments(shard)[2]
    start, _ = frame_spans(damaged)[1]
    damage(damaged, start + 40)  # a payload byte: the frame checksum fails
    later = len(segments(shard)) - 3
    report = truncate_at(shard, start, segment_base=int(damaged.stem, 16))
    first = int(damaged.stem, 16) + 1
    assert report.discarded == (first, 60) and len(report.removed_segments) == later
    assert report.intact_records_discarded == 60 - first  # all but the damaged one
    assert verify_shard(shard).last_lsn == first - 1


def test_repair_refuses_an_offset_inside_a_record_and_a_running_writer(shard: Path) -> None:
    fill(shard, 5)
    start, _ = frame_spans(segments(shard)[-1])[2]
    with pytest.raises(InvalidArgumentError, match="not where a record"):
        truncate_at(shard, start + 3)
    with open_writer(shard), pytest.raises(WriterLockedError):
        truncate_at(shard, start)


def test_a_keyspace_shard_rebuilds_from_the_log_as_it_is_after_a_repair(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0"
    options = ShardOptions(expiry_sweep_ms=0)
    with ShardWriter(shard, options) as writer:
        for _ in range(10):
            writer.execute(0, ["INCR", "counter"])
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[6]
    damage(seg, start + 5, 0x04)
    with pytest.raises(CorruptionError):
        ShardWriter(shard, options)
    truncate_at(shard, start)  # LSNs 7..10 discarded: the counter's log says 6
    with ShardWriter(shard, options) as writer:
        assert writer.execute(0, ["INCR", "counter"]) == (7, [11])
    assert (load_control(str(shard)) or Control(0, 0, False)).discarded == ((7, 10),)


@pytest.mark.slow
def test_repair_from_the_command_line(shard: Path) -> None:
    fill(shard, 20)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[9]
    damage(seg, start + 5, 0x04)
    command = [sys.executable, "-m", "cli.main", "wal", "repair", str(shard)]
    dry = subprocess.run(
        [*command, "--truncate-at", str(start), "--dry-run"], capture_output=True, check=False
    )
    assert dry.returncode == 0 and b'"discarded_lsns"' in dry.stdout
    assert b'"intact_records_discarded": 10' in dry.stdout
    cut = subprocess.run([*command, "--truncate-at", str(start)], capture_output=True, check=False)
    assert cut.returncode == 0, cut.stderr
    read = subprocess.run(
        [sys.executable, "-m", "cli.main", "cdc", "read", str(shard), "12"],
        capture_output=True,
        check=False,
    )
    assert read.returncode == 3 and b"continues at LSN 21" in read.stderr
    both = subprocess.run(
        [*command, "--truncate-at", "1", "--next-lsn", "5"], capture_output=True, check=False
    )
    assert both.returncode == 2


def test_a_reader_positioned_at_the_end_learns_of_a_repair_at_once(shard: Path) -> None:
    fill(shard, 10)
    with ShardReader(shard) as reader:
        reader.seek(11)
        assert reader.poll(10) == []
        set_next_lsn(shard, 50)  # e.g. records 11..49 were seen, then lost with a disk
        with pytest.raises(LsnDiscardedError):
            reader.poll(10)
    assert list_segments(str(shard)) == [1]


# -- format version 1 shards --------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["v1-mixed-records", "v1-torn-tail", "v1-torn-batch"])
def test_a_writer_continues_a_version_1_shard_in_a_version_2_segment(
    tmp_path: Path, scenario: str
) -> None:
    shard = tmp_path / "shard-0"
    shutil.copytree(FIXTURES / "wal" / scenario, shard)
    clock = FixedClock(1_796_000_000_000_000)
    before = shard_read.read(shard, 0, limit=10_000, clock=clock)
    old = {path.name: path.read_bytes() for path in segments(shard)}
    torn = verify_shard(shard).torn_tail_lsns  # whole frames of the torn batch name LSNs
    assert (torn is not None) == (scenario != "v1-mixed-records")
    expected = torn[1] + 1 if torn is not None else before.cursor.lsn
    with open_writer(shard) as writer:
        assert writer.next_lsn == expected
        assert writer.append(kv(b"after-upgrade")) == expected
    newest = segments(shard)[-1]
    assert newest.name not in old and newest.read_bytes()[8:10] == b"\x02\x00"
    for name, data in old.items():  # version 1 segments: only a torn tail cut, nothing else
        assert data.startswith((shard / name).read_bytes())
    after = shard_read.read(shard, 0, limit=10_000, clock=clock)
    assert [e.envelope for e in after.events][: len(before.events)] == [
        e.envelope for e in before.events
    ]
    assert [e.lsn for e in after.events][-1] == expected
    assert verify_shard(shard).next_lsn == expected + 1


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
