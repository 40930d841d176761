"""One case per write command: the reply, the c/u/d of each key it wrote, and the key's value
afterwards (semantics of Redis 7.0; tests/test_state_redis.py checks them against a real
redis-server, this table pins them down without one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish
from moonish.clock import FixedClock
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import _element_bytes
from tests.conftest import START_US
from tests.redis_server import comparable

NOW_MS = START_US // 1000
INF = float("inf")

Case = tuple[list[list[str]], list[str], Any, list[tuple[str, str]], str, Any]
"""(setup commands, the command, its reply, [(key, op)] logged, key to inspect, its
comparable() value: (type, value, expire_at_ms) or None)."""

CASES: dict[str, Case] = {
    "SET new": ([], ["SET", "k", "v"], b"OK", [("k", "c")], "k", ("string", b"v", None)),
    "SET NX exists": ([["SET", "k", "a"]], ["SET", "k", "b", "NX"], None, [], "k",
                      ("string", b"a", None)),
    "SET XX GET PX": ([["SET", "k", "a"]], ["SET", "k", "b", "XX", "GET", "PX", "500"], b"a",
                      [("k", "u")], "k", ("string", b"b", NOW_MS + 500)),
    "SET KEEPTTL": ([["SET", "k", "a", "EX", "9"]], ["SET", "k", "b", "KEEPTTL"], b"OK",
                    [("k", "u")], "k", ("string", b"b", NOW_MS + 9000)),
    "SET PXAT past": ([["SET", "k", "a"]], ["SET", "k", "b", "PXAT", "1"], b"OK", [("k", "d")],
                      "k", None),
    "SETNX": ([], ["SETNX", "k", "v"], 1, [("k", "c")], "k", ("string", b"v", None)),
    "SETEX": ([], ["SETEX", "k", "10", "v"], b"OK", [("k", "c")], "k",
              ("string", b"v", NOW_MS + 10_000)),
    "PSETEX": ([], ["PSETEX", "k", "10", "v"], b"OK", [("k", "c")], "k",
               ("string", b"v", NOW_MS + 10)),
    "GETSET clears TTL": ([["SET", "k", "a", "EX", "9"]], ["GETSET", "k", "b"], b"a",
                          [("k", "u")], "k", ("string", b"b", None)),
    "GETDEL": ([["SET", "k", "a"]], ["GETDEL", "k"], b"a", [("k", "d")], "k", None),
    "APPEND": ([["SET", "k", "a"]], ["APPEND", "k", "bc"], 3, [("k", "u")], "k",
               ("string", b"abc", None)),
    "INCR new": ([], ["INCR", "n"], 1, [("n", "c")], "n", ("string", b"1", None)),
    "DECRBY": ([["SET", "n", "5"]], ["DECRBY", "n", "7"], -2, [("n", "u")], "n",
               ("string", b"-2", None)),
    "INCRBYFLOAT": ([["SET", "n", "10.5"]], ["INCRBYFLOAT", "n", "0.1"], b"10.6", [("n", "u")],
                    "n", ("string", b"10.6", None)),
    "MSET": ([["SET", "a", "0"]], ["MSET", "a", "1", "b", "2"], b"OK", [("a", "u"), ("b", "c")],
             "b", ("string", b"2", None)),
    "MSETNX refused": ([["SET", "a", "0"]], ["MSETNX", "a", "1", "b", "2"], 0, [], "b", None),
    "HSET": ([["HSET", "h", "f", "1"]], ["HSET", "h", "f", "2", "g", "3"], 1, [("h", "u")], "h",
             ("hash", {b"f": b"2", b"g": b"3"}, None)),
    "HMSET": ([], ["HMSET", "h", "f", "1"], b"OK", [("h", "c")], "h",
              ("hash", {b"f": b"1"}, None)),
    "HSET one field, replaced": ([["HSET", "h", "f", "1"]], ["HSET", "h", "f", "2"], 0,
                                 [("h", "u")], "h", ("hash", {b"f": b"2"}, None)),
    "HSET one field, added": ([["HSET", "h", "f", "1"]], ["HSET", "h", "g", "2"], 1,
                              [("h", "u")], "h", ("hash", {b"f": b"1", b"g": b"2"}, None)),
    "HMSET one field": ([["HSET", "h", "f", "1"]], ["HMSET", "h", "g", "2"], b"OK",
                        [("h", "u")], "h", ("hash", {b"f": b"1", b"g": b"2"}, None)),
    "HSETNX": ([["HSET", "h", "f", "1"]], ["HSETNX", "h", "f", "2"], 0, [], "h",
               ("hash", {b"f": b"1"}, None)),
    "HDEL last field": ([["HSET", "h", "f", "1"]], ["HDEL", "h", "f", "x"], 1, [("h", "d")],
                        "h", None),
    "HINCRBY": ([], ["HINCRBY", "h", "f", "-3"], -3, [("h", "c")], "h",
                ("hash", {b"f": b"-3"}, None)),
    "HINCRBYFLOAT": ([["HSET", "h", "f", "1"]], ["HINCRBYFLOAT", "h", "f", "0.5"], b"1.5",
                     [("h", "u")], "h", ("hash", {b"f": b"1.5"}, None)),
    "LPUSH": ([["RPUSH", "l", "a"]], ["LPUSH", "l", "b", "c"], 3, [("l", "u")], "l",
              ("list", [b"c", b"b", b"a"], None)),
    "LPUSH one": ([["RPUSH", "l", "a"]], ["LPUSH", "l", "b"], 2, [("l", "u")], "l",
                  ("list", [b"b", b"a"], None)),
    "RPUSH one": ([["RPUSH", "l", "a"]], ["RPUSH", "l", "b"], 2, [("l", "u")], "l",
                  ("list", [b"a", b"b"], None)),
    "RPUSHX missing": ([], ["RPUSHX", "l", "a"], 0, [], "l", None),
    "LPOP one": ([["RPUSH", "l", "a", "b"]], ["LPOP", "l"], b"a", [("l", "u")], "l",
                 ("list", [b"b"], None)),
    "RPOP one": ([["RPUSH", "l", "a", "b"]], ["RPOP", "l"], b"b", [("l", "u")], "l",
                 ("list", [b"a"], None)),
    "LPOP count": ([["RPUSH", "l", "a", "b", "c"]], ["LPOP", "l", "2"], [b"a", b"b"],
                   [("l", "u")], "l", ("list", [b"c"], None)),
    "RPOP last": ([["RPUSH", "l", "a"]], ["RPOP", "l"], b"a", [("l", "d")], "l", None),
    "LSET": ([["RPUSH", "l", "a", "b"]], ["LSET", "l", "-1", "z"], b"OK", [("l", "u")], "l",
             ("list", [b"a", b"z"], None)),
    "LREM": ([["RPUSH", "l", "a", "b", "a", "a"]], ["LREM", "l", "-2", "a"], 2, [("l", "u")],
             "l", ("list", [b"a", b"b"], None)),
    "LTRIM": ([["RPUSH", "l", "a", "b", "c", "d"]], ["LTRIM", "l", "1", "-2"], b"OK",
              [("l", "u")], "l", ("list", [b"b", b"c"], None)),
    "LINSERT": ([["RPUSH", "l", "a", "c"]], ["LINSERT", "l", "AFTER", "a", "b"], 3,
                [("l", "u")], "l", ("list", [b"a", b"b", b"c"], None)),
    "LMOVE": ([["RPUSH", "l", "a", "b"]], ["LMOVE", "l", "m", "RIGHT", "LEFT"], b"b",
              [("l", "u"), ("m", "c")], "m", ("list", [b"b"], None)),
    "RPOPLPUSH onto itself": ([["RPUSH", "l", "a", "b"]], ["RPOPLPUSH", "l", "l"], b"b",
                              [("l", "u")], "l", ("list", [b"b", b"a"], None)),
    "SADD": ([["SADD", "s", "a"]], ["SADD", "s", "a", "b"], 1, [("s", "u")], "s",
             ("set", {b"a", b"b"}, None)),
    "SREM last": ([["SADD", "s", "a"]], ["SREM", "s", "a"], 1, [("s", "d")], "s", None),
    "SPOP all": ([["SADD", "s", "a", "b"]], ["SPOP", "s", "5"], None, [("s", "d")], "s", None),
    "SMOVE": ([["SADD", "s", "a"], ["SADD", "t", "b"]], ["SMOVE", "s", "t", "a"], 1,
              [("s", "d"), ("t", "u")], "t", ("set", {b"a", b"b"}, None)),
    "ZADD flags": ([["ZADD", "z", "5", "a"]], ["ZADD", "z", "GT", "CH", "3", "a", "1", "b"], 1,
                   [("z", "u")], "z", ("zset", {b"a": 5.0, b"b": 1.0}, None)),
    "ZADD INCR": ([["ZADD", "z", "5", "a"]], ["ZADD", "z", "INCR", "inf", "a"], INF,
                  [("z", "u")], "z", ("zset", {b"a": INF}, None)),
    "ZINCRBY": ([], ["ZINCRBY", "z", "2.5", "a"], 2.5, [("z", "c")], "z",
                ("zset", {b"a": 2.5}, None)),
    "ZREM": ([["ZADD", "z", "1", "a", "2", "b"]], ["ZREM", "z", "a", "x"], 1, [("z", "u")], "z",
             ("zset", {b"b": 2.0}, None)),
    "ZPOPMAX": ([["ZADD", "z", "1", "a", "2", "b"]], ["ZPOPMAX", "z"], [(b"b", 2.0)],
                [("z", "u")], "z", ("zset", {b"a": 1.0}, None)),
    "ZPOPMIN last": ([["ZADD", "z", "1", "a"]], ["ZPOPMIN", "z", "3"], [(b"a", 1.0)],
                     [("z", "d")], "z", None),
    "XADD *": ([["XADD", "x", f"{NOW_MS + 5}-0", "f", "v"]], ["XADD", "x", "*", "g", "w"],
               b"%d-1" % (NOW_MS + 5), [("x", "u")], "x",
               ("stream", [(b"%d-0" % (NOW_MS + 5), {b"f": b"v"}),
                           (b"%d-1" % (NOW_MS + 5), {b"g": b"w"})], None)),
    "XADD MAXLEN": ([["XADD", "x", "1-1", "f", "v"]], ["XADD", "x", "MAXLEN", "=", "1", "2-*",
                    "g", "w"], b"2-0", [("x", "u")], "x",
                    ("stream", [(b"2-0", {b"g": b"w"})], None)),
    "XADD NOMKSTREAM": ([], ["XADD", "x", "NOMKSTREAM", "*", "f", "v"], None, [], "x", None),
    "XDEL keeps the stream": ([["XADD", "x", "1-1", "f", "v"]], ["XDEL", "x", "1-1"], 1,
                              [("x", "u")], "x", ("stream", [], None)),
    "XTRIM MINID": ([["XADD", "x", "1-1", "f", "v"], ["XADD", "x", "3-0", "f", "v"]],
                    ["XTRIM", "x", "MINID", "2"], 1, [("x", "u")], "x",
                    ("stream", [(b"3-0", {b"f": b"v"})], None)),
    "DEL": ([["SET", "a", "1"]], ["DEL", "a", "b"], 1, [("a", "d")], "a", None),
    "UNLINK": ([["SET", "a", "1"], ["SET", "b", "1"]], ["UNLINK", "a", "b"], 2,
               [("a", "d"), ("b", "d")], "b", None),
    "RENAME onto a key": ([["SET", "a", "1", "EX", "5"], ["SET", "b", "2"]], ["RENAME", "a", "b"],
                          b"OK", [("a", "d"), ("b", "u")], "b",
                          ("string", b"1", NOW_MS + 5000)),
    "RENAMENX taken": ([["SET", "a", "1"], ["SET", "b", "2"]], ["RENAMENX", "a", "b"], 0, [],
                       "a", ("string", b"1", None)),
    "COPY": ([["RPUSH", "a", "x"]], ["COPY", "a", "b"], 1, [("b", "c")], "b",
             ("list", [b"x"], None)),
    "EXPIRE GT without TTL": ([["SET", "k", "v"]], ["EXPIRE", "k", "10", "GT"], 0, [], "k",
                              ("string", b"v", None)),
    "PEXPIRE": ([["SET", "k", "v"]], ["PEXPIRE", "k", "250"], 1, [("k", "u")], "k",
                ("string", b"v", NOW_MS + 250)),
    "EXPIREAT past": ([["SET", "k", "v"]], ["EXPIREAT", "k", "1"], 1, [("k", "d")], "k", None),
    "PEXPIREAT LT": ([["SET", "k", "v", "PX", "900"]], ["PEXPIREAT", "k", str(NOW_MS + 100),
                     "LT"], 1, [("k", "u")], "k", ("string", b"v", NOW_MS + 100)),
    "PERSIST": ([["SET", "k", "v", "EX", "5"]], ["PERSIST", "k"], 1, [("k", "u")], "k",
                ("string", b"v", None)),
    "FLUSHDB": ([["SET", "a", "1"], ["HSET", "b", "f", "v"]], ["FLUSHDB"], b"OK",
                [("a", "d"), ("b", "d")], "a", None),
    "SETRANGE": ([["SET", "k", "hello"]], ["SETRANGE", "k", "6", "world"], 11, [("k", "u")], "k",
                 ("string", b"hello\x00world", None)),
    "SETBIT new": ([], ["SETBIT", "b", "9", "1"], 0, [("b", "c")], "b",
                   ("string", b"\x00\x40", None)),
    "BITOP AND": ([["SET", "a", "ab"], ["SET", "b", "c"]], ["BITOP", "AND", "d", "a", "b"], 2,
                  [("d", "c")], "d", ("string", b"a\x00", None)),
    "BITOP empty deletes": ([["SET", "d", "x"]], ["BITOP", "OR", "d", "m1", "m2"], 0,
                            [("d", "d")], "d", None),
    "BITFIELD": ([], ["BITFIELD", "f", "SET", "u8", "0", "255", "INCRBY", "i8", "0", "1"], [0, 0],
                 [("f", "c")], "f", ("string", b"\x00", None)),
    "SINTERSTORE": ([["SADD", "a", "1", "2"], ["SADD", "b", "2", "3"]],
                    ["SINTERSTORE", "d", "a", "b"], 1, [("d", "c")], "d", ("set", {b"2"}, None)),
    "SUNIONSTORE onto a string": ([["SADD", "a", "1"], ["SET", "d", "x", "EX", "9"]],
                                  ["SUNIONSTORE", "d", "a", "b"], 1, [("d", "u")], "d",
                                  ("set", {b"1"}, None)),
    "SDIFFSTORE empty": ([["SADD", "a", "1"], ["SADD", "d", "z"]], ["SDIFFSTORE", "d", "a", "a"],
                         0, [("d", "d")], "d", None),
    "ZREMRANGEBYSCORE": ([["ZADD", "z", "1", "a", "2", "b", "3", "c"]],
                         ["ZREMRANGEBYSCORE", "z", "(1", "2"], 1, [("z", "u")], "z",
                         ("zset", {b"a": 1.0, b"c": 3.0}, None)),
    "ZREMRANGEBYRANK all": ([["ZADD", "z", "1", "a", "2", "b"]], ["ZREMRANGEBYRANK", "z", "0",
                            "-1"], 2, [("z", "d")], "z", None),
    "ZREMRANGEBYLEX": ([["ZADD", "z", "0", "a", "0", "b", "0", "c"]],
                       ["ZREMRANGEBYLEX", "z", "[b", "+"], 2, [("z", "u")], "z",
                       ("zset", {b"a": 0.0}, None)),
    "ZUNIONSTORE": ([["ZADD", "x", "1", "a", "2", "b"], ["SADD", "s", "a"]],
                    ["ZUNIONSTORE", "d", "2", "x", "s", "WEIGHTS", "2", "3"], 2, [("d", "c")],
                    "d", ("zset", {b"a": 5.0, b"b": 4.0}, None)),
    "ZINTERSTORE MAX": ([["ZADD", "x", "1", "a", "2", "b"], ["SADD", "s", "a"]],
                        ["ZINTERSTORE", "d", "2", "x", "s", "AGGREGATE", "MAX"], 1, [("d", "c")],
                        "d", ("zset", {b"a": 1.0}, None)),
    "ZDIFFSTORE": ([["ZADD", "x", "1", "a", "2", "b"], ["SADD", "s", "a"]],
                   ["ZDIFFSTORE", "d", "2", "x", "s"], 1, [("d", "c")], "d",
                   ("zset", {b"b": 2.0}, None)),
    "ZRANGESTORE BYSCORE REV LIMIT": ([["ZADD", "x", "1", "a", "2", "b", "3", "c"]],
                                      ["ZRANGESTORE", "d", "x", "+inf", "-inf", "BYSCORE", "REV",
                                       "LIMIT", "1", "1"], 1, [("d", "c")], "d",
                                      ("zset", {b"b": 2.0}, None)),
    "SORT STORE": ([["RPUSH", "l", "3", "1", "2"], ["SET", "d", "x"]],
                   ["SORT", "l", "DESC", "LIMIT", "0", "2", "STORE", "d"], 2, [("d", "u")], "d",
                   ("list", [b"3", b"2"], None)),
    "PFADD": ([], ["PFADD", "h", "a"], 1, [("h", "c")], "h",
              ("string", b"HYLL\x01" + bytes(10) + b"\x80q\xa6\x84NW", None)),  # as Redis has it
    "XSETID": ([["XADD", "x", "1-1", "f", "v"]], ["XSETID", "x", "7-0"], b"OK", [("x", "u")], "x",
               ("stream", [(b"1-1", {b"f": b"v"})], None)),
    "MOVE": ([["SET", "k", "v", "EX", "5"]], ["MOVE", "k", "3"], 1, [("k", "d"), ("k", "c")], "k",
             None),
    "SWAPDB": ([["SET", "a", "1"]], ["SWAPDB", "0", "1"], b"OK", [("a", "d"), ("a", "c")], "a",
               None),
}  # fmt: skip


@pytest.mark.parametrize("name", list(CASES))
def test_command(shard: Path, name: str) -> None:
    setup, command, reply, logged, key, value = CASES[name]
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    with ShardWriter(shard, options, FixedClock(START_US, 0)) as writer:
        for argv in setup:
            writer.execute(0, argv)
        result = writer.execute(0, command)
        got = writer.keyspace.get(0, key.encode())
    if name == "SPOP all":
        assert sorted(result.reply) == [b"a", b"b"]
    else:
        assert result.reply == reply
    assert comparable(got) == value
    if got is not None and got.nbytes is not None:  # kept by the handlers: must be exact
        assert got.nbytes == _element_bytes(got.type, got.value)
    events = moonish.read(shard, result.lsns[0], 100).events if result.lsns else []
    envelopes = [orjson.loads(event.envelope) for event in events]
    assert [((e["after"] or e["before"])["key"], e["op"]) for e in envelopes] == logged
    assert all(e["source"]["command"] in (command[0], "SREM") for e in envelopes)


def test_flushall_reaches_every_db(shard: Path) -> None:
    options = ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), expiry_sweep_ms=0)
    with ShardWriter(shard, options, FixedClock(START_US, 0)) as writer:
        writer.execute(0, ["SET", "a", "1"])
        writer.execute(3, ["SET", "a", "1"])
        result = writer.execute(5, ["FLUSHALL"])
        assert len(writer.keyspace) == 0
    events = moonish.read(shard, result.lsns[0], 10).events
    assert [(orjson.loads(e.envelope)["source"]["db"], e.op) for e in events] == [
        (0, "d"),
        (3, "d"),
    ]
