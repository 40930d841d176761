"""Retention: every rule and its reason, the newest segment, snapshots, consumer pins,
``max_pinned_bytes``, dry runs, ``--before``, and the writer applying the policy as it rotates."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import moonish
from moonish.clock import FixedClock
from moonish.datadir import consumers
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import delete_segments, plan, prune, prune_shards
from moonish.errors import (
    CorruptionError,
    InvalidArgumentError,
    LsnNotRetainedError,
)
from moonish.log.segment import index_path, list_segments, list_snapshots
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.config import StreamConfig, load_config
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.datadirs import data_dir, fill, keyspace_shard
from tests.support.retention import assert_sound, keyspace_state, lsns, sizes
from tests.support.wal import START_US

SECOND_US = 1_000_000


# -- the rules -----------------------------------------------------------------------------
def test_max_bytes_keeps_at_most_that_many_bytes(shard: Path) -> None:
    fill(shard, 300)
    before = sizes(shard)
    report = prune(str(shard), RetentionPolicy(max_bytes=5000))
    after = sizes(shard)
    assert report.deleted and {d.reason for d in report.deleted} == {"max_bytes"}
    assert sum(after.values()) <= 5000 < sum(after.values()) + report.deleted[-1].bytes
    assert [d.base_lsn for d in report.deleted] == sorted(set(before) - set(after))
    assert not any(os.path.exists(index_path(str(shard), d.base_lsn)) for d in report.deleted)
    assert_sound(shard)


def test_max_records_keeps_at_most_that_many_lsns(shard: Path) -> None:
    fill(shard, 300)
    report = prune(str(shard), RetentionPolicy(max_records=100))
    oldest = list_segments(str(shard))[0]
    assert {d.reason for d in report.deleted} == {"max_records"}
    assert 301 - oldest <= 100 < 301 - report.deleted[-1].base_lsn
    with pytest.raises(LsnNotRetainedError) as caught:
        lsns(shard, oldest - 1)
    assert caught.value.oldest_lsn == oldest
    assert_sound(shard)


def test_max_age_ms_uses_the_newest_record_of_a_segment(shard: Path) -> None:
    fill(shard, 200, step_us=SECOND_US)  # record i committed i - 1 seconds after START
    now_us = START_US + 199 * SECOND_US  # the newest record's time
    report = prune(str(shard), RetentionPolicy(max_age_ms=50_000), clock=FixedClock(now_us))
    assert {d.reason for d in report.deleted} == {"max_age_ms"}
    for deletion in report.deleted:  # newest record older than 50 s
        assert (199 - (deletion.last_lsn - 1)) * 1000 > 50_000
    first_kept = list_segments(str(shard))
    kept_last = first_kept[1] - 1  # the newest record of the oldest segment left
    assert (199 - (kept_last - 1)) * 1000 <= 50_000


def test_min_age_ms_holds_young_segments(shard: Path) -> None:
    fill(shard, 200, step_us=SECOND_US)
    clock = FixedClock(START_US + 199 * SECOND_US)
    report = prune(str(shard), RetentionPolicy(max_records=0, min_age_ms=100_000), clock=clock)
    assert report.held_by == "min_age_ms"
    for deletion in report.deleted:
        assert (199 - (deletion.last_lsn - 1)) * 1000 >= 100_000
    kept_last = list_segments(str(shard))[1] - 1
    assert (199 - (kept_last - 1)) * 1000 < 100_000


def test_the_newest_segment_always_stays(shard: Path) -> None:
    fill(shard, 100)
    newest = list_segments(str(shard))[-1]
    report = prune(str(shard), RetentionPolicy(max_records=0, max_bytes=0, max_age_ms=0))
    assert list_segments(str(shard)) == [newest] and report.held_by == "active segment"
    assert_sound(shard)
    fill(shard, 5)  # the writer continues after the end (control.json is untouched)
    assert lsns(shard, newest)[-1] == 105


def test_the_first_rule_that_wants_a_segment_is_its_reason(shard: Path) -> None:
    fill(shard, 300)
    total = sum(sizes(shard).values())
    policy = RetentionPolicy(max_bytes=total - 2000, max_records=150)
    reasons = [d.reason for d in prune(str(shard), policy).deleted]
    assert reasons[0] == "max_bytes" and reasons[-1] == "max_records"


def test_a_policy_that_deletes_nothing_keeps_everything(shard: Path) -> None:
    fill(shard, 100)
    before = sizes(shard)
    report = prune(str(shard), RetentionPolicy(min_age_ms=0, max_pinned_bytes=0))
    assert report.deleted == () and report.held_by is None and sizes(shard) == before


def test_policies_are_checked() -> None:
    with pytest.raises(InvalidArgumentError):
        RetentionPolicy(max_bytes=-1)
    with pytest.raises(InvalidArgumentError):
        RetentionPolicy.from_json({"max_bites": 1})
    policy = RetentionPolicy(max_bytes=1, min_age_ms=2)
    assert RetentionPolicy.from_json(policy.to_json()) == policy


def test_only_a_run_of_the_oldest_segments_is_deleted(shard: Path) -> None:
    fill(shard, 100)
    found = plan(str(shard), RetentionPolicy(max_records=0), now_ms=0)
    with pytest.raises(InvalidArgumentError):
        delete_segments(str(shard), found.deletions[1:2])  # a hole in the log
    with pytest.raises(InvalidArgumentError):
        delete_segments(str(shard), found.deletions[::-1])
    assert_sound(shard)


# -- snapshots -----------------------------------------------------------------------------
def test_a_keyspace_shard_keeps_what_its_snapshot_needs(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0"
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=2048, heartbeat_ms=None),
        expiry_sweep_ms=0,
    )
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        for i in range(150):
            writer.execute(0, ["SET", f"k{i % 13}", "v" * 30])
    policy = RetentionPolicy(max_records=0)
    report = prune(str(shard), policy)  # no snapshot: the writer needs every record
    assert report.deleted == () and report.snapshot_blocked
    assert report.held_by == "snapshot at LSN 0"
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        _, first = writer.checkpoint()
        for i in range(150):
            writer.execute(0, ["SET", f"k{i % 13}", "w" * 30])
        _, second = writer.checkpoint()
        state = keyspace_state(writer)
    assert list_snapshots(str(shard)) == [first, second]
    report = prune(str(shard), policy)
    assert report.deleted and all(d.last_lsn <= first for d in report.deleted)
    assert report.held_by == f"snapshot at LSN {first}" and report.snapshot_blocked
    # a --snapshot reader and the writer still find what they need
    rows = moonish.read(shard, 0, 10_000, snapshot=True)
    assert rows.events and rows.events[0].op == "r"
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        assert keyspace_state(writer) == state
    assert_sound(shard)


def test_the_writer_applies_the_policy_as_it_rotates(tmp_path: Path) -> None:
    shard = tmp_path / "shard-0"
    policy = RetentionPolicy(max_records=120)
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=2048, heartbeat_ms=None),
        StreamConfig(retention=policy),
        expiry_sweep_ms=0,
    )
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        for i in range(600):
            writer.execute(0, ["SET", f"k{i % 29}", f"value-{i}" * 4])
            assert writer.retention_error is None
            assert writer.next_lsn - list_segments(str(shard))[0] <= 120 + 40  # a segment
        assert writer.last_prune is not None
        state = keyspace_state(writer)
    assert load_config(str(shard)) is not None
    assert list_snapshots(str(shard))  # a snapshot was written first, when it held the policy
    assert list_segments(str(shard))[0] > 1
    assert_sound(shard)
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:  # recovers
        assert keyspace_state(writer) == state


def test_a_retention_failure_never_fails_an_append(tmp_path: Path) -> None:
    root = tmp_path / "data"
    shard = root / "shard-0"
    keyspace_shard(shard, 50)
    consumers.create(root, "c", (1,))
    (root / "consumers" / "c.json").write_bytes(b"{}")  # damaged: what it pins is unknown
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=2048, heartbeat_ms=None),
        expiry_sweep_ms=0,
    )
    before = list_segments(str(shard))[0]
    with ShardWriter(shard, options, FixedClock(START_US, 1000)) as writer:
        writer.set_retention(RetentionPolicy(max_records=0))
        for i in range(200):
            writer.execute(0, ["SET", f"k{i}", "v" * 40])
        assert isinstance(writer.retention_error, CorruptionError)
        assert list_segments(str(shard))[0] == before  # nothing deleted blindly
        consumers.drop(root, "c")
        for i in range(60):
            writer.execute(0, ["SET", f"k{i}", "w" * 40])
        assert writer.retention_error is None and list_segments(str(shard))[0] > before


# -- consumers -----------------------------------------------------------------------------
def test_consumers_pin_what_they_have_not_confirmed(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=1, records=200)
    shard = root / "shard-0"
    consumers.create(root, "c", (42,))
    report = prune(str(shard), RetentionPolicy(max_records=0))
    assert report.held_by == "consumer c"
    assert all(d.last_lsn <= 42 for d in report.deleted)
    assert lsns(shard, 43)[0] == 43
    consumers.ack(root, "c", (150,))
    report = prune(str(shard), RetentionPolicy(max_records=0))
    assert report.deleted and all(d.last_lsn <= 150 for d in report.deleted)
    assert lsns(shard, 151)[0] == 151


def test_max_pinned_bytes_marks_the_laggiest_lost(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=1, records=300)
    shard = root / "shard-0"
    consumers.create(root, "slow", (5,))
    consumers.create(root, "medium", (200,))
    consumers.create(root, "fast", (300,))
    segs = sizes(shard)
    bases = sorted(segs)
    # what "medium" alone holds: the sealed segments from the one holding LSN 201
    held = sum(segs[b] for i, b in enumerate(bases[:-1]) if bases[i + 1] - 1 > 200)
    policy = RetentionPolicy(max_records=0, max_pinned_bytes=held)
    report = prune(str(shard), policy)
    assert [lost.name for lost in report.lost] == ["slow"]
    assert "max_pinned_bytes" in report.lost[0].reason
    assert consumers.load(root, "slow").lost and not consumers.load(root, "medium").lost
    assert report.held_by == "consumer medium" and lsns(shard, 201)[0] == 201
    report = prune(str(shard), RetentionPolicy(max_records=0, max_pinned_bytes=0))
    assert [lost.name for lost in report.lost] == ["medium"]  # fast holds nothing
    assert not consumers.load(root, "fast").lost and report.held_by == "active segment"


def test_a_dry_run_changes_nothing(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=1, records=300)
    shard = root / "shard-0"
    consumers.create(root, "slow", (5,))
    files = sorted(os.listdir(shard))
    stored = (root / "consumers" / "slow.json").read_bytes()
    policy = RetentionPolicy(max_records=0, max_pinned_bytes=0)
    report = prune(str(shard), policy, dry_run=True)
    assert report.deleted and [lost.name for lost in report.lost] == ["slow"]
    assert sorted(os.listdir(shard)) == files
    assert (root / "consumers" / "slow.json").read_bytes() == stored
    assert report.to_json()["dry_run"] is True


def test_before_refuses_to_pass_a_consumer_without_force(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=2, records=200)
    shards = [str(root / "shard-0"), str(root / "shard-1")]
    consumers.create(root, "c", (200, 20))  # shard 0 alone could be pruned
    files = [sorted(os.listdir(shard)) for shard in shards]
    policies = [RetentionPolicy()] * 2
    with pytest.raises(InvalidArgumentError, match=r"consumer\(s\) c "):
        prune_shards(shards, policies, before=[150, 150])
    assert [sorted(os.listdir(shard)) for shard in shards] == files  # nothing, anywhere
    reports = prune_shards(shards, policies, before=[150, 150], force=True)
    assert {d.reason for r in reports for d in r.deleted} == {"before"}
    assert all(d.last_lsn <= 150 for r in reports for d in r.deleted)
    assert consumers.load(root, "c").lost
    assert "--before 150 --force" in (consumers.load(root, "c").lost_reason or "")
