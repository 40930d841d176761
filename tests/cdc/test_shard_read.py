"""Reading: Moon's CDC.READ behaviours, positioning, retention, torn tails, live appends."""

from __future__ import annotations

import os
from pathlib import Path

import crc32c
import orjson
import pytest

from moonish.cdc import shard_read
from moonish.cdc.cursor import Cursor
from moonish.errors import CorruptionError, InvalidArgumentError, LsnNotRetainedError
from moonish.log.format import index_name, segment_name
from moonish.log.reader import ShardReader
from tests.support.golden import frame_offsets, segments
from tests.support.wal import kv, open_writer


def fill(path: Path, count: int, **options: object) -> None:
    with open_writer(path, **options) as writer:
        for i in range(count):
            writer.append(kv(b"key-%d" % i))


def lsns(result: shard_read.ReadResult) -> list[int]:
    return [event.lsn for event in result.events]


def test_drains_in_lsn_order_and_cursor_resumes_exactly(shard: Path) -> None:
    fill(shard, 25, segment_bytes=400)
    seen, cursor = [], 0
    while True:
        result = shard_read.read(shard, cursor, limit=4)
        if not result.events:
            break
        seen += lsns(result)
        assert result.cursor == Cursor(seen[-1] + 1)
        cursor = result.cursor.lsn
    assert seen == list(range(1, 26))


def test_from_lsn_filters(shard: Path) -> None:
    fill(shard, 10)
    assert lsns(shard_read.read(shard, 7)) == [7, 8, 9, 10]
    assert lsns(shard_read.read(shard, 0)) == lsns(shard_read.read(shard, 1))


def test_idle_returns_only_the_cursor(shard: Path) -> None:
    fill(shard, 3)
    result = shard_read.read(shard, 4)
    assert len(result.events) == 0 and result.cursor == Cursor(4)


def test_empty_shard_is_idle_at_zero_and_one(shard: Path) -> None:
    with open_writer(shard):
        pass
    assert shard_read.read(shard, 0).cursor == Cursor(0)
    assert shard_read.read(shard, 1).cursor == Cursor(1)


def test_limit_caps_the_batch_even_inside_an_atomic_batch(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append_batch([kv(b"k%d" % i) for i in range(5)])
    first = shard_read.read(shard, 0, limit=3)
    assert lsns(first) == [1, 2, 3] and first.cursor == Cursor(4)
    rest = shard_read.read(shard, first.cursor, limit=3)
    assert lsns(rest) == [4, 5]
    tx = [orjson.loads(e.envelope)["transaction"] for e in [*first.events, *rest.events]]
    assert [t["total_order"] for t in tx] == [1, 2, 3, 4, 5]
    assert {t["id"] for t in tx} == {"0:1"}


@pytest.mark.parametrize("limit", [0, -1, 10_001])
def test_limit_out_of_range_is_an_invalid_argument(shard: Path, limit: int) -> None:
    fill(shard, 1)
    with pytest.raises(InvalidArgumentError):
        shard_read.read(shard, 0, limit=limit)


def test_missing_directory_is_an_error_not_an_idle_answer(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        shard_read.read(tmp_path / "nope", 0)


def test_lsn_beyond_the_end_is_an_error(shard: Path) -> None:
    fill(shard, 3)
    with pytest.raises(InvalidArgumentError, match="next LSN is 4"):
        shard_read.read(shard, 5)


def test_lsn_older_than_retention_carries_the_oldest_lsn(shard: Path) -> None:
    fill(shard, 30, segment_bytes=400)
    first, second = segments(shard)[:2]
    first.unlink()
    (shard / index_name(1)).unlink()
    oldest = int(second.stem, 16)
    with pytest.raises(LsnNotRetainedError) as info:
        shard_read.read(shard, 1)
    assert info.value.oldest_lsn == oldest
    assert lsns(shard_read.read(shard, oldest, limit=2)) == [oldest, oldest + 1]


def test_seek_uses_the_index_and_survives_a_wrong_one(shard: Path) -> None:
    fill(shard, 200, index_interval_bytes=512)
    index = shard / index_name(1)
    assert index.stat().st_size > 16 * 5
    expected = lsns(shard_read.read(shard, 150, limit=5))
    index.write_bytes(b"\x07" * index.stat().st_size)  # garbage: entries fail verification
    assert lsns(shard_read.read(shard, 150, limit=5)) == expected == [150, 151, 152, 153, 154]
    index.unlink()
    assert lsns(shard_read.read(shard, 150, limit=5)) == expected


def test_torn_tail_is_nothing_yet_and_the_cursor_does_not_move(shard: Path) -> None:
    fill(shard, 3)
    seg = segments(shard)[-1]
    with open(seg, "ab") as handle:
        handle.write(b"\x01\x02\x03")  # the start of a frame that never finished
    result = shard_read.read(shard, 4)
    assert len(result.events) == 0 and result.cursor == Cursor(4)
    assert shard_read.info(shard)["torn_tail_bytes"] == 3
    with open_writer(shard) as writer:  # the next writer cuts it and continues
        writer.append(kv(b"new"))
    assert lsns(shard_read.read(shard, 4)) == [4]


def test_bad_crc_followed_by_valid_data_raises_with_file_offset_and_lsn(shard: Path) -> None:
    fill(shard, 5)
    seg = segments(shard)[-1]
    offset = frame_offsets(seg)[2]
    data = bytearray(seg.read_bytes())
    data[offset + 40] ^= 0x10
    seg.write_bytes(bytes(data))
    assert lsns(shard_read.read(shard, 0)) == [1, 2]
    with pytest.raises(CorruptionError) as info:
        shard_read.read(shard, 3)
    assert (info.value.path, info.value.offset, info.value.lsn) == (str(seg), offset, 3)


def test_damage_in_a_sealed_segment_raises(shard: Path) -> None:
    fill(shard, 20, segment_bytes=400)
    first = segments(shard)[0]
    os.truncate(first, first.stat().st_size - 1)
    valid = shard_read.read(shard, 0, limit=100)
    assert lsns(valid) == list(range(1, valid.cursor.lsn))
    with pytest.raises(CorruptionError, match="sealed") as info:
        shard_read.read(shard, valid.cursor, limit=100)
    assert (info.value.path, info.value.lsn) == (str(first), valid.cursor.lsn)


def test_a_missing_middle_segment_is_corruption_not_a_stall(shard: Path) -> None:
    fill(shard, 30, segment_bytes=400)
    segments(shard)[1].unlink()
    reader = ShardReader(shard)
    reader.seek(1)
    with pytest.raises(CorruptionError, match="no segment starts at LSN"):
        while reader.poll(100):
            pass


def test_reader_follows_rotation_while_the_writer_appends(shard: Path) -> None:
    with open_writer(shard, segment_bytes=300) as writer:
        reader = ShardReader(shard)
        reader.seek(0)
        seen: list[int] = []
        for i in range(60):
            writer.append(kv(b"key-%d" % i))
            if i % 7 == 0:
                seen += [f.lsn for f in reader.poll(1000)]
        seen += [f.lsn for f in reader.poll(1000)]
    assert seen == list(range(1, 61))
    assert len(segments(shard)) > 5


def test_data_directory_is_refused_with_a_hint(tmp_path: Path) -> None:
    fill(tmp_path / "shard-0", 1)
    with pytest.raises(InvalidArgumentError, match="shard-0"):
        shard_read.read(tmp_path, 0)


def test_info_reports_the_shard(shard: Path) -> None:
    fill(shard, 30, segment_bytes=400)
    facts = shard_read.info(shard)
    assert facts["oldest_lsn"] == 1 and facts["latest_lsn"] == 30 and facts["next_lsn"] == 31
    assert facts["segments"] == len(segments(shard)) > 1
    assert facts["bytes"] == sum(seg.stat().st_size for seg in segments(shard))
    assert facts["active_segment"] == segments(shard)[-1].name
    assert segment_name(1) == segments(shard)[0].name


@pytest.mark.parametrize(
    ("offset", "fix_crc", "message"),
    [
        (12, False, "checksum mismatch"),  # shard id changed, header CRC not: damage
        (16, True, "file name says 1"),  # base LSN rewritten consistently: wrong file
        (0, False, "bad segment magic"),
    ],
)
def test_a_bad_segment_header_is_corruption(
    shard: Path, offset: int, fix_crc: bool, message: str
) -> None:
    fill(shard, 3)
    seg = segments(shard)[0]
    data = bytearray(seg.read_bytes())
    data[offset] ^= 0x04
    if fix_crc:
        data[36:40] = crc32c.crc32c(bytes(data[:36])).to_bytes(4, "little")
    seg.write_bytes(bytes(data))
    with pytest.raises(CorruptionError, match=message) as info:
        shard_read.read(shard, 0)
    assert info.value.path == str(seg)


def test_a_tail_dropped_without_close_releases_its_segment(shard: Path) -> None:
    with open_writer(shard) as writer:
        writer.append(kv(b"a"))
    segment = os.path.realpath(shard / segment_name(1))

    def open_segments() -> int:
        links = (os.path.realpath(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd"))
        return sum(link == segment for link in links)

    tail = shard_read.tail(shard, 0)
    assert [event.lsn for event in tail] == [1]
    assert open_segments() == 1  # still positioned at the end: it may be polled again
    del tail
    assert open_segments() == 0
