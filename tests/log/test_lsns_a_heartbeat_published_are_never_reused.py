"""The writer's heartbeat (``heartbeat.json``: "every record from ``next_lsn`` on ...") is
written after the records below its ``next_lsn``, so a follower may have read them all; a power
loss can still take them from the segment without a trace. Where the log ends below the last
heartbeat's ``next_lsn``, the LSNs in between count as used (docs/wal-format.md, "LSNs are
never reused"): the writer's torn-tail cut, ``wal verify``, ``wal repair`` and ``cdc info``
count them, and a range a repair discarded stays a repair's."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from moonish.cdc import shard_read
from moonish.errors import CorruptionError, InvalidArgumentError, LsnDiscardedError
from moonish.log.control import load_control
from moonish.log.heartbeat import heartbeat_path, load_closed_time
from moonish.log.reader import ShardReader
from moonish.log.repair import set_next_lsn, truncate_at
from moonish.log.verify import verify_shard
from tests.support.cli import run
from tests.support.golden import as_if_killed, frame_spans, segments
from tests.support.wal import flip, kv, open_writer


def heard_then_lost(shard: Path, records: int, kept: int) -> None:
    """``records`` records and a heartbeat naming the LSN after them, by a writer that then
    died; a power loss took every record after the first ``kept`` from the segment without
    a trace (the file cut at a frame boundary, no index entry past it)."""
    with open_writer(shard, heartbeat_ms=None, index_interval_bytes=1 << 30) as writer:
        for i in range(records):
            writer.append(kv(b"key-%d" % i))
        writer.heartbeat()
    as_if_killed(shard, heard=records + 1)  # its last heartbeat, not the one at close
    assert load_closed_time(str(shard)).next_lsn == records + 1  # type: ignore[union-attr]
    seg = segments(shard)[-1]
    os.truncate(seg, frame_spans(seg)[kept][0])


def read_lsns(shard: Path, cursor: int = 0) -> list[int]:
    return [event.lsn for event in shard_read.read(shard, cursor, limit=10_000).events]


def test_the_writer_discards_lsns_a_heartbeat_published_past_the_end(shard: Path) -> None:
    heard_then_lost(shard, 10, 5)
    with ShardReader(shard) as follower:  # had read LSNs 1..5 only: passes the cut range
        follower.seek(1)
        assert [frame.lsn for frame in follower.poll(100)] == [1, 2, 3, 4, 5]
        with open_writer(shard) as writer:
            assert writer.recovery.discarded == (6, 10)
            assert writer.append(kv(b"after")) == 11  # not 6, which a follower may hold
        assert [frame.lsn for frame in follower.poll(100)] == [11]
    control = load_control(str(shard))
    assert control is not None and control.torn == ((6, 10),)
    with pytest.raises(LsnDiscardedError):
        shard_read.read(shard, 8)  # a follower that had read up to LSN 7: told
    assert read_lsns(shard) == [1, 2, 3, 4, 5, 11]


def test_verify_and_cdc_info_name_the_lsns_the_next_writer_discards(shard: Path) -> None:
    heard_then_lost(shard, 10, 5)
    report = verify_shard(shard)
    assert (report.torn_tail_lsns, report.next_lsn) == ((6, 10), 11)
    info = shard_read.info(shard)
    assert (info["latest_lsn"], info["next_lsn"], info["torn_tail_lsns"]) == (5, 11, [6, 10])
    shown = run("cdc", "info", str(shard))
    assert shown.returncode == 0, shown.stderr
    assert orjson.loads(shown.stdout)["next_lsn"] == 11
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == info["next_lsn"]


def test_a_damaged_heartbeat_is_no_evidence(shard: Path) -> None:
    heard_then_lost(shard, 10, 5)
    flip(Path(heartbeat_path(str(shard))), 30)
    assert verify_shard(shard).torn_tail_lsns is None
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == 6


def test_repair_discards_up_to_the_heartbeat(shard: Path) -> None:
    heard_then_lost(shard, 10, 6)
    seg = segments(shard)[-1]
    start, _ = frame_spans(seg)[3]
    flip(seg, start + 40)  # the payload of LSN 4; records 7..10 are gone without a trace
    with pytest.raises(CorruptionError):
        open_writer(shard)
    report = truncate_at(shard, start)
    assert (report.discarded, report.next_lsn) == ((4, 10), 11)
    with open_writer(shard) as writer:
        assert writer.append(kv(b"after")) == 11
    with pytest.raises(LsnDiscardedError):
        shard_read.read(shard, 4)  # a repair's range stops readers at its first LSN too


def test_repair_next_lsn_refuses_below_the_heartbeat(shard: Path) -> None:
    heard_then_lost(shard, 10, 5)
    with pytest.raises(InvalidArgumentError) as refused:
        set_next_lsn(shard, 8)
    assert "at least 11" in refused.value.message
    assert set_next_lsn(shard, 11).discarded == (6, 10)


def test_a_range_a_repair_discarded_stays_one_a_reader_stops_at(shard: Path) -> None:
    """A heartbeat inside a range ``wal repair`` discarded is not cut again as a torn tail:
    readers still stop at its first LSN (the records were durable, and lost to damage)."""
    with open_writer(shard, heartbeat_ms=None) as writer:
        for i in range(10):
            writer.append(kv(b"key-%d" % i))
    seg = segments(shard)[-1]
    assert truncate_at(shard, frame_spans(seg)[5][0]).discarded == (6, 10)
    with open_writer(shard) as writer:
        assert writer.recovery.discarded is None
        assert writer.append(kv(b"after")) == 11
    control = load_control(str(shard))
    assert control is not None and (control.discarded, control.torn) == (((6, 10),), ())
    with pytest.raises(LsnDiscardedError):
        shard_read.read(shard, 6)
