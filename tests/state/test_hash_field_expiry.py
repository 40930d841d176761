"""Redis 7.4 hash-field expiry in the keyspace, with a fixed clock: lazy and active field expiry
and their records, images with field times, snapshots and recovery."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from moonish.clock import FixedClock
from moonish.log.records import KvChange, ViewType
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.config import StreamConfig
from moonish.state.keyspace import Keyspace
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import HASH, Entry, entry_from_image, full_image, state_image
from tests.support.redis.hash_ttls import FAR, PAST, changes_at, our_hash

# -- lazy and active expiry, with a fixed clock ---------------------------------------------
T0 = 1_800_000_000_000


def fixed_writer(path: Path, view: ViewType = ViewType.NEW_AND_OLD_IMAGES) -> ShardWriter:
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER), StreamConfig(view=view), expiry_sweep_ms=0
    )
    return ShardWriter(path, options, FixedClock(T0 * 1000))


def _advance(writer: ShardWriter, ms: int) -> None:
    clock = writer._clock
    assert isinstance(clock, FixedClock)
    clock.advance(ms * 1000)


def _image(record: KvChange, side: str) -> Any:
    raw = getattr(record, side)
    return orjson.loads(raw) if raw else None


@pytest.mark.parametrize(
    "command",
    [["HINCRBY", "h", "a", "2"], ["HINCRBYFLOAT", "h", "a", "2"], ["HSETNX", "h", "a", "2"]],
)
def test_lazy_expiry_on_lookup_is_its_own_record(tmp_path: Path, command: list[str]) -> None:
    with fixed_writer(tmp_path / "s") as writer:
        writer.execute(0, ["HSET", "h", "a", "1", "b", "x"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 10), "FIELDS", "2", "a", "b"])
        _advance(writer, 10)  # at its time: still there (expired is strictly before now)
        assert writer.execute(0, ["HSETNX", "h", "a", "9"]).reply == 0
        _advance(writer, 1)
        result = writer.execute(0, command)
        assert result.reply in (2, b"2", 1)
        expiry, change = changes_at(writer, result.lsns)
        assert (expiry.op, expiry.command, expiry.expired, expiry.argv) == (
            "u",
            b"HDEL",
            True,
            (b"HDEL", b"h", b"a"),
        )
        assert _image(expiry, "before")["value"] == [["a", "1"], ["b", "x"]]
        assert _image(expiry, "before")["field_expire_at_ms"] == [["a", T0 + 10], ["b", T0 + 10]]
        assert _image(expiry, "after")["value"] == [["b", "x"]]
        assert (change.op, change.expired) == ("u", False)
        assert change.before == expiry.after  # the command starts where the expiry left it
        assert _image(change, "after")["field_expire_at_ms"] == [["b", T0 + 10]]
        entry = writer.keyspace.get(0, b"h")
        assert entry is not None and entry.field_expire_at_ms == {b"b": T0 + 10}


def test_lazy_expiry_of_the_last_field_deletes_the_key_first(tmp_path: Path) -> None:
    with fixed_writer(tmp_path / "s") as writer:
        writer.execute(0, ["HSET", "h", "a", "1"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 5), "FIELDS", "1", "a"])
        _advance(writer, 6)
        result = writer.execute(0, ["HINCRBY", "h", "a", "3"])
        expiry, change = changes_at(writer, result.lsns)
        assert (expiry.op, expiry.after, expiry.expired) == ("d", b"", True)
        assert (change.op, change.before, change.expired) == ("c", b"", False)
        assert _image(change, "after")["value"] == [["a", "3"]]


def test_loading_reads_an_expired_field_as_missing_and_keeps_it(tmp_path: Path) -> None:
    """As Redis loading an AOF (``hashTypeGetValue`` while ``server.loading``): no HDEL,
    HINCRBY counts from 0 and keeps the field's time (``HASH_SET_KEEP_TTL``)."""
    with fixed_writer(tmp_path / "s") as writer:
        for argv in (
            ["HSET", "h", "a", "5"],
            ["HPEXPIREAT", "h", PAST, "FIELDS", "1", "a"],
            ["HINCRBY", "h", "a", "3"],
        ):
            prepared = writer.prepare(0, [a.encode() for a in argv], T0 * 1000, loading=True)
            assert not prepared.expired
            writer.append(prepared.records, False, T0 * 1000)
        entry = writer.keyspace.get(0, b"h")
        assert entry is not None
        assert (entry.value, entry.field_expire_at_ms) == ({b"a": b"3"}, {b"a": int(PAST)})
        assert writer.sweep_expired() == 1
        assert writer.keyspace.get(0, b"h") is None


def test_sort_by_an_expired_hash_field_expires_it(tmp_path: Path) -> None:
    with fixed_writer(tmp_path / "s") as writer:
        writer.execute(0, ["RPUSH", "l", "1", "2"])
        writer.execute(0, ["HSET", "w_1", "f", "9", "g", "0"])
        writer.execute(0, ["HPEXPIREAT", "w_1", str(T0 + 1), "FIELDS", "1", "f"])
        _advance(writer, 2)
        result = writer.execute(0, ["SORT", "l", "BY", "w_*->f", "GET", "w_*->f", "STORE", "d"])
        assert result.reply == 2
        records = changes_at(writer, result.lsns)
        assert [(r.key, r.op, r.expired) for r in records] == [
            (b"w_1", "u", True),
            (b"d", "c", False),
        ]


def test_sweep_removes_due_fields_one_record_per_hash(tmp_path: Path) -> None:
    with fixed_writer(tmp_path / "s") as writer:
        writer.execute(0, ["HSET", "h", "a", "1", "b", "2", "c", "3"])
        writer.execute(0, ["HSET", "g", "a", "1"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 20), "FIELDS", "1", "c"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 10), "FIELDS", "1", "a"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 30), "FIELDS", "1", "b"])
        writer.execute(0, ["HPEXPIREAT", "g", str(T0 + 20), "FIELDS", "1", "a"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 40), "FIELDS", "1", "a"])  # moved
        _advance(writer, 19)
        assert writer.sweep_expired() == 0
        _advance(writer, 1)  # at the time: the sweep takes it (expire <= now)
        lsn = writer.next_lsn
        assert writer.sweep_expired() == 2
        g, h = changes_at(writer, [lsn, lsn + 1])  # equal times: by db, then key
        assert (h.key, h.op, h.argv, h.expired) == (b"h", "u", (b"HDEL", b"h", b"c"), True)
        assert _image(h, "after")["field_expire_at_ms"] == [["a", T0 + 40], ["b", T0 + 30]]
        assert (g.key, g.op, g.after, g.argv) == (b"g", "d", b"", (b"HDEL", b"g", b"a"))
        _advance(writer, 100)
        lsn = writer.next_lsn
        assert writer.sweep_expired() == 1
        (last,) = changes_at(writer, [lsn])
        assert (last.op, last.argv) == ("d", (b"HDEL", b"h", b"b", b"a"))  # soonest first
        assert len(writer.keyspace) == 0


@pytest.mark.parametrize(
    "view", [ViewType.KEYS_ONLY, ViewType.OLD_IMAGE, ViewType.NEW_IMAGE, ViewType.OFF]
)
def test_field_expiry_records_follow_the_view(tmp_path: Path, view: ViewType) -> None:
    with fixed_writer(tmp_path / "s", view) as writer:
        writer.execute(0, ["HSET", "h", "a", "1", "b", "2"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 1), "FIELDS", "1", "a"])
        _advance(writer, 1)
        lsn = writer.next_lsn
        writer.sweep_expired()
        (record,) = changes_at(writer, [lsn])
        key_only = {"db": 0, "key": "h"}
        before, after = _image(record, "before"), _image(record, "after")
        if view is ViewType.OFF:
            assert (before, after) == (None, None)
        elif view is ViewType.KEYS_ONLY:
            assert before == after == key_only
        elif view is ViewType.OLD_IMAGE:
            assert before["value"] == [["a", "1"], ["b", "2"]] and after == key_only
        else:
            assert before == key_only and after["value"] == [["b", "2"]]


# -- images, snapshots, recovery -------------------------------------------------------------
def test_images_carry_field_times_only_when_there_are_some() -> None:
    plain = Entry(HASH, {b"a": b"1", b"\xff": b"2"})
    assert full_image(0, b"h", plain) == (
        b'{"db":0,"key":"h","type":"hash","value":[["a","1"],[{"_b64":"/w=="},"2"]],'
        b'"expire_at_ms":null}'
    )
    timed = Entry(HASH, {b"a": b"1", b"\xff": b"2", b"c": b"3"}, 7, {b"c": 5, b"\xff": 6})
    image = full_image(0, b"h", timed)
    assert image.endswith(
        b'"expire_at_ms":7,"field_expire_at_ms":[[{"_b64":"/w=="},6],["c",5]]}'
    )  # in the hash's order
    assert b"field_expire_at_ms" not in full_image(0, b"h", timed, 10)  # value omitted
    db, key, back = entry_from_image(orjson.loads(state_image(0, b"h", timed)))
    assert (db, key, back.value, back.expire_at_ms) == (0, b"h", timed.value, 7)
    assert back.field_expire_at_ms == timed.field_expire_at_ms
    assert entry_from_image(orjson.loads(full_image(0, b"h", plain)))[2].field_expire_at_ms is None


@pytest.mark.parametrize(
    "image",
    [
        {
            "db": 0,
            "key": "h",
            "type": "hash",
            "value": [["a", "1"]],
            "expire_at_ms": None,
            "field_expire_at_ms": [["b", 5]],
        },
        {
            "db": 0,
            "key": "h",
            "type": "hash",
            "value": [["a", "1"]],
            "expire_at_ms": None,
            "field_expire_at_ms": [],
        },
        {
            "db": 0,
            "key": "l",
            "type": "list",
            "value": ["a"],
            "expire_at_ms": None,
            "field_expire_at_ms": [["a", 5]],
        },
    ],
)
def test_bad_field_times_in_an_image_are_refused(image: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        entry_from_image(image)


def _state(writer: ShardWriter) -> dict[tuple[int, bytes], Any]:
    return {(db, key): our_hash(entry) for db, key, entry in writer.keyspace.items()}


@pytest.mark.parametrize("snapshot", [False, True])
def test_field_times_survive_recovery(tmp_path: Path, snapshot: bool) -> None:
    with fixed_writer(tmp_path / "s") as writer:
        writer.execute(0, ["HSET", "h", "a", "1", "b", "2", "c", "3"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 50), "FIELDS", "2", "a", "b"])
        writer.execute(0, ["HPEXPIRE", "h", "100", "FIELDS", "1", "c"])
        writer.execute(0, ["HPERSIST", "h", "FIELDS", "1", "b"])
        writer.execute(0, ["COPY", "h", "h2"])
        if snapshot:
            writer.checkpoint()
        expected = _state(writer)
    with fixed_writer(tmp_path / "s") as reopened:
        assert _state(reopened) == expected
        _advance(reopened, 60)  # the reopened keyspace's sweep knows the times
        assert reopened.sweep_expired() == 2
        _advance(reopened, 50)
        assert reopened.sweep_expired() == 2
        assert _state(reopened) == {
            (0, b"h"): (HASH, {b"b": b"2"}, -1, {}),
            (0, b"h2"): (HASH, {b"b": b"2"}, -1, {}),
        }


def test_keyspace_notes_field_times_of_entries_put_whole() -> None:
    keyspace = Keyspace()
    keyspace.put(1, b"h", Entry(HASH, {b"a": b"1", b"b": b"2"}, None, {b"a": 9, b"b": 12}))
    assert list(keyspace.fields_due(8)) == []
    ((key, entry),) = keyspace.fields_due(10)
    assert key == (1, b"h") and entry.field_expire_at_ms == {b"a": 9, b"b": 12}


def test_hash_field_time_is_checked_per_command_time() -> None:
    """``hfieldIsExpired``: a field at exactly the command's time is still there."""
    from moonish.state.fieldttl import due_fields, is_expired

    entry = Entry(HASH, {b"a": b"1"}, None, {b"a": 100})
    assert not is_expired(entry, b"a", 100) and is_expired(entry, b"a", 101)
    assert due_fields(entry, 99) == [] and due_fields(entry, 100) == [b"a"]
    assert time.time() * 1000 < int(FAR)
