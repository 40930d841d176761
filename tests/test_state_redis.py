"""moonish's keyspace against a real Redis: the same commands, the same state after each.

Every command goes to a redis-server on 127.0.0.1 and to a ShardWriter; afterwards each key
the command names must hold the same type, value and expiry in both, Redis must refuse exactly
the commands moonish refuses, and the c/u/d moonish logged must match the key's existence
before and after in Redis.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moonish
from moonish.errors import CommandError
from moonish.log.records import KvChange
from moonish.redis.aof.files import AofCommands, read_manifest
from moonish.redis.aof.importer import import_aof
from moonish.state.commands.execute import keys_of
from moonish.state.shard import ShardWriter
from moonish.values.model import _element_bytes as element_bytes
from tests.redis_server import (
    comparable,
    redis_entries,
    redis_entry,
    redis_server,
    redis_shapes,
    shape,
    shard_writer,
)

FIXTURES = Path(__file__).parent.parent / "fixtures" / "redis-aof"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis")) as client:
        yield client


def check_command(
    server: redis.Redis, writer: ShardWriter, db: int, argv: list[bytes], read_back: bool = True,
    deep: bool = True,
) -> None:  # fmt: skip
    """Run ``argv`` on both and compare (see the module docstring). ``read_back``: take the
    ops from the envelopes read back from the log (else from the records the writer made).
    Without ``deep``, keys of more than 256 elements are compared by type, length and expiry
    only (whole values of that size after every command would make the test quadratic)."""
    keys = keys_of(argv) if argv[0].upper() not in (b"FLUSHDB", b"FLUSHALL") else []
    both = server.pipeline(transaction=False)  # one round trip: EXISTS of each key, the command
    for key in keys:
        both.exists(key)
    both.execute_command(*argv)
    *exists, reply = both.execute(raise_on_error=False)
    existed = dict(zip(keys, map(bool, exists), strict=True))
    redis_error = str(reply) if isinstance(reply, redis.ResponseError) else None
    try:
        if read_back:
            result = writer.execute(db, argv)
            changes = []
            if result.lsns:
                events = moonish.read(writer.shard_dir, result.lsns[0], 10_000).events
                changes = [event.record for event in events]
        else:
            prepared = writer.prepare(db, argv, time.time_ns() // 1000)
            changes = [*prepared.expired, *prepared.records]
            if isinstance(prepared.reply, CommandError):
                raise prepared.reply
    except CommandError as exc:
        assert redis_error is not None, f"moonish refused {argv!r}: {exc}"
        assert exc.message.removeprefix("ERR ") == redis_error, (argv, exc.message, redis_error)
        return
    assert redis_error is None, f"Redis refused {argv!r} ({redis_error}), moonish did not"
    ops = {
        c.key: c.op for c in changes if isinstance(c, KvChange) and not c.expired and c.db == db
    }  # MOVE and SWAPDB also change keys of another db
    ours_all = [writer.keyspace.get(db, key) for key in keys]
    big = [
        key for key, ours in zip(keys, ours_all, strict=True) if (shape(ours) or (0, 0))[1] > 256
    ]
    if big and not deep:
        for key, theirs in zip(big, redis_shapes(server, big), strict=True):
            assert shape(writer.keyspace.get(db, key)) == theirs, (argv, key)
    small = keys if deep else [key for key in keys if key not in big]
    for key, theirs in zip(small, redis_entries(server, small), strict=True):
        ours = writer.keyspace.get(db, key)
        assert comparable(ours) == comparable(theirs), (argv, key)
    for key, ours in zip(keys, ours_all, strict=True):
        if ours is not None and ours.nbytes is not None:  # the handlers keep it: exact
            assert ours.nbytes == element_bytes(ours.type, ours.value), argv
        exists = ours is not None
        if existed[key] != exists:
            assert ops.get(key) == ("c" if exists else "d"), (argv, key, ops)
        elif key in ops:
            assert ops[key] == "u" and exists, (argv, key, ops)


# -- random command sequences ---------------------------------------------------------------

KEYS = [b"k0", b"k1", b"{t}k2", b"\xffk3"]
FIELDS = [b"f0", b"f1", b"f2"]
VALUES = [b"v0", b"1", b"-7", b"2.5", b"", b"\xc3\xa9"]
FAR = b"4102444800000"  # 2100-01-01 in ms: never expires during a test

key = st.sampled_from(KEYS)
FAR_ARG = st.just(FAR)
field = st.sampled_from(FIELDS)
value = st.sampled_from(VALUES)
number = st.sampled_from([b"0", b"1", b"3", b"-2", b"x"])
score = st.sampled_from([b"1", b"2.5", b"-1", b"inf", b"nan"])
stream_id = st.sampled_from([b"1-1", b"2-0", b"2-*", b"0-0", b"5-3", b"3"])
bit = st.sampled_from([b"0", b"1", b"2"])
bitop = st.sampled_from([b"AND", b"OR", b"XOR", b"NOT", b"nand"])
overflow = st.sampled_from([b"WRAP", b"SAT", b"FAIL"])
bitfield_type = st.sampled_from([b"u1", b"i3", b"u8", b"i8", b"i64", b"u63", b"u64"])
bit_offset = st.sampled_from([b"0", b"5", b"#1", b"-1"])
score_bound = st.sampled_from([b"1", b"(1", b"2.5", b"-inf", b"+inf", b"(-1", b"x"])
lex_bound = st.sampled_from([b"-", b"+", b"[v0", b"(v0", b"[1", b"(", b"x"])
store = st.sampled_from([b"STORE", b"store"])
weight = st.sampled_from([b"1", b"-1", b"0.5", b"inf", b"0", b"x"])

COMMAND = st.one_of(
    st.tuples(st.just(b"SET"), key, value),
    st.tuples(st.just(b"SET"), key, value, st.sampled_from([b"NX", b"XX", b"GET", b"KEEPTTL"])),
    st.tuples(st.just(b"SET"), key, value, st.just(b"PXAT"), st.just(FAR)),
    st.tuples(st.sampled_from([b"SETNX", b"GETSET", b"APPEND"]), key, value),
    st.tuples(st.sampled_from([b"GETDEL", b"INCR", b"DECR", b"PERSIST"]), key),
    st.tuples(st.sampled_from([b"INCRBY", b"DECRBY"]), key, number),
    st.tuples(st.just(b"INCRBYFLOAT"), key, st.sampled_from([b"1.5", b"0.1", b"-3", b"x"])),
    st.tuples(st.sampled_from([b"MSET", b"MSETNX"]), key, value, key, value),
    st.tuples(st.sampled_from([b"HSET", b"HSETNX", b"HMSET"]), key, field, value),
    st.tuples(st.just(b"HSET"), key, field, value, field, value),
    st.tuples(st.just(b"HDEL"), key, field, field),
    st.tuples(st.just(b"HINCRBY"), key, field, number),
    st.tuples(st.just(b"HINCRBYFLOAT"), key, field, st.sampled_from([b"0.5", b"2", b"z"])),
    st.tuples(st.sampled_from([b"LPUSH", b"RPUSH", b"LPUSHX", b"RPUSHX"]), key, value, value),
    st.tuples(st.sampled_from([b"LPOP", b"RPOP"]), key),
    st.tuples(st.sampled_from([b"LPOP", b"RPOP"]), key, st.sampled_from([b"0", b"1", b"2"])),
    st.tuples(st.just(b"LSET"), key, st.sampled_from([b"0", b"-1", b"5"]), value),
    st.tuples(st.just(b"LREM"), key, st.sampled_from([b"0", b"1", b"-1"]), value),
    st.tuples(
        st.just(b"LTRIM"),
        key,
        st.sampled_from([b"0", b"1", b"-2"]),
        st.sampled_from([b"0", b"-1", b"1"]),
    ),
    st.tuples(st.sampled_from([b"SADD", b"SREM"]), key, value, value),
    st.tuples(st.just(b"SMOVE"), key, key, value),
    st.tuples(st.just(b"ZADD"), key, score, value),
    st.tuples(
        st.just(b"ZADD"),
        key,
        st.sampled_from([b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"]),
        score,
        value,
    ),
    st.tuples(st.just(b"ZINCRBY"), key, score, value),
    st.tuples(st.just(b"ZREM"), key, value),
    st.tuples(st.sampled_from([b"ZPOPMIN", b"ZPOPMAX"]), key),
    st.tuples(st.sampled_from([b"ZPOPMIN", b"ZPOPMAX"]), key, st.sampled_from([b"2", b"0"])),
    st.tuples(st.just(b"XADD"), key, stream_id, field, value),
    st.tuples(
        st.just(b"XADD"),
        key,
        st.just(b"MAXLEN"),
        st.sampled_from([b"1", b"2"]),
        stream_id,
        field,
        value,
    ),
    st.tuples(st.just(b"XDEL"), key, stream_id),
    st.tuples(st.just(b"XTRIM"), key, st.just(b"MAXLEN"), st.sampled_from([b"0", b"1"])),
    st.tuples(st.sampled_from([b"DEL", b"UNLINK"]), key, key),
    st.tuples(st.sampled_from([b"RENAME", b"RENAMENX", b"COPY", b"LMOVE"]), key, key),
    st.tuples(st.just(b"COPY"), key, key, st.just(b"REPLACE")),
    st.tuples(
        st.just(b"LMOVE"),
        key,
        key,
        st.sampled_from([b"LEFT", b"RIGHT"]),
        st.sampled_from([b"LEFT", b"RIGHT"]),
    ),
    st.tuples(st.sampled_from([b"PEXPIREAT", b"EXPIREAT"]), key, st.just(FAR)),
    st.tuples(
        st.just(b"PEXPIREAT"), key, st.just(FAR), st.sampled_from([b"NX", b"XX", b"GT", b"LT"])
    ),
    st.tuples(st.just(b"PEXPIREAT"), key, st.just(b"1000")),  # in the past: removes the key
    st.tuples(st.just(b"FLUSHDB")),
    # refusals: Redis's checks, in Redis's order
    st.tuples(st.just(b"SET"), key, value, st.just(b"NX"), st.just(b"XX")),
    st.tuples(st.just(b"SET"), key, value, st.just(b"EX"), st.sampled_from([b"0", b"x", b"-5"])),
    st.tuples(st.sampled_from([b"HSET", b"LPUSH", b"SADD", b"ZADD", b"GETDEL", b"XADD"]), key),
    st.tuples(
        st.just(b"ZADD"),
        key,
        st.sampled_from([b"NX", b"GT"]),
        st.sampled_from([b"XX", b"LT", b"INCR"]),
        score,
        value,
    ),
    st.tuples(st.just(b"ZADD"), key, st.just(b"INCR"), score, value, score, value),
    st.tuples(st.just(b"ZADD"), key, score),
    st.tuples(st.just(b"INCRBY"), key, st.just(b"9223372036854775807")),
    st.tuples(st.sampled_from([b"LPOP", b"ZPOPMIN"]), key, st.just(b"-1")),
    st.tuples(st.just(b"EXPIRE"), key, st.just(b"-1")),  # in the past: removes the key
    st.tuples(st.just(b"PEXPIREAT"), key, FAR_ARG, st.just(b"NX"), st.just(b"XX")),
    # more of the command set
    st.tuples(st.just(b"XADD"), key, st.just(b"NOMKSTREAM"), stream_id, field, value),
    st.tuples(st.just(b"XTRIM"), key, st.just(b"MINID"), st.sampled_from([b"2-0", b"0"])),
    st.tuples(st.just(b"LINSERT"), key, st.sampled_from([b"BEFORE", b"AFTER", b"X"]), value, value),
    st.tuples(st.just(b"RPOPLPUSH"), key, key),
    st.tuples(st.sampled_from([b"SETEX", b"PSETEX"]), key, st.just(b"0"), value),
    # bitmaps and string ranges
    st.tuples(st.just(b"SETRANGE"), key, st.sampled_from([b"0", b"1", b"3", b"-1", b"x"]), value),
    st.tuples(st.just(b"SETBIT"), key, st.sampled_from([b"0", b"7", b"9", b"x"]), bit),
    st.tuples(st.just(b"BITOP"), bitop, key, key, key),
    st.tuples(st.just(b"BITOP"), st.just(b"NOT"), key, key),
    st.tuples(
        st.just(b"BITFIELD"),
        key,
        st.just(b"OVERFLOW"),
        overflow,
        st.sampled_from([b"INCRBY", b"SET", b"GET"]),
        bitfield_type,
        bit_offset,
        number,
    ),
    st.tuples(
        st.just(b"BITFIELD"),
        key,
        st.sampled_from([b"SET", b"INCRBY"]),
        bitfield_type,
        bit_offset,
        number,
        st.just(b"GET"),
        bitfield_type,
        bit_offset,
    ),
    # set and sorted set stores, ranges
    st.tuples(st.sampled_from([b"SINTERSTORE", b"SUNIONSTORE", b"SDIFFSTORE"]), key, key, key),
    st.tuples(st.just(b"ZREMRANGEBYSCORE"), key, score_bound, score_bound),
    st.tuples(st.just(b"ZREMRANGEBYRANK"), key, number, number),
    st.tuples(st.just(b"ZREMRANGEBYLEX"), key, lex_bound, lex_bound),
    st.tuples(
        st.sampled_from([b"ZUNIONSTORE", b"ZINTERSTORE", b"ZDIFFSTORE"]),
        key,
        st.sampled_from([b"1", b"2"]),
        key,
        key,
    ),
    st.tuples(
        st.sampled_from([b"ZUNIONSTORE", b"ZINTERSTORE"]),
        key,
        st.just(b"2"),
        key,
        key,
        st.just(b"WEIGHTS"),
        weight,
        weight,
        st.just(b"AGGREGATE"),
        st.sampled_from([b"SUM", b"MIN", b"MAX"]),
    ),
    st.tuples(st.just(b"ZRANGESTORE"), key, key, number, number),
    st.tuples(st.just(b"ZRANGESTORE"), key, key, score_bound, score_bound, st.just(b"BYSCORE")),
    st.tuples(
        st.just(b"ZRANGESTORE"),
        key,
        key,
        lex_bound,
        lex_bound,
        st.just(b"BYLEX"),
        st.just(b"REV"),
        st.just(b"LIMIT"),
        number,
        number,
    ),
    st.tuples(st.just(b"SORT"), key, st.sampled_from([b"ALPHA", b"DESC", b"ASC"]), store, key),
    st.tuples(
        st.just(b"SORT"),
        key,
        st.just(b"BY"),
        st.sampled_from([b"k*", b"nosort", b"k*->f0"]),
        st.just(b"GET"),
        st.sampled_from([b"#", b"k*", b"{t}k*->f1"]),
        st.just(b"LIMIT"),
        number,
        number,
        store,
        key,
    ),
    st.tuples(st.just(b"XSETID"), key, stream_id),
    # stream consumer groups (every value and time: tests/test_streams.py)
    st.tuples(
        st.just(b"XGROUP"),
        st.sampled_from([b"CREATE", b"SETID"]),
        key,
        field,
        st.sampled_from([b"$", b"0", b"2-0", b"x"]),
        st.sampled_from([b"MKSTREAM", b"ENTRIESREAD"]),
        st.sampled_from([b"1", b"-1", b"MKSTREAM"]),
    ),
    st.tuples(
        st.just(b"XGROUP"),
        st.sampled_from([b"DESTROY", b"CREATECONSUMER", b"DELCONSUMER", b"FOO"]),
        key,
        field,
        value,
    ),
    st.tuples(
        st.just(b"XCLAIM"),
        key,
        field,
        value,
        st.sampled_from([b"0", b"x"]),
        stream_id,
        st.sampled_from([b"FORCE", b"JUSTID", b"LASTID", b"TIME"]),
        st.sampled_from([b"FORCE", b"5-0", b"4102444800000"]),
    ),
    st.tuples(st.just(b"XGROUP"), st.just(b"DESTROY"), key, field),
    st.tuples(st.just(b"XACK"), key, field, stream_id, stream_id),
    st.tuples(st.just(b"PFADD"), key, value, value),
    st.tuples(st.just(b"PFCOUNT"), key),
    st.tuples(st.sampled_from([b"PFMERGE", b"PFCOUNT"]), key, key, key),
    st.tuples(st.just(b"MOVE"), key, st.sampled_from([b"0", b"1"])),
    st.tuples(st.just(b"SWAPDB"), st.just(b"0"), st.sampled_from([b"1", b"0"])),
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commands=st.lists(COMMAND, min_size=1, max_size=25))
def test_random_commands_match_redis(
    server: redis.Redis, tmp_path_factory: pytest.TempPathFactory,
    commands: list[tuple[bytes, ...]],
) -> None:  # fmt: skip
    server.flushall()
    shard_dir = tmp_path_factory.mktemp("shard")
    with shard_writer(shard_dir) as writer:
        for command in commands:
            check_command(server, writer, 0, list(command))
        state = {(db, key): comparable(entry) for db, key, entry in writer.keyspace.items()}
    with shard_writer(shard_dir) as reopened:  # the log replays to the same keyspace
        replayed = {(db, k): comparable(entry) for db, k, entry in reopened.keyspace.items()}
    assert replayed == state


@pytest.mark.parametrize("fixture", ["slice", "mixed"])
def test_real_aof_command_by_command(server: redis.Redis, tmp_path: Path, fixture: str) -> None:
    """The real AOF, one command at a time, live (a past PEXPIREAT removes the key)."""
    server.flushall()
    appendonlydir = FIXTURES / fixture / "appendonlydir"
    checked = 0
    with shard_writer(tmp_path / "shard-0") as writer:
        db = 0
        for aof_file in read_manifest(str(appendonlydir)):
            for _, argv in AofCommands(str(appendonlydir / aof_file.name)):
                name = argv[0].upper()
                if name == b"SELECT":
                    db = int(argv[1])
                    server.execute_command(*argv)
                elif name not in (b"MULTI", b"EXEC"):
                    deep = fixture == "slice" or checked % 64 == 0
                    check_command(server, writer, db, argv, fixture == "slice", deep)
                    checked += 1
        assert checked > 2000
        for number in (0, 2):
            server.execute_command("SELECT", number)
            assert server.dbsize() == sum(1 for d, _, _ in writer.keyspace.items() if d == number)


def test_imported_aof_equals_redis_loading_it(tmp_path: Path) -> None:
    """The whole real AOF: moonish's import (4 shards) holds the keyspace redis-server has
    after loading the same files, in every db, values and expiry times."""
    copy = tmp_path / "redis"
    shutil.copytree(FIXTURES / "mixed", copy)
    report = import_aof(FIXTURES / "mixed" / "appendonlydir", tmp_path / "data", 4)
    assert report.records > report.commands
    ours = {}
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        with shard_writer(Path(shard_dir)) as writer:
            ours.update({(db, k): comparable(e) for db, k, e in writer.keyspace.items()})
    with redis_server(copy, "--appendonly", "yes", "--appenddirname", "appendonlydir") as client:
        theirs = {}
        for db in (0, 1, 2, 3):
            client.execute_command("SELECT", db)
            for key in client.scan_iter(count=1000):
                entry = redis_entry(client, key)
                if entry is not None:
                    theirs[(db, key)] = comparable(entry)
    assert len(theirs) > 5000
    assert ours == theirs
