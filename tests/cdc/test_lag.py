"""The consumers' lag table (moonish.cdc.lag) checked against the log: records, bytes and ages
behind, statuses (reserved, extended, lost), and reading on between positions as a seek would."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from moonish.cdc import lag
from moonish.cdc.token import Token
from moonish.clock import FixedClock
from moonish.datadir import consumers
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import prune
from moonish.log.reader import ShardReader
from moonish.log.segment import list_segments, segment_path
from moonish.log.verify import verify_shard
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.state.config import store_retention
from tests.support.datadirs import data_dir, keyspace_shard
from tests.support.wal import START_US, kv

FRAME_OVERHEAD = 40  # v2: 36 header bytes + 4 trailer bytes


SEGMENT_HEADER = 40


def frames_after(shard: Path, position: int) -> tuple[int, int]:
    """(bytes of every frame after ``position`` plus the headers of the segments after the
    one holding ``position + 1``, the LSN of the first record), read frame by frame."""
    with ShardReader(shard) as reader:
        reader.seek(position + 1)
        frames = reader.poll(100_000)
    later = [base for base in list_segments(str(shard)) if base > position + 1]
    total = sum(len(frame.payload) + FRAME_OVERHEAD for frame in frames)
    return total + SEGMENT_HEADER * len(later), frames[0].lsn


def test_lag_numbers_are_those_of_the_log(tmp_path: Path) -> None:
    root = data_dir(tmp_path, records=100)
    consumers.create(root, "c", (37, 100))
    now_us = START_US + 3_600_000_000
    (entry,) = lag.lag_table(root, clock=FixedClock(now_us))
    assert entry.token == str(Token((37, 100)))
    behind, caught_up = entry.shards
    size, first = frames_after(root / "shard-0", 37)
    commit_ms = (START_US + (first - 1) * 1000) // 1000
    assert (behind.confirmed_lsn, behind.latest_lsn, behind.lag_records) == (37, 100, 63)
    assert behind.lag_bytes == size
    assert behind.oldest_unconfirmed_age_ms == now_us // 1000 - commit_ms
    assert (behind.status, behind.reason) == ("reserved", None)
    assert (caught_up.lag_records, caught_up.lag_bytes) == (0, 0)
    assert caught_up.oldest_unconfirmed_age_ms is None
    assert entry.to_json()["lag_records"] == 63
    assert lag.describe(root, "c", clock=FixedClock(now_us)) == entry


def test_the_table_reads_on_between_positions_as_a_seek_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = tmp_path / "data" / "shard-0"
    options = WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=700, heartbeat_ms=None)
    with WalWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        for i in range(40):  # batches of 1 to 3 records: positions inside a batch too
            writer.append_batch([kv(b"k%d.%d" % (i, j)) for j in range(i % 3 + 1)])
    latest = verify_shard(shard).last_lsn
    assert latest is not None
    for position in range(latest + 1):
        consumers.create(shard.parent, f"c{position:03d}", (position,))
    clock = FixedClock(START_US + 10**9)
    walked = lag.lag_table(shard.parent, clock=clock)
    monkeypatch.setattr(lag, "WALK_RECORDS", -1)  # a seek for every position
    assert lag.lag_table(shard.parent, clock=clock) == walked
    for entry in walked[:-1]:
        assert entry.shards[0].lag_bytes == frames_after(shard, entry.shards[0].confirmed_lsn)[0]


def test_lag_statuses(tmp_path: Path) -> None:
    root = tmp_path / "data"
    shard = root / "shard-0"
    keyspace_shard(shard, 200)
    store_retention(str(shard), RetentionPolicy(max_records=50))
    latest = verify_shard(shard).last_lsn
    assert latest is not None
    consumers.create(root, "ahead", (latest - 10,))
    consumers.create(root, "behind", (5,))
    consumers.create(root, "marked", (50,))
    consumers.mark_lost(root, "marked", "a test said so")

    def statuses() -> dict[str, tuple[str, str | None]]:
        return {
            e.consumer.name: (e.shards[0].status, e.shards[0].reason) for e in lag.lag_table(root)
        }

    assert statuses() == {
        "ahead": ("reserved", None),  # the policy keeps its changes anyway
        "behind": ("extended", None),  # it is what holds segments the policy would remove
        "marked": ("lost", "a test said so"),
    }
    assert prune(str(shard), RetentionPolicy(max_records=50)).held_by == "consumer behind"
    consumers.ack(root, "behind", (latest,))
    assert prune(str(shard), RetentionPolicy(max_records=50)).deleted
    assert statuses()["behind"] == ("reserved", None)


def test_a_consumer_whose_changes_are_gone_is_lost_in_the_table(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    consumers.create(root, "c", (0, 0))
    for base in list_segments(str(root / "shard-1"))[:3]:  # removed by hand: not marked
        os.unlink(segment_path(str(root / "shard-1"), base))
    oldest = list_segments(str(root / "shard-1"))[0]
    (entry,) = lag.lag_table(root)
    assert entry.consumer.status == "active" and entry.shards[0].status == "reserved"
    gone = entry.shards[1]
    assert (gone.status, gone.reason) == ("lost", f"LSNs 1..{oldest - 1} are no longer retained")
    assert (
        gone.lag_records == 100 and gone.lag_bytes == frames_after(root / "shard-1", oldest - 1)[0]
    )
    consumers.seek(root, "c", (0, oldest - 1))
    assert lag.lag_table(root)[0].shards[1].status == "reserved"
