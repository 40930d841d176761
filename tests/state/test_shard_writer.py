"""ShardWriter: c/u/d, view types, image limits, expiry with a fake clock, transactions,
stream on/off, recovery, and snapshot + stream continuity."""

from __future__ import annotations

import itertools
import os
import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moonish
from moonish.cdc.cursor import Cursor
from moonish.clock import FixedClock
from moonish.errors import CommandError, CorruptionError, LsnNotRetainedError
from moonish.log.records import ViewType
from moonish.log.segment import list_segments, segment_path
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.config import StreamConfig
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.wal import START_US

START_MS = START_US // 1000


def open_shard(
    path: Path,
    view: ViewType = ViewType.NEW_AND_OLD_IMAGES,
    *,
    clock: FixedClock | None = None,
    segment_bytes: int = 64 << 20,
    max_value_bytes: int = 4096,
) -> ShardWriter:
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=segment_bytes),
        StreamConfig(view, max_value_bytes),
        expiry_sweep_ms=0,
    )
    return ShardWriter(path, options, clock or FixedClock(START_US, 1000))


def envelopes(path: Path, start: int | Cursor = 0, **kwargs: Any) -> list[dict[str, Any]]:
    result = moonish.read(path, start, 10_000, **kwargs)
    return [orjson.loads(envelope) for envelope in result.events.envelopes]


def test_ops_follow_the_key_state(shard: Path) -> None:
    with open_shard(shard) as writer:
        writer.execute(0, ["RPUSH", "l", "a", "b"])  # c
        writer.execute(0, ["RPUSH", "l", "c"])  # u
        writer.execute(0, ["LPOP", "l", "2"])  # u
        writer.execute(0, ["LPOP", "l"])  # d: the last element
        writer.execute(0, ["HSET", "h", "f", "v"])  # c
        writer.execute(0, ["HDEL", "h", "f"])  # d: the last field
        writer.execute(0, ["DEL", "nothing"])  # no change: no record
        writer.execute(0, ["SET", "a", "1"])  # c
        writer.execute(0, ["RENAME", "a", "b"])  # d a, c b
        writer.execute(0, ["FLUSHDB"])  # d b
    got = [(e["op"], (e["before"] or e["after"])["key"]) for e in envelopes(shard)]
    assert got == [
        ("c", "l"),
        ("u", "l"),
        ("u", "l"),
        ("d", "l"),
        ("c", "h"),
        ("d", "h"),
        ("c", "a"),
        ("d", "a"),
        ("c", "b"),
        ("d", "b"),
    ]


def test_refused_command_writes_nothing(shard: Path) -> None:
    with open_shard(shard) as writer:
        writer.execute(0, ["SET", "s", "x"])
        with pytest.raises(CommandError, match=r"^WRONGTYPE"):
            writer.execute(0, ["LPUSH", "s", "a"])
        with pytest.raises(CommandError, match="not an integer"):
            writer.execute(0, ["INCR", "s"])
        assert writer.next_lsn == 2
        assert writer.keyspace.get(0, b"s").value == b"x"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("view", "before", "after"),
    [
        (ViewType.KEYS_ONLY, "key", "key"),
        (ViewType.NEW_IMAGE, "key", "new"),
        (ViewType.OLD_IMAGE, "old", "key"),
        (ViewType.NEW_AND_OLD_IMAGES, "old", "new"),
    ],
)
def test_view_types(shard: Path, view: ViewType, before: Any, after: Any) -> None:
    old = {"db": 0, "key": "k", "type": "hash", "value": [["f", "1"]], "expire_at_ms": None}
    new = {
        "db": 0,
        "key": "k",
        "type": "hash",
        "value": [["f", "1"], ["g", "2"]],
        "expire_at_ms": None,
    }
    key_only = {"db": 0, "key": "k"}
    images = {"old": old, "new": new, "key": key_only}
    with open_shard(shard, view) as writer:
        writer.execute(0, ["HSET", "k", "f", "1"])
        writer.execute(0, ["HSET", "k", "g", "2"])
        writer.execute(0, ["DEL", "k"])
    created, updated, deleted = envelopes(shard)
    assert created["op"] == "c" and created["before"] is None
    assert updated["before"] == images[before]
    assert updated["after"] == images[after]
    assert created["after"] == (images[after] if after == "key" else old)
    assert deleted["after"] is None
    assert deleted["before"] == (new if before == "old" else key_only)


def test_images_of_every_type(shard: Path) -> None:
    with open_shard(shard, clock=FixedClock(START_US, 0)) as writer:
        writer.execute(0, ["SET", b"\xff", "caf\xe9", "PXAT", str(START_MS + 10_000)])
        writer.execute(0, ["SADD", "s", "b", "a"])
        writer.execute(0, ["ZADD", "z", "2", "x", "1", "y", "+inf", "w"])
        writer.execute(0, ["XADD", "x", "1-1", "f", "v"])
        writer.execute(0, ["RPUSH", "l", "1", "2"])
    after = [e["after"] for e in envelopes(shard)]
    assert after[0] == {
        "db": 0,
        "key": {"_b64": "/w=="},
        "type": "string",
        "value": "café",
        "expire_at_ms": START_MS + 10_000,
    }
    assert after[1]["value"] == ["a", "b"]
    assert after[2]["value"] == [["y", 1.0], ["x", 2.0], ["w", "inf"]]
    assert after[3]["value"] == {
        "entries": [{"id": "1-1", "fields": [["f", "v"]]}],
        "last_id": "1-1",
        "entries_added": 1,
        "max_deleted_id": "0-0",
        "groups": [],
    }
    assert after[4]["value"] == ["1", "2"]


def test_large_values_are_left_out_with_their_size(shard: Path) -> None:
    with open_shard(shard, max_value_bytes=64) as writer:
        writer.execute(0, ["RPUSH", "l", *[f"element-{i}" for i in range(10)]])
        writer.execute(0, ["RPUSH", "l", "x"])
    created, updated = envelopes(shard)
    size = 10
    assert created["after"]["value"] is None and created["after"]["omitted_length"] == size
    assert updated["before"]["value"] is None and updated["before"]["omitted_length"] == size
    assert updated["after"]["type"] == "list"
    assert list(created["after"]) == [
        "db",
        "key",
        "type",
        "value",
        "expire_at_ms",
        "omitted_length",
    ]


def test_a_value_that_grows_past_the_limit_keeps_its_json_type(shard: Path) -> None:
    """Between before and after of one envelope ``value`` is an array or null, never an
    object: the length of a value left out is a field of its own (docs/images.md)."""
    with open_shard(shard, max_value_bytes=40) as writer:
        writer.execute(0, ["RPUSH", "l", "a"])
        writer.execute(0, ["RPUSH", "l", *[f"element-{i}" for i in range(10)]])
        writer.execute(0, ["SET", 'k"omitted', '{"_omitted_length":1}'])
    _, grown, text = envelopes(shard)
    assert grown["before"]["value"] == ["a"] and grown["after"]["value"] is None
    assert grown["after"]["omitted_length"] == 11 and "omitted_length" not in grown["before"]
    assert text["after"]["value"] == '{"_omitted_length":1}'  # data that looks like one stays


def test_expiry_lazy_and_swept_are_marked(shard: Path) -> None:
    clock = FixedClock(START_US, 0)
    with open_shard(shard, clock=clock) as writer:
        writer.execute(0, ["SET", "lazy", "1", "PX", "100"])
        writer.execute(0, ["SET", "swept", "1", "EX", "1"])
        writer.execute(0, ["SET", "kept", "1", "EX", "10"])
        clock.advance(500_000)  # 500 ms: "lazy" is due, "swept" not yet
        writer.execute(0, ["APPEND", "lazy", "x"])  # expires it first, then creates it
        assert writer.sweep_expired() == 0
        clock.advance(600_000)
        assert writer.sweep_expired() == 1
        writer.execute(0, ["DEL", "kept"])
    events = envelopes(shard)[3:]
    summary = [
        (e["op"], (e["before"] or e["after"])["key"], e["source"]["expired"]) for e in events
    ]
    assert summary == [
        ("d", "lazy", True),
        ("c", "lazy", False),
        ("d", "swept", True),
        ("d", "kept", False),
    ]
    assert events[0]["source"]["command"] == "DEL"
    assert events[0]["before"]["expire_at_ms"] == START_MS + 100


def test_background_sweep_expires_and_a_failure_is_raised_not_dropped(
    shard: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FixedClock(START_US, 0)
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=5)
    with ShardWriter(shard, options, clock) as writer:
        writer.execute(0, ["SET", "a", "1", "PX", "10"])
        clock.advance(20_000)
        deadline = time.monotonic() + 10
        while writer.keyspace.get(0, b"a") is not None and time.monotonic() < deadline:
            time.sleep(0.005)
        assert writer.keyspace.get(0, b"a") is None  # removed by the thread, not by a command

        def full(fd: int, data: bytes) -> int:
            raise OSError(28, "No space left on device")

        writer.execute(0, ["SET", "b", "1", "PX", "10"])
        with monkeypatch.context() as patched:  # the sweep's append finds the disk full
            patched.setattr(os, "write", full)
            clock.advance(20_000)
            while writer._sweeper is not None and writer._sweeper.is_alive():
                time.sleep(0.005)
        assert isinstance(writer._sweep_error, moonish.UnavailableError)
        with pytest.raises(moonish.UnavailableError, match="No space left on device"):
            writer.execute(0, ["SET", "c", "1"])
    assert [e["source"]["expired"] for e in envelopes(shard)] == [False, True, False]


def test_transaction_records_and_begin_end(shard: Path) -> None:
    with open_shard(shard) as writer:
        writer.execute(0, ["SET", "solo", "1"])
        result = writer.transaction(
            [(0, ["SET", "a", "1"]), (0, ["LPUSH", "a", "x"]), (1, ["MSET", "b", "2", "c", "3"])]
        )
    assert isinstance(result.reply[1], CommandError)
    assert result.lsns == [2, 3, 4]
    lines = envelopes(shard, transactions=True)
    statuses = [line.get("status") or line["op"] for line in lines]
    assert statuses == ["c", "BEGIN", "c", "c", "c", "END"]
    assert lines[1] == {
        "status": "BEGIN",
        "id": "0:2",
        "event_count": None,
        "data_collections": None,
        "ts_ms": lines[2]["source"]["ts_ms"],
    }
    assert lines[5]["event_count"] == 3
    assert lines[5]["data_collections"] == [{"data_collection": "shard-0", "event_count": 3}]
    assert [line["transaction"]["total_order"] for line in lines[2:5]] == [1, 2, 3]
    assert lines[4]["source"]["db"] == 1
    # resuming inside the batch: no BEGIN again, the END still comes
    rest = envelopes(shard, 3, transactions=True)
    assert [line.get("status") or line["op"] for line in rest] == ["c", "c", "END"]


def test_stream_off_and_view_changes_apply_from_then_on(shard: Path) -> None:
    with open_shard(shard, ViewType.KEYS_ONLY) as writer:
        writer.execute(0, ["SET", "k", "1"])
        writer.set_stream(StreamConfig(ViewType.OFF))
        writer.execute(0, ["SET", "k", "2"])
        writer.set_stream(StreamConfig(ViewType.NEW_IMAGE))
        writer.execute(0, ["SET", "k", "3"])
    assert moonish.info(shard)["stream"]["view_type"] == "NEW_IMAGE"
    events = envelopes(shard)
    assert [e["source"]["lsn"] for e in events] == [1, 3]
    assert events[0]["after"] == {"db": 0, "key": "k"}
    assert events[1]["after"]["value"] == "3"
    assert moonish.read(shard, 2, 1).cursor == Cursor(3)  # the skipped record moves it
    with open_shard(shard, ViewType.KEYS_ONLY) as reopened:  # stored config wins
        assert reopened.stream.view is ViewType.NEW_IMAGE
        assert reopened.keyspace.get(0, b"k").value == b"3"  # type: ignore[union-attr]


def test_recovery_replays_relative_times_and_rewritten_commands(shard: Path) -> None:
    clock = FixedClock(START_US, 1000)
    with open_shard(shard, clock=clock) as writer:
        writer.execute(0, ["SET", "t", "v", "EX", "100"])
        writer.execute(0, ["XADD", "x", "*", "f", "v"])
        writer.execute(0, ["SADD", "s", "a", "b", "c"])
        popped = writer.execute(0, ["SPOP", "s", "2"]).reply
        state = {
            (db, k): (
                e.type,
                repr(e.value.__dict__ if hasattr(e.value, "__dict__") else e.value),
                e.expire_at_ms,
            )
            for db, k, e in writer.keyspace.items()
        }
    events = envelopes(shard)
    set_ms, xadd_ms = events[0]["source"]["ts_ms"], events[1]["source"]["ts_ms"]
    spop = events[-1]
    assert spop["source"]["command"] == "SREM"  # logged as Redis propagates it
    assert sorted(spop["before"]["value"]) == ["a", "b", "c"]
    assert len(popped) == 2
    with open_shard(shard, clock=clock) as reopened:
        stream = reopened.keyspace.get(0, b"x")
        assert stream is not None and list(stream.value.entries) == [(xadd_ms, 0)]
        expiring = reopened.keyspace.get(0, b"t")
        assert expiring is not None and expiring.expire_at_ms == set_ms + 100_000
        assert len(reopened.keyspace.get(0, b"s").value) == 1  # type: ignore[union-attr]
        assert len(list(reopened.keyspace.items())) == len(state)


def test_recovery_needs_a_snapshot_when_segments_are_gone(shard: Path) -> None:
    with open_shard(shard, segment_bytes=4096) as writer:
        for i in range(200):
            writer.execute(0, ["SET", f"k{i % 7}", str(i)])
    os.unlink(segment_path(str(shard), list_segments(str(shard))[0]))
    with pytest.raises(CorruptionError, match="no snapshot covers them"):
        open_shard(shard, segment_bytes=4096)


COMMANDS = st.lists(
    st.tuples(st.sampled_from(["SET", "RPUSH", "DEL", "HSET", "INCR"]), st.sampled_from("abcdef")),
    min_size=1,
    max_size=40,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commands=COMMANDS, cut=st.integers(0, 40), limit=st.integers(1, 7))
def test_snapshot_then_stream_has_no_gap_and_no_overlap(
    tmp_path_factory: pytest.TempPathFactory,
    commands: list[tuple[str, str]],
    cut: int,
    limit: int,
) -> None:
    """Checkpoint after ``cut`` commands, drop the segments the snapshot covers, then read
    with --snapshot in pages of ``limit``: applying r rows then c/u/d gives the final state."""
    shard = tmp_path_factory.mktemp("shard")

    def argv(name: str, key: str, i: int) -> list[str]:
        return {
            "SET": ["SET", key, str(i)],
            "RPUSH": ["RPUSH", "l" + key, str(i)],
            "DEL": ["DEL", key, "l" + key, "h" + key],
            "HSET": ["HSET", "h" + key, "f", str(i)],
            "INCR": ["INCR", "n" + key],
        }[name]

    with open_shard(shard, segment_bytes=1024) as writer:
        for i, (name, key) in enumerate(commands):
            if i == cut:
                writer.checkpoint()
            writer.execute(0, argv(name, key, i))
        final = {k.decode(): e.value for _, k, e in writer.keyspace.items() if e.type == "string"}
        snapshots = moonish.info(shard)["snapshot_lsns"]
    if snapshots:  # retention: segments wholly before the snapshot's LSN may go
        bases = list_segments(str(shard))
        for base, after in itertools.pairwise(bases):
            if after <= snapshots[-1] + 1:
                os.unlink(segment_path(str(shard), base))
    table: dict[str, Any] = {}
    cursor: Cursor | int = 0
    first = True
    seen_lsns: list[int] = []
    while True:
        result = moonish.read(shard, cursor, limit, snapshot=first)
        first = False
        for event in result.events:
            envelope = orjson.loads(event.envelope)
            if event.op == "m":
                continue
            if event.op != "r":
                seen_lsns.append(event.lsn)
            image = envelope["after"] or envelope["before"]
            if envelope["after"] is None:
                table.pop(image["key"], None)
            else:
                table[image["key"]] = image["value"]
        if result.cursor == cursor:
            break
        cursor = result.cursor
    assert seen_lsns == sorted(set(seen_lsns))
    strings = {k: v for k, v in table.items() if isinstance(v, str)}
    assert strings == {k: v.decode() for k, v in final.items()}


def test_resuming_a_removed_snapshot_is_not_retained(shard: Path) -> None:
    with open_shard(shard) as writer:
        writer.execute(0, ["SET", "a", "1"])
        writer.execute(0, ["SET", "b", "1"])
        writer.checkpoint()
        first = moonish.read(shard, 0, 1, snapshot=True)
        assert str(first.cursor) == "snapshot:2:1"
        for i in range(3):
            writer.execute(0, ["SET", "c", str(i)])
            writer.checkpoint()
    with pytest.raises(LsnNotRetainedError):
        moonish.read(shard, first.cursor, 10)
    with pytest.raises(moonish.InvalidArgumentError, match="snapshot=True starts"):
        moonish.read(shard, 5, 10, snapshot=True)
