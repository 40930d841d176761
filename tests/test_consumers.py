"""Named consumers: the store (create, list, forward-only ack, seek, drop, lost), two processes
acking one consumer, a shard directory as a data directory of one shard, the lag table checked
against the log, and the ``moonish consumer`` commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from cli.main import main
from moonish.cdc import lag
from moonish.cdc.token import Token
from moonish.clock import FixedClock
from moonish.datadir import consumers
from moonish.datadir.retention import RetentionPolicy, prune
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
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.state.config import store_retention
from moonish.state.shard import ShardOptions, ShardWriter
from tests.conftest import START_US, kv

FRAME_OVERHEAD = 40  # v2: 36 header bytes + 4 trailer bytes
SEGMENT_HEADER = 40


def fill(shard: Path, records: int, *, segment_bytes: int = 1024, first_us: int = START_US,
         step_us: int = 1000, shard_id: int = 0) -> None:  # fmt: skip
    """Append ``records`` plain kv records; record ``i`` (1-based LSN ``i`` of a new shard)
    is committed at ``first_us + (i - 1) * step_us``."""
    options = WriterOptions(shard_id=shard_id, fsync=FsyncPolicy.NEVER,
                            segment_bytes=segment_bytes, heartbeat_ms=None)  # fmt: skip
    with WalWriter(shard, options, FixedClock(START_US)) as writer:
        base = writer.next_lsn - 1
        for i in range(records):
            writer.append(kv(b"k%d" % i, b"v" * 40), first_us + (base + i) * step_us)


def data_dir(tmp_path: Path, shards: int = 2, records: int = 100) -> Path:
    root = tmp_path / "data"
    for k in range(shards):
        fill(root / f"shard-{k}", records, shard_id=k)
    return root


def cli(*args: str) -> int:
    return main([*args])


# -- the store -----------------------------------------------------------------------------


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


# -- the lag table -------------------------------------------------------------------------


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


def keyspace_shard(path: Path, commands: int, *, segment_bytes: int = 2048) -> None:
    """A ShardWriter shard of ``commands`` SETs, then a checkpoint (snapshot at the end)."""
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=segment_bytes,
                                         heartbeat_ms=None), expiry_sweep_ms=0)  # fmt: skip
    with ShardWriter(path, options, FixedClock(START_US, 1000)) as writer:
        for i in range(commands):
            writer.execute(0, ["SET", f"key:{i % 17}", "v" * 30])
        writer.checkpoint()


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
        return {e.consumer.name: (e.shards[0].status, e.shards[0].reason)
                for e in lag.lag_table(root)}  # fmt: skip

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


# -- the commands --------------------------------------------------------------------------


def test_consumer_commands(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = data_dir(tmp_path)
    assert cli("consumer", "create", str(root), "a", "--from", "earliest") == 0
    assert orjson.loads(capsys.readouterr().out)["token"] == "m2.a0.a0"
    assert cli("consumer", "create", str(root), "b") == 0  # default: now
    assert orjson.loads(capsys.readouterr().out)["token"] == "m2.c100.c100"
    assert cli("consumer", "create", str(root), "b") == 2
    assert "exists" in capsys.readouterr().err
    assert cli("consumer", "ack", str(root), "a", "m2.b10.b20") == 0
    assert orjson.loads(capsys.readouterr().out) == {"name": "a", "token": "m2.b10.b20"}
    assert cli("consumer", "ack", str(root), "a", "m1.b10") == 2
    capsys.readouterr()
    assert cli("consumer", "list", str(root)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["CONSUMER", "SHARD", "CONFIRMED", "LATEST", "LAG", "LAG-BYTES",
                                "OLDEST-AGE", "STATUS"]  # fmt: skip
    assert lines[1].split()[:5] == ["a", "0", "10", "100", "90"]
    assert len(lines) == 5
    assert cli("consumer", "list", str(root), "--json") == 0
    listed = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [entry["name"] for entry in listed] == ["a", "b"]
    assert cli("consumer", "show", str(root), "a", "--json") == 0
    assert orjson.loads(capsys.readouterr().out)["lag_records"] == 90 + 80
    consumers.mark_lost(root, "a", "a test said so")
    assert cli("consumer", "ack", str(root), "a", "now") == 3
    assert "a test said so" in capsys.readouterr().err
    assert cli("consumer", "seek", str(root), "a", "earliest") == 0
    assert orjson.loads(capsys.readouterr().out)["token"] == "m2.a0.a0"
    assert cli("consumer", "drop", str(root), "a") == 0
    assert cli("consumer", "show", str(root), "a") == 2
    assert "no consumer named 'a'" in capsys.readouterr().err


def test_lag_table_text_shows_lost_reasons(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = data_dir(tmp_path, shards=1)
    consumers.create(root, "x", (1,))
    consumers.mark_lost(root, "x", "too far behind")
    assert cli("consumer", "list", str(root)) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("lost: too far behind")
