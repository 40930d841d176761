"""SETRANGE, SETBIT, BITOP, BITFIELD; SINTERSTORE, SUNIONSTORE, SDIFFSTORE; ZREMRANGEBY*,
ZRANGESTORE, ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE; SORT … STORE; PFADD, PFCOUNT, PFMERGE;
GEOADD, GEORADIUS/GEORADIUSBYMEMBER … STORE, GEOSEARCHSTORE; XSETID; MOVE, SWAPDB against a
real redis-server.

Each case runs the same commands on a redis-server started here and on a ShardWriter, and
requires the same reply (or error text) for every command, the same keyspace after every
command (type, value byte for byte, scores as doubles, expiry) in the databases used, the
``c``/``u``/``d`` of each record matching the key's existence before and after, and the same
keyspace again after the log is replayed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import moonish
from moonish.errors import CommandError
from moonish.redis.aof.importer import import_aof
from moonish.state.shard import ShardWriter
from tests.redis_server import comparable, redis_entry, redis_server, shard_writer

DBS = (0, 1)
RANDOM: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture],
}
FAR = "4102444800000"  # 2100-01-01 in ms: an absolute expiry time both sides agree on


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis")) as client:
        yield client


def _redis_state(client: redis.Redis) -> dict[tuple[int, bytes], Any]:
    state = {}
    for db in DBS:
        client.execute_command("SELECT", db)
        for key in client.scan_iter():
            state[(db, key)] = comparable(redis_entry(client, key))
    client.execute_command("SELECT", 0)
    return state


def _our_state(writer: ShardWriter) -> dict[tuple[int, bytes], Any]:
    return {(db, key): comparable(entry) for db, key, entry in writer.keyspace.items()}


def _same_reply(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, list) and isinstance(theirs, list):
        return len(ours) == len(theirs) and all(map(_same_reply, ours, theirs))
    if ours == b"OK":
        return theirs in (b"OK", True)
    if isinstance(ours, float):  # a score: Redis replies with its text
        return math.isclose(ours, float(theirs), rel_tol=0)
    return bool(ours == theirs)


State = dict[tuple[int, bytes], Any]


def _equal_states(ours: State, theirs: State, argv: list[bytes]) -> None:
    assert ours == theirs, argv


def run(
    server: redis.Redis, tmp_path: Path, commands: list[list[str | bytes]], *,
    redis_state: Callable[[redis.Redis], State] = _redis_state,
    our_state: Callable[[ShardWriter], State] = _our_state,
    same_state: Callable[[State, State, list[bytes]], None] = _equal_states,
) -> list[Any]:  # fmt: skip
    """Run ``commands`` (in db 0; ``SELECT`` is not a write) on both and compare after each;
    returns moonish's replies (a CommandError's text for a refusal). ``redis_state`` and
    ``our_state`` read each side's keyspace, ``same_state`` compares them (equality)."""
    server.flushall()
    replies = []
    with shard_writer(tmp_path / "shard") as writer:
        for command in commands:
            argv = [a.encode() if isinstance(a, str) else a for a in command]
            before = redis_state(server)
            try:
                theirs: Any = server.execute_command(*argv)
            except redis.ResponseError as exc:
                theirs = exc
            try:
                result = writer.execute(0, argv)
            except CommandError as exc:
                assert isinstance(theirs, redis.ResponseError), (argv, exc.message)
                assert exc.message.removeprefix("ERR ") == str(theirs), (argv, exc.message)
                replies.append(exc.message)
                continue
            assert not isinstance(theirs, Exception), (argv, theirs, result.reply)
            assert _same_reply(result.reply, theirs), (argv, result.reply, theirs)
            replies.append(result.reply)
            after = redis_state(server)
            same_state(our_state(writer), after, argv)
            events = []
            if result.lsns:
                events = moonish.read(writer.shard_dir, result.lsns[0], 10_000).events
            ops = {}
            for event in events:
                record = event.record
                ops[(record.db, record.key)] = record.op
            for (db, key), op in ops.items():
                existed, exists = (db, key) in before, (db, key) in after
                assert op == ("u" if existed and exists else "c" if exists else "d"), argv
            changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
            assert changed <= ops.keys(), (argv, changed, ops)
        state = our_state(writer)
    with shard_writer(tmp_path / "shard") as reopened:
        assert our_state(reopened) == state
    return replies


# -- strings and bitmaps -------------------------------------------------------------------

STRING_CASES: dict[str, list[list[str | bytes]]] = {
    "SETRANGE pads and overwrites": [
        ["SETRANGE", "s", "5", "ab"], ["SETRANGE", "s", "1", "xyzxyzxyz"],
        ["SETRANGE", "s", "0", ""],
        ["SETRANGE", "missing", "3", ""], ["SETRANGE", "s", "-1", "a"], ["SETRANGE", "s", "x", "a"],
        ["SETRANGE", "s", "536870911", "ab"], ["SET", "n", "12"], ["SETRANGE", "n", "1", "9"],
        ["SETRANGE", "s", "0", b"\xff\x00"],
    ],
    "SETRANGE wrong type": [
        ["LPUSH", "l", "a"], ["SETRANGE", "l", "0", "x"], ["SETRANGE", "l", "0", ""],
        ["SETRANGE", "l", "-1", ""],
    ],
    "SETBIT": [
        ["SETBIT", "b", "7", "1"], ["SETBIT", "b", "7", "1"], ["SETBIT", "b", "0", "1"],
        ["SETBIT", "b", "0", "0"], ["SETBIT", "b", "100", "0"], ["SETBIT", "b", "3", "2"],
        ["SETBIT", "b", "-1", "1"], ["SETBIT", "b", "4294967296", "1"], ["SETBIT", "b", "x", "1"],
        ["SETBIT", "b", "3", "-1"], ["SET", "n", "5"], ["SETBIT", "n", "6", "1"],
        ["HSET", "h", "f", "v"], ["SETBIT", "h", "0", "1"], ["SETBIT", "h", "x", "1"],
        ["SETBIT", "b", "#3", "1"],
    ],
    "BITOP": [
        ["SET", "a", b"\xf0\x0f\xaa"], ["SET", "b", b"\xff"], ["SET", "c", ""],
        ["BITOP", "AND", "d", "a", "b"], ["BITOP", "or", "d", "a", "b", "missing"],
        ["BITOP", "XOR", "d", "a", "b", "a"], ["BITOP", "NOT", "d", "a"],
        ["BITOP", "NOT", "d", "a", "b"], ["BITOP", "NAND", "d", "a"],
        ["BITOP", "AND", "d", "missing", "c"],  # empty result: d is deleted
        ["LPUSH", "l", "x"], ["BITOP", "OR", "l", "a"],  # a list destination is overwritten
        ["BITOP", "OR", "d", "a", "l"], ["BITOP", "AND", "c", "c"],
        ["SET", "e", "v", "PXAT", FAR], ["BITOP", "OR", "e", "a"],  # the TTL goes too
        ["SET", "long", "x" * 70], ["BITOP", "AND", "d", "long", "a", "b"],
        ["BITOP", "NOT", "d", "long"],
    ],
    "BITFIELD": [
        ["BITFIELD", "f", "SET", "u8", "0", "200", "GET", "u8", "0", "GET", "i8", "0"],
        ["BITFIELD", "f", "INCRBY", "u8", "0", "100"],  # wraps
        ["BITFIELD", "f", "OVERFLOW", "SAT", "INCRBY", "u8", "0", "300", "INCRBY", "i8", "0",
         "-300"],
        ["BITFIELD", "f", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "300", "INCRBY", "u4", "#3",
         "3"],
        ["BITFIELD", "f", "SET", "i64", "#1", "-9223372036854775808", "INCRBY", "i64", "#1",
         "-1"],
        ["BITFIELD", "f", "OVERFLOW", "SAT", "INCRBY", "i64", "#1", "-1", "INCRBY", "i64",
         "#1", "9223372036854775807", "INCRBY", "i64", "#1", "9223372036854775807"],
        ["BITFIELD", "f", "SET", "u63", "3", "9223372036854775807", "GET", "u63", "3"],
        ["BITFIELD", "f", "OVERFLOW", "SAT", "SET", "u8", "100", "-1", "SET", "i5", "200",
         "-100", "OVERFLOW", "WRAP", "SET", "i5", "300", "100", "SET", "u3", "7", "-1"],
        ["BITFIELD", "f", "GET", "i3", "5", "GET", "u17", "1000"],
        ["BITFIELD", "g", "OVERFLOW", "FAIL", "INCRBY", "u2", "10", "9"],  # creates "\0\0"
        ["BITFIELD", "h", "GET", "u8", "0"],  # a read: nothing is created
        ["BITFIELD", "f", "GET", "u64", "0"], ["BITFIELD", "f", "GET", "i65", "0"],
        ["BITFIELD", "f", "GET", "x8", "0"], ["BITFIELD", "f", "GET", "u0", "0"],
        ["BITFIELD", "f", "GET", "u8", "-1"], ["BITFIELD", "f", "GET", "u8", "#-1"],
        ["BITFIELD", "f", "OVERFLOW", "UP", "GET", "u8", "0"],
        ["BITFIELD", "f", "INCRBY", "u8", "0"], ["BITFIELD", "f", "FOO"],
        ["BITFIELD", "f", "SET", "u8", "0", "1.5"], ["BITFIELD", "f"],
        ["LPUSH", "l", "x"], ["BITFIELD", "l", "GET", "u8", "0"],
        ["BITFIELD", "l", "SET", "u8", "0", "1"], ["BITFIELD", "l", "SET", "u8", "x", "1"],
        ["BITFIELD", "f", "OVERFLOW", "WRAP", "INCRBY", "i8", "4", "-129", "INCRBY", "u1",
         "#0", "3", "SET", "i1", "9", "1", "GET", "i1", "9"],
        ["SET", "n", "123"], ["BITFIELD", "n", "INCRBY", "u8", "#0", "1"],
    ],
}  # fmt: skip


# -- sets ----------------------------------------------------------------------------------

SET_CASES: dict[str, list[list[str | bytes]]] = {
    "store": [
        ["SADD", "a", "1", "2", "3", "x"], ["SADD", "b", "2", "3", "4"], ["SADD", "c", "3", "y"],
        ["SINTERSTORE", "d", "a", "b"], ["SINTERSTORE", "d", "a", "b", "c"],
        ["SUNIONSTORE", "d", "a", "b", "missing"], ["SDIFFSTORE", "d", "a", "b", "c"],
        ["SDIFFSTORE", "d", "missing", "a"],  # empty: d is deleted
        ["SADD", "d", "z"], ["SINTERSTORE", "d", "a", "missing"],
        ["SINTERSTORE", "a", "a", "b"],  # a source as destination
        ["SUNIONSTORE", "a", "a"], ["SDIFFSTORE", "e", "a"], ["SDIFFSTORE", "e", "a", "a"],
    ],
    "destinations and wrong types": [
        ["SADD", "a", "1"], ["SET", "s", "v", "PXAT", FAR], ["SUNIONSTORE", "s", "a"],
        ["ZADD", "z", "1", "m"], ["SINTERSTORE", "z", "a", "z"], ["SUNIONSTORE", "z", "missing",
        "z"], ["SDIFFSTORE", "d", "missing", "z"], ["SINTERSTORE", "d", "missing", "z"],
        ["SINTERSTORE", "d"], ["RPUSH", "l", "a"], ["SDIFFSTORE", "l", "a"],
    ],
}  # fmt: skip


# -- sorted sets ---------------------------------------------------------------------------

ZSETUP: list[list[str | bytes]] = [
    ["ZADD", "z", "1", "a", "2", "b", "2", "c", "3", "d", "-inf", "m", "inf", "n"],
    ["ZADD", "lex", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e", "0", "f"],
    ["ZADD", "mixed", "1", "d", "2", "a", "3", "e", "4", "b", "5", "c"],
]
ZSET_CASES: dict[str, list[list[str | bytes]]] = {
    "ZREMRANGEBYSCORE": [
        *ZSETUP, ["ZREMRANGEBYSCORE", "z", "(1", "2"], ["ZREMRANGEBYSCORE", "z", "5", "1"],
        ["ZREMRANGEBYSCORE", "z", "x", "1"], ["ZREMRANGEBYSCORE", "z", "nan", "1"],
        ["ZREMRANGEBYSCORE", "z", " 0x0", "1e400"], ["ZREMRANGEBYSCORE", "z", "", "("],
        ["ZREMRANGEBYSCORE", "z", "-inf", "(inf"], ["ZREMRANGEBYSCORE", "z", "-inf", "+inf"],
        ["ZREMRANGEBYSCORE", "missing", "0", "1"], ["SET", "s", "v"],
        ["ZREMRANGEBYSCORE", "s", "0", "1"], ["ZREMRANGEBYSCORE", "s", "x", "1"],
    ],
    "ZREMRANGEBYRANK": [
        *ZSETUP, ["ZREMRANGEBYRANK", "z", "-2", "-1"], ["ZREMRANGEBYRANK", "z", "3", "1"],
        ["ZREMRANGEBYRANK", "z", "10", "20"], ["ZREMRANGEBYRANK", "z", "-100", "0"],
        ["ZREMRANGEBYRANK", "z", "x", "0"], ["ZREMRANGEBYRANK", "z", "0", "100"],
        ["ZREMRANGEBYRANK", "z", "0", "0"],
    ],
    "ZREMRANGEBYLEX": [
        *ZSETUP, ["ZREMRANGEBYLEX", "lex", "(a", "[c"], ["ZREMRANGEBYLEX", "lex", "[e", "+"],
        ["ZREMRANGEBYLEX", "lex", "+", "-"], ["ZREMRANGEBYLEX", "lex", "a", "[c"],
        ["ZREMRANGEBYLEX", "lex", "[a", "+x"], ["ZREMRANGEBYLEX", "lex", "(d", "(d"],
        ["ZREMRANGEBYLEX", "mixed", "[b", "[d"], ["ZREMRANGEBYLEX", "mixed", "-", "[a"],
        ["ZREMRANGEBYLEX", "lex", "-", "+"], ["ZREMRANGEBYLEX", "lex", "-", "+"],
    ],
    "ZRANGESTORE": [
        *ZSETUP, ["ZRANGESTORE", "d", "z", "1", "-2"], ["ZRANGESTORE", "d", "z", "0", "1", "REV"],
        ["ZRANGESTORE", "d", "z", "(1", "3", "BYSCORE"],
        ["ZRANGESTORE", "d", "z", "3", "(1", "BYSCORE", "REV", "LIMIT", "1", "2"],
        ["ZRANGESTORE", "d", "z", "-inf", "inf", "BYSCORE", "LIMIT", "2", "-1"],
        ["ZRANGESTORE", "d", "z", "-inf", "inf", "BYSCORE", "LIMIT", "-1", "2"],
        ["ZRANGESTORE", "d", "z", "-inf", "inf", "BYSCORE", "LIMIT", "1", "0"],
        ["ZRANGESTORE", "d", "lex", "[b", "(e", "BYLEX"],
        ["ZRANGESTORE", "d", "lex", "+", "[b", "BYLEX", "REV", "LIMIT", "1", "10"],
        ["ZRANGESTORE", "d", "mixed", "[b", "+", "BYLEX"],
        ["ZRANGESTORE", "d", "mixed", "[c", "-", "BYLEX", "REV"],
        ["ZRANGESTORE", "d", "z", "0", "-1", "LIMIT", "0", "1"],
        ["ZRANGESTORE", "d", "z", "0", "-1", "LIMIT", "0", "-1"],
        ["ZRANGESTORE", "d", "z", "0", "-1", "WITHSCORES"],
        ["ZRANGESTORE", "d", "z", "0", "-1", "REV", "REV"],
        ["ZRANGESTORE", "d", "z", "a", "b", "BYLEX", "BYSCORE"],
        ["ZRANGESTORE", "d", "z", "a", "b", "BYSCORE"], ["ZRANGESTORE", "d", "z", "a", "b"],
        ["ZRANGESTORE", "d", "lex", "a", "b", "BYLEX"],
        ["ZRANGESTORE", "d", "missing", "0", "-1"],  # empty: d is deleted
        ["SET", "s", "v"], ["ZRANGESTORE", "s", "z", "0", "0"],
        ["ZRANGESTORE", "d", "s", "0", "0"], ["ZRANGESTORE", "d", "z", "5", "1"],
        ["ZRANGESTORE", "z", "z", "1", "2"],
    ],
    "ZUNIONSTORE and ZINTERSTORE": [
        *ZSETUP, ["SADD", "set", "a", "b", "q"],
        ["ZUNIONSTORE", "d", "2", "z", "set"], ["ZINTERSTORE", "d", "2", "z", "set"],
        ["ZUNIONSTORE", "d", "3", "z", "set", "mixed", "WEIGHTS", "2", "-1", "0.5"],
        ["ZINTERSTORE", "d", "2", "z", "mixed", "WEIGHTS", "0", "1", "AGGREGATE", "MAX"],
        ["ZUNIONSTORE", "d", "2", "z", "z", "AGGREGATE", "min", "WEIGHTS", "1", "-1"],
        ["ZUNIONSTORE", "d", "2", "z", "mixed", "WEIGHTS", "inf", "-inf"],
        ["ZINTERSTORE", "d", "2", "z", "z", "WEIGHTS", "1", "-1"],  # inf + -inf: 0
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "0"],  # 0 * inf: 0
        ["ZINTERSTORE", "d", "2", "z", "missing"],  # empty: d is deleted
        ["ZUNIONSTORE", "d", "2", "missing", "missing2"],
        ["ZADD", "p", "0.1", "a", "0.2", "b"], ["ZADD", "q", "0.2", "a", "0.7", "b"],
        ["ZUNIONSTORE", "d", "3", "p", "q", "p", "WEIGHTS", "3", "0.3", "1e-5"],
        ["ZINTERSTORE", "d", "2", "p", "q", "AGGREGATE", "SUM", "WEIGHTS", "1.1", "2.2"],
        ["ZUNIONSTORE", "d", "0", "z"], ["ZUNIONSTORE", "d", "-1", "z"],
        ["ZUNIONSTORE", "d", "3", "z", "set"], ["ZUNIONSTORE", "d", "x", "z"],
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS"], ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "x"],
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "nan"],
        ["ZUNIONSTORE", "d", "1", "z", "WEIGHTS", "1e400"],
        ["ZUNIONSTORE", "d", "1", "z", "AGGREGATE", "AVG"],
        ["ZUNIONSTORE", "d", "1", "z", "WITHSCORES"],
        ["SET", "s", "v"], ["ZUNIONSTORE", "d", "2", "z", "s", "WEIGHTS", "x"],
        ["ZUNIONSTORE", "s", "1", "set"],  # a string destination is overwritten
        ["ZINTERSTORE", "set", "2", "set", "z"],
    ],
    "ZDIFFSTORE": [
        *ZSETUP, ["SADD", "set", "a", "b", "q"], ["ZDIFFSTORE", "d", "2", "z", "set"],
        ["ZDIFFSTORE", "d", "2", "set", "z"], ["ZDIFFSTORE", "d", "2", "z", "z"],
        ["ZDIFFSTORE", "d", "1", "missing"], ["ZDIFFSTORE", "d", "1", "z", "WEIGHTS", "1"],
        ["ZDIFFSTORE", "d", "1", "z", "AGGREGATE", "SUM"], ["ZDIFFSTORE", "d", "3", "z", "set",
        "missing"], ["ZDIFFSTORE", "z", "1", "mixed"],
    ],
}  # fmt: skip


def test_scores_are_doubles_summed_in_redis_order(server: redis.Redis, tmp_path: Path) -> None:
    """Sources from the smallest to the largest (ties in argument order): the sums round
    differently in another order."""
    replies = run(server, tmp_path, [
        ["ZADD", "x", "1e16", "m", "1", "o"], ["ZADD", "y", "1", "m"], ["ZADD", "w", "-1e16", "m"],
        ["ZUNIONSTORE", "d", "3", "x", "y", "w"], ["ZUNIONSTORE", "d", "3", "y", "w", "x"],
        ["ZINTERSTORE", "d", "3", "x", "w", "y"], ["ZADD", "i", "inf", "m"],
        ["ZADD", "j", "-inf", "m"], ["ZUNIONSTORE", "d", "3", "i", "j", "y"],
        ["ZUNIONSTORE", "d", "3", "y", "i", "j"],
    ])  # fmt: skip
    assert replies[3:6] == [2, 2, 1]


# -- SORT … STORE --------------------------------------------------------------------------

SORT_SETUP: list[list[str | bytes]] = [
    ["RPUSH", "l", "3", "10", "2.5", "-1", "10", "0x10", " 7"],
    ["RPUSH", "words", "b", "a", "c", "B", "", "a"],
    ["SADD", "s", "5", "3", "x", "1"],
    ["ZADD", "z", "3", "a", "1", "b", "2", "c"],
    ["SET", "w_a", "2"],
    ["SET", "w_b", "2"],
    ["SET", "w_c", "1"],
    ["SET", "w_x", "z"],
    ["HSET", "h_a", "f", "9", "g", "A"],
    ["HSET", "h_c", "f", "-9"],
    ["SET", "h_b", "nothash"],
    ["MSET", "v_a", "x", "v_b", "y", "v_c", "w"],
]
SORT_CASES: dict[str, list[list[str | bytes]]] = {
    "numbers": [
        *SORT_SETUP, ["SORT", "l", "STORE", "d"], ["SORT", "l", "DESC", "STORE", "d"],
        ["SORT", "l", "LIMIT", "1", "3", "STORE", "d"], ["SORT", "l", "LIMIT", "-5", "2", "STORE",
        "d"], ["SORT", "l", "LIMIT", "10", "2", "STORE", "d"],  # empty: d is deleted
        ["SORT", "l", "LIMIT", "2", "-7", "STORE", "d"], ["SORT", "z", "STORE", "d"],
        ["SORT", "words", "STORE", "d"],  # not numbers: nothing is stored
        ["SORT", "s", "STORE", "d"], ["SORT", "missing", "STORE", "d"],
    ],
    "alpha": [
        *SORT_SETUP, ["SORT", "words", "ALPHA", "STORE", "d"],
        ["SORT", "words", "ALPHA", "DESC", "LIMIT", "0", "3", "STORE", "d"],
        ["SORT", "s", "ALPHA", "STORE", "d"], ["SORT", "z", "ALPHA", "DESC", "STORE", "d"],
    ],
    "by and get": [
        *SORT_SETUP, ["SORT", "z", "BY", "w_*", "STORE", "d"],
        ["SORT", "z", "BY", "w_*", "DESC", "STORE", "d"],
        ["SORT", "z", "BY", "v_*", "ALPHA", "STORE", "d"],
        ["SORT", "z", "BY", "v_*", "ALPHA", "DESC", "STORE", "d"],
        ["SORT", "z", "BY", "h_*->f", "GET", "#", "GET", "h_*->g", "GET", "w_*", "STORE", "d"],
        ["SORT", "z", "BY", "h_*->f", "LIMIT", "1", "1", "STORE", "d"],
        ["SORT", "words", "BY", "w_*", "ALPHA", "STORE", "d"],
        ["SORT", "words", "BY", "w_*", "GET", "nostar", "STORE", "d"],
        ["SORT", "s", "BY", "w_*", "STORE", "d"],  # w_x is not a number
        ["SORT", "z", "BY", "h_*->", "STORE", "d"], ["SORT", "z", "BY", "*->f", "STORE", "d"],
    ],
    "no sort": [
        *SORT_SETUP, ["SORT", "l", "BY", "nosort", "STORE", "d"],
        ["SORT", "l", "BY", "nosort", "DESC", "LIMIT", "1", "2", "STORE", "d"],
        ["SORT", "z", "BY", "nosort", "DESC", "STORE", "d"],
        ["SORT", "z", "BY", "nosort", "LIMIT", "1", "5", "STORE", "d"],
        ["SORT", "s", "BY", "nosort", "STORE", "d"],  # a set is sorted ALPHA for STORE
        ["SORT", "s", "BY", "nosort", "DESC", "STORE", "d"],
    ],
    "destinations and errors": [
        *SORT_SETUP, ["SET", "d", "v", "PXAT", FAR], ["SORT", "l", "STORE", "d"],
        ["SORT", "l", "STORE", "d", "STORE", "e"], ["SORT", "w_a", "STORE", "d"],
        ["SORT", "l", "LIMIT", "1"], ["SORT", "l", "LIMIT", "x", "1", "STORE", "d"],
        ["SORT", "l", "STORE"], ["SORT", "l", "FOO", "STORE", "d"], ["SORT", "l", "BY"],
        ["SORT", "l", "STORE", "l"],
    ],
}  # fmt: skip


# -- HyperLogLog ---------------------------------------------------------------------------

CORRUPT_HLL = b"HYLL\x01" + bytes(11) + b"\x7f\xfe"  # covers 16383 registers, not 16384
HLL_CASES: dict[str, list[list[str | bytes]]] = {
    "sparse, dense, cached": [
        ["PFADD", "h", "a", "b", "c"], ["PFCOUNT", "h"], ["PFADD", "h", "a"], ["PFADD", "h"],
        ["PFADD", "new"], ["PFADD", "h", *[f"e{i}" for i in range(300)]], ["PFCOUNT", "h"],
        ["PFCOUNT", "h"], ["PFADD", "g", *[f"x{i}" for i in range(1500)]], ["PFCOUNT", "g"],
        ["PFADD", "g", *[f"y{i}" for i in range(1500)]], ["PFCOUNT", "g"],  # now dense
        ["PFMERGE", "m", "h", "new"], ["PFCOUNT", "m"], ["PFMERGE", "m2", "h", "g"],
        ["PFCOUNT", "m2"], ["PFCOUNT", "h", "g", "missing"], ["PFMERGE", "h", "m"],
        ["PFMERGE", "h", "g"], ["PFMERGE", "empty"], ["PFMERGE", "empty2", "missing"],
    ],
    "wrong types and corrupt": [
        ["SET", "s", "v"], ["PFADD", "s", "a"], ["PFCOUNT", "s"], ["PFMERGE", "s", "h"],
        ["PFADD", "h", "a"], ["PFMERGE", "h", "s"], ["PFCOUNT", "h", "s"], ["LPUSH", "l", "a"],
        ["PFADD", "l", "a"], ["PFCOUNT", "l"], ["PFMERGE", "d", "l"], ["SET", "c", CORRUPT_HLL],
        ["PFCOUNT", "c"], ["PFCOUNT", "c", "h"], ["PFMERGE", "d", "c"],
        ["SET", "c2", CORRUPT_HLL[:15] + b"\x80" + CORRUPT_HLL[16:]], ["PFCOUNT", "c2"],
        ["SET", "t", b"HYLL\x00" + bytes(20)], ["PFCOUNT", "t"],  # dense of the wrong size
        ["SET", "u", b"HYLL\x02" + bytes(20)], ["PFCOUNT", "u"],
    ],
}  # fmt: skip


@settings(max_examples=60, **RANDOM)
@given(
    batches=st.lists(
        st.tuples(
            st.sampled_from(["PFADD a", "PFADD b", "PFMERGE a b", "PFMERGE c a b", "PFCOUNT a"]),
            st.lists(st.integers(0, 4000), max_size=200),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_hyperloglog_bytes_match_redis(
    server: redis.Redis, tmp_path_factory: pytest.TempPathFactory,
    batches: list[tuple[str, list[int]]],
) -> None:  # fmt: skip
    """Random element batches: sparse opcode splits and merges, promotion to dense at 3000
    bytes or a run above 32, merges of sparse and dense, the cached cardinality."""
    commands: list[list[str | bytes]] = []
    for name, elements in batches:
        words = name.split()
        commands.append(words + ([f"{n}" for n in elements] if words[0] == "PFADD" else []))
    run(server, tmp_path_factory.mktemp("hll"), commands)


# -- geo -----------------------------------------------------------------------------------

GEO_SETUP: list[list[str | bytes]] = [
    [
        "GEOADD",
        "g",
        "13.361389",
        "38.115556",
        "Palermo",
        "15.087269",
        "37.502669",
        "Catania",
        "12.4964",
        "41.9028",
        "Rome",
        "2.3522",
        "48.8566",
        "Paris",
        "-0.1276",
        "51.5072",
        "London",
        "13.4050",
        "52.52",
        "Berlin",
        "-74.006",
        "40.7128",
        "NYC",
        "151.2093",
        "-33.8688",
        "Sydney",
    ],
]
GEO_CASES: dict[str, list[list[str | bytes]]] = {
    "GEORADIUS and GEORADIUSBYMEMBER": [
        *GEO_SETUP, ["GEORADIUS", "g", "15", "37", "200", "km", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "200", "km", "STOREDIST", "d"],
        ["GEORADIUS", "g", "15", "37", "2000", "km", "COUNT", "3", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "2000", "km", "COUNT", "2", "DESC", "STOREDIST", "d"],
        ["GEORADIUS", "g", "15", "37", "5000", "mi", "ASC", "STOREDIST", "d"],
        ["GEORADIUS", "g", "15", "37", "20000", "km", "STOREDIST", "d"],
        ["GEORADIUS", "g", "15", "37", "1", "m", "STORE", "d"],  # empty: d is deleted
        ["GEORADIUSBYMEMBER", "g", "Rome", "1500", "km", "STOREDIST", "d"],
        ["GEORADIUSBYMEMBER", "g", "Nope", "1500", "km", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "200", "km", "WITHDIST", "STORE", "d"],
        ["GEORADIUS", "missing", "15", "37", "200", "km", "STORE", "d"],
        ["GEORADIUSBYMEMBER", "missing", "x", "y", "z", "STORE", "g2"],
        ["SET", "s", "v"], ["GEORADIUS", "s", "15", "37", "200", "km", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "x", "km", "STORE", "d"],
        ["GEORADIUS", "g", "15", "37", "1", "km", "STORE"],
    ],
    "GEOSEARCHSTORE": [
        *GEO_SETUP,
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYBOX", "2000", "1000", "km",
         "STOREDIST"],
        ["GEOSEARCHSTORE", "d", "g", "FROMMEMBER", "Paris", "BYRADIUS", "1000", "km", "ASC",
         "COUNT", "2", "ANY"],
        ["GEOSEARCHSTORE", "d", "g", "FROMMEMBER", "Sydney", "BYBOX", "100", "100", "ft"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "200", "48", "BYBOX", "2000", "1000", "km"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "1", "parsec"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "-1", "m"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "1", "m", "WITHDIST"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "1", "m", "ANY"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYRADIUS", "1", "m", "COUNT",
         "0"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "2", "48", "BYBOX", "1", "m", "x", "km"],
        ["GEOSEARCHSTORE", "d", "g", "FROMMEMBER", "Paris", "FROMLONLAT", "2", "48", "BYRADIUS",
         "1", "m"],
        ["GEOSEARCHSTORE", "d", "g", "FROMMEMBER", "Paris", "BYRADIUS", "1", "m", "BYBOX", "1",
         "1", "m"],
        ["GEOSEARCHSTORE", "d", "g", "BYRADIUS", "1", "m", "ASC", "ASC"],
        ["GEOSEARCHSTORE", "d", "g", "FROMMEMBER", "Paris", "ASC", "ASC", "DESC"],
        ["GEOADD", "g", "NX", "CH", "0", "0", "Null", "1", "1", "Rome"],
        ["GEOADD", "g", "NX", "XX", "0", "0", "a"], ["GEOADD", "g", "0", "90", "x"],
        ["GEOADD", "g", "XX", "0", "0", "y", "1"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "0", "m", "STOREDIST"],
        ["GEOSEARCHSTORE", "d", "g", "FROMLONLAT", "0.5", "0.5", "BYBOX", "400", "400", "km"],
    ],
}  # fmt: skip


@settings(max_examples=40, **RANDOM)
@given(
    points=st.lists(
        st.tuples(st.floats(-180, 180), st.floats(-85.05112878, 85.05112878)),
        min_size=1,
        max_size=40,
    ),
    centre=st.tuples(st.floats(-180, 180), st.floats(-85, 85)),
    radius_km=st.sampled_from(["0.5", "50", "700", "3000", "9000"]),
    count=st.sampled_from([[], ["COUNT", "3"], ["COUNT", "5", "DESC"]]),
)
def test_geo_searches_match_redis(
    server: redis.Redis, tmp_path_factory: pytest.TempPathFactory,
    points: list[tuple[float, float]], centre: tuple[float, float], radius_km: str,
    count: list[str],
) -> None:  # fmt: skip
    """Random points and searches: the members found, their geohashes and distances."""
    geoadd: list[str | bytes] = ["GEOADD", "g"]
    for n, (lon, lat) in enumerate(points):
        geoadd += [repr(lon), repr(lat), f"m{n}"]
    x, y = repr(centre[0]), repr(centre[1])
    run(server, tmp_path_factory.mktemp("geo"), [
        geoadd, ["GEORADIUS", "g", x, y, radius_km, "km", *count, "STOREDIST", "d"],
        ["GEOSEARCHSTORE", "b", "g", "FROMLONLAT", x, y, "BYBOX", radius_km, radius_km, "km",
         *count, "STOREDIST"],
        ["GEORADIUSBYMEMBER", "g", "m0", radius_km, "mi", *count, "STORE", "e"],
    ])  # fmt: skip


ALL_CASES = {
    f"{family}: {name}": commands
    for family, cases in [("strings", STRING_CASES), ("sets", SET_CASES), ("zsets", ZSET_CASES),
                          ("sort", SORT_CASES), ("hll", HLL_CASES), ("geo", GEO_CASES)]
    for name, commands in cases.items()
}  # fmt: skip


@pytest.mark.parametrize("name", list(ALL_CASES))
def test_case(server: redis.Redis, tmp_path: Path, name: str) -> None:
    run(server, tmp_path, ALL_CASES[name])


# -- XSETID ----------------------------------------------------------------------------------


def test_xsetid(server: redis.Redis, tmp_path: Path) -> None:
    """The last ID it sets decides which IDs XADD accepts next (moonish keeps no
    ENTRIESADDED/MAXDELETEDID counters, but checks them as Redis does)."""
    run(server, tmp_path, [
        ["XADD", "x", "1-1", "f", "v"], ["XSETID", "x", "0-5"], ["XSETID", "x", "5-0"],
        ["XADD", "x", "3-0", "f", "v"], ["XADD", "x", "5-*", "f", "v"], ["XADD", "x", "*", "g",
        "w"], ["XSETID", "x", "9999999999999", "ENTRIESADDED", "1"],
        ["XSETID", "x", "9999999999999", "ENTRIESADDED", "-1"],
        ["XSETID", "x", "9999999999999", "MAXDELETEDID", "99999999999999-0"],
        ["XSETID", "x", "9999999999999-3", "MAXDELETEDID", "8-0", "ENTRIESADDED", "5"],
        ["XADD", "x", "9999999999999-3", "f", "v"], ["XADD", "x", "9999999999999-*", "f", "v"],
        ["XSETID", "missing", "1-1"], ["SET", "s", "v"], ["XSETID", "s", "1"],
        ["XSETID", "x", "bad"], ["XSETID", "x", "99999999999999", "FOO"], ["XSETID", "x", "-"],
        ["XSETID", "x", "99999999999999", "ENTRIESADDED"], ["XTRIM", "x", "MAXLEN", "0"],
        ["XSETID", "x", "0-1"], ["XADD", "x", "0-2", "f", "v"],  # an empty stream takes any ID
    ])  # fmt: skip


# -- MOVE, SWAPDB --------------------------------------------------------------------------


def test_move(server: redis.Redis, tmp_path: Path) -> None:
    run(server, tmp_path, [
        ["SET", "a", "1", "PXAT", FAR], ["HSET", "h", "f", "v"], ["MOVE", "a", "1"],
        ["MOVE", "a", "1"], ["SET", "a", "2"], ["MOVE", "a", "1"], ["MOVE", "h", "0"],
        ["MOVE", "h", "x"], ["MOVE", "h", "-1"], ["MOVE", "h", "4294967296"], ["MOVE", "q", "1"],
        ["MOVE", "h", "1"],
    ])  # fmt: skip


def test_swapdb(server: redis.Redis, tmp_path: Path) -> None:
    server.flushall()
    run(server, tmp_path, [
        ["SET", "a", "1", "PXAT", FAR], ["RPUSH", "l", "x"], ["MOVE", "l", "1"],
        ["RPUSH", "l", "y"], ["SET", "b", "2"], ["MOVE", "b", "1"], ["SWAPDB", "0", "1"],
        ["SWAPDB", "1", "0"], ["SWAPDB", "0", "0"], ["SWAPDB", "x", "0"], ["SWAPDB", "0", "x"],
        ["SWAPDB", "0", "-1"], ["SWAPDB", "0", "4294967296"], ["FLUSHDB"], ["SWAPDB", "0", "1"],
    ])  # fmt: skip


def resp(*argv: bytes) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def test_import_runs_swapdb_on_every_shard_and_store_commands_across_shards(
    tmp_path: Path,
) -> None:
    """SWAPDB reaches every shard; a *STORE whose keys live in several shards, and a SORT
    that reads BY/GET keys, run once over all of them (each shard logs its keys' new
    values)."""
    appendonlydir = tmp_path / "appendonlydir"
    appendonlydir.mkdir()
    (appendonlydir / "appendonly.aof.manifest").write_text(
        "file appendonly.aof.1.incr.aof seq 1 type i\n"
    )
    keys = [b"k%d" % i for i in range(12)]
    commands = [resp(b"SADD", key, b"m", key) for key in keys]
    commands += [resp(b"SADD", b"none", b"x"), resp(b"SUNIONSTORE", b"all", *keys)]
    commands += [resp(b"SINTERSTORE", b"none", *keys, b"missing")]  # empty: deleted
    commands += [resp(b"ZUNIONSTORE", b"z", b"3", *keys[:3], b"WEIGHTS", b"1", b"2", b"3")]
    commands += [
        resp(b"RPUSH", b"srt", b"a", b"b", b"c"),
        resp(b"MSET", b"w_a", b"3", b"w_b", b"1"),
    ]
    commands += [
        resp(b"SET", b"w_c", b"2"),
        resp(b"SORT", b"srt", b"BY", b"w_*", b"GET", b"w_*", b"GET", b"#", b"STORE", b"sorted"),
    ]
    commands += [resp(b"SELECT", b"0"), resp(b"SWAPDB", b"0", b"3")]
    (appendonlydir / "appendonly.aof.1.incr.aof").write_bytes(b"".join(commands))
    import_aof(appendonlydir, tmp_path / "data", 3)
    found = {}
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        with shard_writer(Path(shard_dir)) as writer:
            found.update({(db, key): entry.value for db, key, entry in writer.keyspace.items()})
    assert {db for db, _ in found} == {3}
    assert found[(3, b"all")] == {b"m", *keys}
    assert (3, b"none") not in found
    assert found[(3, b"sorted")] == [b"1", b"b", b"2", b"c", b"3", b"a"]  # BY/GET: any shard
    assert found[(3, b"z")].scores == {b"m": 6.0, b"k0": 1.0, b"k1": 2.0, b"k2": 3.0}


def test_redis_aof_of_these_commands_imports_to_redis_keyspace(tmp_path: Path) -> None:
    """Every case above sent to a redis-server writing an AOF (what Redis propagates for
    them, errors included; each case in a db of its own, then a SWAPDB); the AOF imported
    into 3 shards holds exactly the keyspace of a redis-server that loads the same AOF. (Not
    always the writer's: a BITFIELD whose every write fails creates a zero string that Redis
    does not propagate.)"""
    cases = list(ALL_CASES.values())
    workdir = tmp_path / "redis"
    workdir.mkdir()
    aof = ("--appendonly", "yes", "--aof-use-rdb-preamble", "no", "--appendfsync", "always")
    with redis_server(workdir, *aof) as client:
        for number, commands in enumerate(cases):  # each case in a db of its own
            client.execute_command("SELECT", number % 16)
            if number >= 16:
                client.execute_command("FLUSHDB")
            for command in commands:
                with contextlib.suppress(redis.ResponseError):
                    client.execute_command(*command)
        client.execute_command("SWAPDB", "2", "3")
    theirs = {}
    with redis_server(workdir, *aof) as client:  # loads the AOF
        for db in range(16):
            client.execute_command("SELECT", db)
            for key in client.scan_iter(count=1000):
                theirs[(db, key)] = comparable(redis_entry(client, key))
    report = import_aof(workdir / "appendonlydir", tmp_path / "data", 3)
    assert set(report.per_command) >= {
        "SETRANGE", "SETBIT", "BITOP", "BITFIELD", "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE",
        "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZREMRANGEBYLEX", "ZRANGESTORE", "ZUNIONSTORE",
        "ZINTERSTORE", "ZDIFFSTORE", "SORT", "PFADD", "PFCOUNT", "PFMERGE", "SWAPDB",
        "GEORADIUS", "GEORADIUSBYMEMBER", "GEOSEARCHSTORE",
    }  # fmt: skip
    ours = {}
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        with shard_writer(Path(shard_dir)) as writer:
            ours.update({(db, k): comparable(e) for db, k, e in writer.keyspace.items()})
    assert len(theirs) > 50
    assert ours == theirs
