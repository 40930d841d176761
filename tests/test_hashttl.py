"""Redis 7.4 hash-field expiry: the commands against a real Redis 7.4 (replies, errors, values,
field times, c/u/d), lazy and active field expiry and their records, images, snapshots and
recovery."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moonish.clock import FixedClock
from moonish.errors import CommandError
from moonish.log.records import KvChange, ViewType
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.config import StreamConfig
from moonish.state.keyspace import Keyspace
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import HASH, Entry, entry_from_image, full_image, state_image
from tests.redis_server import redis74_binary, redis_server, shard_writer

PAST = "1000000000000"  # 2001: long gone
FAR = "4102444800000"  # 2100-01-01 in ms
LATER = "4102444900000"
SOONER = "4102444700000"
FAR_S = "4102444800"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis74"), binary=redis74_binary()) as client:
        assert client.info("server")["redis_version"].startswith("7.4.")
        yield client


def redis_hash(client: redis.Redis, key: bytes) -> Any:
    """(type, value, expire_at_ms, field times) of a key as Redis 7.4 holds it."""
    kind = client.type(key).decode()
    if kind == "none":
        return None
    expire = client.pexpiretime(key)
    if kind != HASH:
        return (kind, None, expire, {})
    fields = client.hgetall(key)
    times = client.execute_command("HPEXPIRETIME", key, "FIELDS", len(fields), *fields)
    ttls = {f: t for f, t in zip(fields, times, strict=True) if t >= 0}
    return (kind, fields, expire, ttls)


def our_hash(entry: Entry | None) -> Any:
    if entry is None:
        return None
    expire = -1 if entry.expire_at_ms is None else entry.expire_at_ms
    if entry.type != HASH:
        return (entry.type, None, expire, {})
    return (HASH, dict(entry.value), expire, entry.field_expire_at_ms or {})


def run(server: redis.Redis, tmp_path: Path, commands: list[list[str]]) -> list[Any]:
    """Each command on Redis 7.4 and on a ShardWriter: the same reply (or error text), the
    same state of its key afterwards, and ``c``/``u``/``d`` matching the key's existence."""
    server.flushall()
    replies = []
    with shard_writer(tmp_path / "shard") as writer:
        for argv in commands:
            key = argv[1].encode() if len(argv) > 1 else b""
            existed = bool(server.exists(key)) if key else False
            try:
                theirs = server.execute_command(*argv)
            except redis.ResponseError as exc:
                theirs = exc
            try:
                result = writer.execute(0, argv)
            except CommandError as exc:
                assert isinstance(theirs, redis.ResponseError), (argv, exc.message, theirs)
                assert exc.message.removeprefix("ERR ") == str(theirs), (argv, exc.message)
                replies.append(exc.message)
                continue
            assert not isinstance(theirs, redis.ResponseError), (argv, theirs)
            ours = result.reply
            if isinstance(ours, list):
                assert ours == theirs, (argv, ours, theirs)
            elif isinstance(ours, int) and isinstance(theirs, bool):
                assert ours == int(theirs), argv
            elif isinstance(ours, bytes) and isinstance(theirs, bool):
                assert ours == b"OK" and theirs, argv
            elif isinstance(theirs, float):  # redis-py parses HINCRBYFLOAT's reply
                assert float(ours) == theirs, (argv, ours, theirs)
            else:
                assert str(ours).encode() == theirs or ours == theirs, (argv, ours, theirs)
            replies.append(ours)
            for name in {key, *(a.encode() for a in argv[2:3] if argv[0] in ("COPY", "RENAME"))}:
                assert our_hash(writer.keyspace.get(0, name)) == redis_hash(server, name), argv
            exists = writer.keyspace.get(0, key) is not None
            ops = [c.op for c in _records(writer, result.lsns) if c.key == key and not c.expired]
            if existed != exists:
                assert ops == ["c" if exists else "d"], (argv, ops)
            elif ops:
                assert ops == ["u"] and exists, (argv, ops)
    return replies


def _records(writer: ShardWriter, lsns: list[int]) -> list[KvChange]:
    from moonish.log.payloads import decode_payload
    from moonish.log.reader import ShardReader

    if not lsns:
        return []
    writer.sync()
    reader = ShardReader(writer.shard_dir)
    try:
        reader.seek(lsns[0])
        frames = reader.poll(len(lsns))
    finally:
        reader.close()
    out = [decode_payload(frame.record_type, frame.payload) for frame in frames]
    return [record for record in out if isinstance(record, KvChange)]


HSET3 = ["HSET", "h", "a", "1", "b", "2", "c", "3"]
CASES: dict[str, list[list[str]]] = {
    "set, conditions on fields without and with a time": [
        HSET3,
        ["HPEXPIREAT", "h", FAR, "XX", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", FAR, "GT", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", FAR, "LT", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", LATER, "NX", "FIELDS", "2", "a", "b"],
        ["HPEXPIREAT", "h", LATER, "gt", "FIELDS", "3", "a", "b", "c"],
        ["HPEXPIREAT", "h", FAR, "GT", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", SOONER, "LT", "FIELDS", "2", "a", "b"],
        ["HPEXPIREAT", "h", LATER, "LT", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", FAR, "xx", "FIELDS", "3", "a", "c", "zz"],
        ["HEXPIREAT", "h", FAR_S, "FIELDS", "1", "c"],
        ["hpexpireat", "h", FAR, "fields", "1", "a"],
    ],
    "past times delete fields, the last one the key": [
        HSET3,
        ["HPEXPIREAT", "h", FAR, "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", PAST, "NX", "FIELDS", "2", "a", "b"],
        ["HPEXPIREAT", "h", "0", "FIELDS", "2", "b", "zz"],
        ["HEXPIREAT", "h", "1", "XX", "FIELDS", "1", "a"],
        ["HPEXPIRE", "h", "0", "FIELDS", "1", "c"],
        ["HSET", "g", "a", "1"],
        ["HEXPIRE", "g", "0", "GT", "FIELDS", "1", "a"],
        ["HEXPIRE", "g", "0", "LT", "FIELDS", "1", "a"],
    ],
    "missing keys and fields": [
        ["HPEXPIREAT", "nokey", FAR, "FIELDS", "2", "a", "b"],
        ["HPERSIST", "nokey", "FIELDS", "1", "a"],
        HSET3,
        ["HPEXPIREAT", "h", FAR, "FIELDS", "2", "x", "y"],
        ["HPEXPIREAT", "h", FAR, "FIELDS", "2", "a", "a"],
    ],
    "persist": [
        HSET3,
        ["HPERSIST", "h", "FIELDS", "2", "a", "zz"],
        ["HPEXPIREAT", "h", FAR, "FIELDS", "2", "a", "b"],
        ["HPERSIST", "h", "FIELDS", "4", "a", "c", "zz", "a"],
        ["hpersist", "h", "fields", "1", "b"],
    ],
    "writes of fields with times": [
        HSET3,
        ["HPEXPIREAT", "h", FAR, "FIELDS", "3", "a", "b", "c"],
        ["HINCRBY", "h", "a", "5"],
        ["HINCRBYFLOAT", "h", "b", "0.5"],
        ["HSET", "h", "c", "9", "d", "4"],
        ["HSETNX", "h", "a", "7"],
        ["HMSET", "h", "b", "1"],
        ["HPEXPIREAT", "h", FAR, "FIELDS", "2", "c", "d"],
        ["HDEL", "h", "c", "zz"],
        ["COPY", "h", "h2"],
        ["RENAME", "h2", "h3"],
        ["HDEL", "h", "a", "d"],
    ],
    "errors in Redis's order": [
        ["SET", "s", "x"],
        ["HPEXPIREAT", "s", "x", "FIELDS", "1", "a"],
        ["HPERSIST", "s", "FIELDS", "0", "a"],
        HSET3,
        ["HEXPIRE", "h", "1", "FIELDS"],
        ["HEXPIRE", "h", "1", "FIELDS", "0"],
        ["HPERSIST", "h", "FIELDS", "1"],
        ["HEXPIRE", "h", "x", "FIELDS", "1", "a"],
        ["HEXPIRE", "h", "-1", "FIELDS", "1", "a"],
        ["HEXPIRE", "h", "70368744178", "FIELDS", "1", "a"],
        ["HEXPIREAT", "h", "70368744177", "FIELDS", "1", "a"],
        ["HPEXPIREAT", "h", "70368744177664", "FIELDS", "1", "a"],
        ["HPEXPIRE", "h", "70368744177663", "FIELDS", "1", "a"],
        ["HPEXPIRE", "h", "99999999999999999999", "FIELDS", "1", "a"],
        ["HEXPIRE", "h", "1", "FOO", "1", "a"],
        ["HEXPIRE", "h", "1", "NX", "1", "a", "b"],
        ["HEXPIRE", "h", "1", "NX", "XX", "FIELDS", "1", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "0", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "-1", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "x", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "2", "a"],
        ["HEXPIRE", "h", "1", "FIELDS", "1", "a", "b"],
        ["HPERSIST", "h", "FIELD", "1", "a"],
        ["HPERSIST", "h", "FIELDS", "0", "a"],
        ["HPERSIST", "h", "FIELDS", "x", "a"],
        ["HPERSIST", "h", "FIELDS", "2", "a"],
        ["HEXPIRE", "nokey", "x", "FIELDS", "1", "a"],
        ["HEXPIRE", "nokey", "1", "FIELDS", "2", "a"],
    ],
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_commands_match_redis_74(server: redis.Redis, tmp_path: Path, name: str) -> None:
    run(server, tmp_path, CASES[name])


_FIELD = st.sampled_from(["a", "b", "c"])
_TIME = st.sampled_from([PAST, SOONER, FAR, LATER])
_RANDOM = st.lists(st.one_of(
    st.tuples(st.just("HSET"), _FIELD, st.sampled_from(["1", "x"])),
    st.tuples(st.just("HDEL"), _FIELD),
    st.tuples(st.just("HINCRBY"), _FIELD, st.just("2")),
    st.tuples(st.just("HSETNX"), _FIELD, st.just("n")),
    st.tuples(st.just("HPEXPIREAT"), _TIME, st.sampled_from(["", "NX", "XX", "GT", "LT"]),
              st.lists(_FIELD, min_size=1, max_size=3)),
    st.tuples(st.just("HPERSIST"), st.lists(_FIELD, min_size=1, max_size=3)),
), min_size=1, max_size=25)  # fmt: skip


def _argv(step: tuple[Any, ...]) -> list[str]:
    name, *rest = step
    if name == "HPEXPIREAT":
        at, condition, fields = rest
        return [name, "h", at, *([condition] if condition else []), "FIELDS", str(len(fields)),
                *fields]  # fmt: skip
    if name == "HPERSIST":
        return [name, "h", "FIELDS", str(len(rest[0])), *rest[0]]
    return [name, "h", *rest]


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(steps=_RANDOM)
def test_random_sequences_match_redis_74(
    server: redis.Redis, tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[Any, ...]]
) -> None:
    run(server, tmp_path_factory.mktemp("random"), [_argv(step) for step in steps])


def test_relative_times_match_redis_74(server: redis.Redis, tmp_path: Path) -> None:
    """HEXPIRE/HPEXPIRE add the command's time: both sides agree to within the time between
    the two calls."""
    server.flushall()
    with shard_writer(tmp_path / "shard") as writer:
        for argv in (HSET3, ["HEXPIRE", "h", "1000", "FIELDS", "1", "a"],
                     ["HPEXPIRE", "h", "5000000", "FIELDS", "1", "b"]):  # fmt: skip
            assert writer.execute(0, argv).reply == server.execute_command(*argv)
        ours = writer.keyspace.get(0, b"h")
        assert ours is not None and ours.field_expire_at_ms is not None
        theirs = redis_hash(server, b"h")[3]
        assert ours.field_expire_at_ms.keys() == theirs.keys() == {b"a", b"b"}
        for field, at in theirs.items():
            assert abs(ours.field_expire_at_ms[field] - at) < 2000


# -- lazy and active expiry, with a fixed clock ---------------------------------------------

T0 = 1_800_000_000_000


def fixed_writer(path: Path, view: ViewType = ViewType.NEW_AND_OLD_IMAGES) -> ShardWriter:
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), StreamConfig(view=view),
                           expiry_sweep_ms=0)  # fmt: skip
    return ShardWriter(path, options, FixedClock(T0 * 1000))


def _advance(writer: ShardWriter, ms: int) -> None:
    clock = writer._clock
    assert isinstance(clock, FixedClock)
    clock.advance(ms * 1000)


def _image(record: KvChange, side: str) -> Any:
    raw = getattr(record, side)
    return orjson.loads(raw) if raw else None


@pytest.mark.parametrize("command", [["HINCRBY", "h", "a", "2"],
                                     ["HINCRBYFLOAT", "h", "a", "2"],
                                     ["HSETNX", "h", "a", "2"]])  # fmt: skip
def test_lazy_expiry_on_lookup_is_its_own_record(tmp_path: Path, command: list[str]) -> None:
    with fixed_writer(tmp_path / "s") as writer:
        writer.execute(0, ["HSET", "h", "a", "1", "b", "x"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 10), "FIELDS", "2", "a", "b"])
        _advance(writer, 10)  # at its time: still there (expired is strictly before now)
        assert writer.execute(0, ["HSETNX", "h", "a", "9"]).reply == 0
        _advance(writer, 1)
        result = writer.execute(0, command)
        assert result.reply in (2, b"2", 1)
        expiry, change = _records(writer, result.lsns)
        assert (expiry.op, expiry.command, expiry.expired, expiry.argv) == (
            "u", b"HDEL", True, (b"HDEL", b"h", b"a"))  # fmt: skip
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
        expiry, change = _records(writer, result.lsns)
        assert (expiry.op, expiry.after, expiry.expired) == ("d", b"", True)
        assert (change.op, change.before, change.expired) == ("c", b"", False)
        assert _image(change, "after")["value"] == [["a", "3"]]


def test_loading_reads_an_expired_field_as_missing_and_keeps_it(tmp_path: Path) -> None:
    """As Redis loading an AOF (``hashTypeGetValue`` while ``server.loading``): no HDEL,
    HINCRBY counts from 0 and keeps the field's time (``HASH_SET_KEEP_TTL``)."""
    with fixed_writer(tmp_path / "s") as writer:
        for argv in (["HSET", "h", "a", "5"], ["HPEXPIREAT", "h", PAST, "FIELDS", "1", "a"],
                     ["HINCRBY", "h", "a", "3"]):  # fmt: skip
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
        records = _records(writer, result.lsns)
        assert [(r.key, r.op, r.expired) for r in records] == [
            (b"w_1", "u", True), (b"d", "c", False)]  # fmt: skip


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
        g, h = _records(writer, [lsn, lsn + 1])  # equal times: by db, then key
        assert (h.key, h.op, h.argv, h.expired) == (b"h", "u", (b"HDEL", b"h", b"c"), True)
        assert _image(h, "after")["field_expire_at_ms"] == [["a", T0 + 40], ["b", T0 + 30]]
        assert (g.key, g.op, g.after, g.argv) == (b"g", "d", b"", (b"HDEL", b"g", b"a"))
        _advance(writer, 100)
        lsn = writer.next_lsn
        assert writer.sweep_expired() == 1
        (last,) = _records(writer, [lsn])
        assert (last.op, last.argv) == ("d", (b"HDEL", b"h", b"b", b"a"))  # soonest first
        assert len(writer.keyspace) == 0


@pytest.mark.parametrize("view", [ViewType.KEYS_ONLY, ViewType.OLD_IMAGE, ViewType.NEW_IMAGE,
                                  ViewType.OFF])  # fmt: skip
def test_field_expiry_records_follow_the_view(tmp_path: Path, view: ViewType) -> None:
    with fixed_writer(tmp_path / "s", view) as writer:
        writer.execute(0, ["HSET", "h", "a", "1", "b", "2"])
        writer.execute(0, ["HPEXPIREAT", "h", str(T0 + 1), "FIELDS", "1", "a"])
        _advance(writer, 1)
        lsn = writer.next_lsn
        writer.sweep_expired()
        (record,) = _records(writer, [lsn])
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


@pytest.mark.parametrize("image", [
    {"db": 0, "key": "h", "type": "hash", "value": [["a", "1"]], "expire_at_ms": None,
     "field_expire_at_ms": [["b", 5]]},
    {"db": 0, "key": "h", "type": "hash", "value": [["a", "1"]], "expire_at_ms": None,
     "field_expire_at_ms": []},
    {"db": 0, "key": "l", "type": "list", "value": ["a"], "expire_at_ms": None,
     "field_expire_at_ms": [["a", 5]]},
])  # fmt: skip
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
