"""The consumers' lag table (moonish.cdc.lag) checked against the log: changes, bytes and ages
behind (position markers, checkpoints and messages are no lag), statuses (reserved, extended,
lost)."""

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
from moonish.log.records import Checkpoint, Message, position_marker
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


def commit_ms(shard: Path, lsn: int) -> int:
    with ShardReader(shard) as reader:
        reader.seek(lsn)
        return reader.poll(1)[0].commit_us // 1000


def not_changes(writer: WalWriter, count: int, source: bytes) -> None:
    """``count`` records that are no changes: position markers, a checkpoint, a message."""
    for i in range(count):
        if i % 3 == 0:
            writer.append(Checkpoint(writer.next_lsn - 1, f"cp{i}"))
        elif i % 3 == 1:
            writer.append(Message("moonish.test", b"m", 0))
        else:
            writer.append(position_marker(source))


def test_lag_counts_changes_only_not_markers_checkpoints_or_messages(tmp_path: Path) -> None:
    """A consumer that confirmed every change is at lag 0 with no oldest age, however many
    position markers, checkpoints and messages follow; one behind counts its changes, and its
    age and bytes are those of its next change, not of the records before it."""
    shard = tmp_path / "data" / "shard-0"
    with WalWriter(shard, WriterOptions(fsync=FsyncPolicy.NEVER), FixedClock(START_US, 1000)) as w:
        for i in range(10):
            w.append(kv(b"k%d" % i))  # LSNs 1..10
        not_changes(w, 6, b"pos-a")  # 11..16
        w.append(kv(b"late"))  # 17
        not_changes(w, 58, b"pos-b")  # 18..75
    consumers.create(shard.parent, "caught-up", (17,))
    consumers.create(shard.parent, "before-markers", (10,))
    consumers.create(shard.parent, "behind", (4,))
    now_us = START_US + 10**9
    table = {
        e.consumer.name: e.shards[0] for e in lag.lag_table(shard.parent, clock=FixedClock(now_us))
    }
    caught_up = table["caught-up"]
    assert (caught_up.lag_records, caught_up.lag_bytes) == (0, 0)
    assert caught_up.oldest_unconfirmed_age_ms is None and caught_up.latest_lsn == 75
    before = table["before-markers"]
    assert before.lag_records == 1  # LSN 17 alone
    assert before.oldest_unconfirmed_age_ms == now_us // 1000 - commit_ms(shard, 17)
    assert before.lag_bytes == frames_after(shard, 16)[0]  # from LSN 17's frame
    behind = table["behind"]
    assert behind.lag_records == 7  # LSNs 5..10 and 17
    assert behind.oldest_unconfirmed_age_ms == now_us // 1000 - commit_ms(shard, 5)
    assert lag.describe(shard.parent, "caught-up").to_json()["lag_records"] == 0


def test_past_count_records_every_lsn_counts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Changes are counted in the first COUNT_RECORDS records after a position; the LSNs
    after those count whatever they hold (an upper bound), and the next change is still
    found past a run of records that are not changes."""
    shard = tmp_path / "data" / "shard-0"
    with WalWriter(shard, WriterOptions(fsync=FsyncPolicy.NEVER), FixedClock(START_US, 1000)) as w:
        not_changes(w, 10, b"pos")  # 1..10
        w.append(kv(b"k"))  # 11
        not_changes(w, 9, b"pos2")  # 12..20
    consumers.create(shard.parent, "c", (0,))
    monkeypatch.setattr(lag, "COUNT_RECORDS", 5)
    monkeypatch.setattr(lag, "POLL_RECORDS", 2)
    (entry,) = lag.lag_table(shard.parent, clock=FixedClock(START_US + 10**9))
    assert entry.shards[0].lag_records == 15  # none in 1..5, then 6..20 each
    assert entry.shards[0].lag_bytes == frames_after(shard, 10)[0]  # LSN 11 is the next change
    monkeypatch.setattr(lag, "COUNT_RECORDS", 100)
    (entry,) = lag.lag_table(shard.parent, clock=FixedClock(START_US + 10**9))
    assert entry.shards[0].lag_records == 1


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
