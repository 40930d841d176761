"""Named consumers: the store (create, list, forward-only ack, seek, drop, lost), two processes
acking one consumer, and a shard directory as a data directory of one shard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from moonish.clock import FixedClock
from moonish.datadir import consumers
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import prune
from moonish.errors import (
    ConsumerLostError,
    ConsumerNotFoundError,
    CorruptionError,
    InvalidArgumentError,
    LsnNotRetainedError,
)
from moonish.log.reader import ShardReader
from moonish.log.repair import truncate_at
from moonish.log.segment import list_segments, list_snapshots, segment_path
from moonish.log.verify import verify_shard
from tests.support.cli import cli
from tests.support.datadirs import data_dir, fill
from tests.support.wal import START_US


def test_create_load_list_drop(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    clock = FixedClock(START_US)
    made = consumers.create(root, "export", (3, 7), owner="export", clock=clock)
    assert made.positions == (3, 7) and made.owner == "export" and made.status == "active"
    assert made.created_ms == made.updated_ms == START_US // 1000
    assert consumers.load(root, "export") == made
    consumers.create(root, "a-1.x_y", (0, 0))
    assert [c.name for c in consumers.list_consumers(root)] == ["a-1.x_y", "export"]
    stored = (root / "consumers" / "export.json").read_bytes()
    assert b'"crc32c": ' in stored and orjson.loads(stored)["positions"] == [3, 7]
    consumers.drop(root, "export")
    with pytest.raises(ConsumerNotFoundError):
        consumers.load(root, "export")
    with pytest.raises(ConsumerNotFoundError):
        consumers.drop(root, "export")
    assert [c.name for c in consumers.list_consumers(root)] == ["a-1.x_y"]
    assert sorted(os.listdir(root / "consumers")) == ["a-1.x_y.json", "a-1.x_y.lock"]


def test_create_refuses_an_existing_name_unless_told(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    consumers.create(root, "c", (1, 1))
    with pytest.raises(InvalidArgumentError, match="exists"):
        consumers.create(root, "c", (2, 2))
    assert consumers.load(root, "c").positions == (1, 1)
    assert consumers.create(root, "c", (2, 2), replace=True).positions == (2, 2)


@pytest.mark.parametrize("name", ["", ".hidden", "-x", "_x", "a/b", "a b", "é", "x" * 65, ".."])
def test_names_are_validated(tmp_path: Path, name: str) -> None:
    root = data_dir(tmp_path, shards=1)
    with pytest.raises(InvalidArgumentError, match="consumer names"):
        consumers.create(root, name, (0,))
    assert not (root / "consumers").exists() or os.listdir(root / "consumers") == []


def test_positions_are_checked_against_the_log(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    with pytest.raises(InvalidArgumentError, match="2 shards"):
        consumers.create(root, "c", (0,))
    with pytest.raises(
        InvalidArgumentError, match="beyond the end of the log: its last LSN is 100"
    ):
        consumers.create(root, "c", (0, 101))
    consumers.create(root, "c", (100, 100))  # the end itself is fine: nothing new yet
    assert consumers.list_consumers(root)[0].positions == (100, 100)


def test_ack_only_moves_forward(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    consumers.create(root, "c", (0, 0))
    assert consumers.ack(root, "c", (5, 3)).positions == (5, 3)
    assert consumers.ack(root, "c", (2, 7)).positions == (5, 7)  # component-wise max
    before = (root / "consumers" / "c.json").stat().st_mtime_ns
    assert consumers.ack(root, "c", (1, 1)).positions == (5, 7)  # older: nothing written
    assert (root / "consumers" / "c.json").stat().st_mtime_ns == before
    with pytest.raises(InvalidArgumentError, match="beyond the end"):
        consumers.ack(root, "c", (6, 101))
    assert consumers.load(root, "c").positions == (5, 7)  # nothing stored
    with pytest.raises(InvalidArgumentError):
        consumers.ack(root, "c", (9,))
    with pytest.raises(ConsumerNotFoundError):
        consumers.ack(root, "nope", (1, 1))


def test_lost_refuses_acks_until_seek(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    consumers.create(root, "c", (4, 4))
    lost = consumers.mark_lost(root, "c", "a test said so", shard=1)
    assert lost.status == "lost" and lost.lost_reason == "a test said so" and lost.lost_shard == 1
    assert consumers.mark_lost(root, "c", "again").lost_reason == "a test said so"
    with pytest.raises(ConsumerLostError) as caught:
        consumers.ack(root, "c", (9, 9))
    error = caught.value
    assert isinstance(error, LsnNotRetainedError) and error.kind == "not_retained"
    assert (error.consumer, error.status, error.shard, error.lsn) == ("c", "lost", 1, 5)
    assert consumers.pins(root) == [None, None]  # a lost consumer pins nothing
    back = consumers.seek(root, "c", (2, 0))  # back, and the status is cleared
    assert (back.positions, back.status, back.lost_reason) == ((2, 0), "active", None)
    assert consumers.ack(root, "c", (9, 9)).positions == (9, 9)


def test_seek_and_create_refuse_positions_no_longer_retained(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    report = prune(str(root / "shard-0"), RetentionPolicy(max_records=30))
    oldest = report.deleted[-1].last_lsn + 1
    consumers.create(root, "c", (oldest - 1, 0))
    with pytest.raises(LsnNotRetainedError) as caught:
        consumers.seek(root, "c", (0, 0))
    assert caught.value.oldest_lsn == oldest
    with pytest.raises(LsnNotRetainedError):
        consumers.create(root, "d", (oldest - 2, 0))


def test_pins_are_the_lowest_active_position(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    assert consumers.pins(root) == [None, None]
    consumers.create(root, "a", (10, 50))
    consumers.create(root, "b", (30, 20))
    consumers.create(root, "c", (1, 1))
    consumers.mark_lost(root, "c", "gone")
    assert consumers.pins(root) == [10, 20]
    holders = consumers.holders(str(root / "shard-1"))
    assert [(h.consumer.name, h.position, h.component) for h in holders] == [
        ("b", 20, 1),
        ("a", 50, 1),
    ]


def test_a_damaged_consumer_file_is_named(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    consumers.create(root, "c", (1, 1))
    path = root / "consumers" / "c.json"
    data = bytearray(path.read_bytes())
    at = data.index(b'"created_ms": ') + len(b'"created_ms": ')
    data[at] = ord("1") if data[at] != ord("1") else ord("2")  # still JSON, other value
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptionError) as caught:
        consumers.list_consumers(root)
    assert caught.value.path == str(path)
    with pytest.raises(CorruptionError):
        consumers.ack(root, "c", (2, 2))


ACKER = """
import sys
from moonish.datadir import consumers
root, shard, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for lsn in range(1, count + 1):
    positions = [0, 0]
    positions[shard] = lsn
    consumers.ack(root, "c", positions)
"""


@pytest.mark.slow
def test_two_processes_acking_one_consumer_lose_nothing(tmp_path: Path) -> None:
    """Each process moves its own shard forward; without the per-consumer lock, one's
    read-modify-write would put the other's shard back (seen by the observer)."""
    root = data_dir(tmp_path)
    consumers.create(root, "c", (0, 0))
    count = 60
    procs = [
        subprocess.Popen([sys.executable, "-c", ACKER, str(root), str(k), str(count)])
        for k in (0, 1)
    ]
    seen = (0, 0)
    while any(proc.poll() is None for proc in procs):
        now = consumers.load(root, "c").positions
        assert all(a >= b for a, b in zip(now, seen, strict=True)), (seen, now)
        seen = now
    assert [proc.wait() for proc in procs] == [0, 0]
    assert consumers.load(root, "c").positions == (count, count)


def test_a_shard_directory_is_a_data_directory_of_one_shard(tmp_path: Path) -> None:
    shard = tmp_path / "solo"
    fill(shard, 60)
    consumers.create(shard, "c", (10,))
    assert (shard / "consumers" / "c.json").exists()
    assert consumers.pins(shard) == [10]
    # nothing that lists a shard directory trips on the consumers directory in it
    assert verify_shard(shard).records == 60
    assert list_segments(str(shard))[0] == 1 and list_snapshots(str(shard)) == []
    with ShardReader(shard) as reader:
        reader.seek(11)
        assert reader.poll(1)[0].lsn == 11
    base = list_segments(str(shard))[-1]
    report = truncate_at(str(shard), os.path.getsize(segment_path(str(shard), base)), dry_run=True)
    assert report.to_json()
    assert cli("wal", "verify", str(shard)) == 0
    assert [h.consumer.name for h in consumers.holders(str(shard))] == ["c"]


def test_a_shard_of_a_data_directory_is_held_by_both_kinds_of_consumer(tmp_path: Path) -> None:
    root = data_dir(tmp_path)
    consumers.create(root, "whole", (40, 60))
    consumers.create(root / "shard-1", "own", (30,))
    holders = consumers.holders(str(root / "shard-1"))
    assert [(h.consumer.name, h.position) for h in holders] == [("own", 30), ("whole", 60)]
