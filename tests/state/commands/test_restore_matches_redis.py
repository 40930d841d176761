"""RESTORE of DUMP payloads against a real redis-server (7.0.15): payloads of every value type
and encoding Redis writes, every option, every error in Redis's order, each run on both sides
with the same replies and keyspaces after every command and after the log is replayed
(tests/support/redis/redis_compare.py ``run``)."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import moonish
from moonish.errors import CommandError, UnsupportedFormatError
from moonish.redis.rdb.reader import crc64
from tests.support.redis.redis_compare import FAR, run
from tests.support.servers.redis_server import comparable, redis_entry, shard_writer

pytestmark = pytest.mark.redis

PAST = "1000"  # 1970: an absolute expiry time long gone


def dump_payload(body: bytes, version: int = 10) -> bytes:
    """A DUMP payload around ``body`` (an RDB value), with its footer."""
    head = body + struct.pack("<H", version)
    return head + struct.pack("<Q", crc64(0, head))


@pytest.fixture(scope="module")
def dumps(server: redis.Redis) -> Iterator[dict[str, bytes]]:
    """DUMP payloads from the server of every value type, small (listpack, intset) and large
    (hashtable, skiplist, several quicklist nodes, LZF-compressed strings)."""
    server.flushall()
    many = [b"member-%03d" % i for i in range(200)]
    setup: list[list[object]] = [
        ["SET", "int", "12345"],
        ["SET", "str", "hello"],
        ["SET", "long", "a" * 1000],
        ["SET", "bin", b"\x00\xff\r\n"],
        ["SET", "empty", ""],
        ["RPUSH", "list", "a", "b", "c"],
        ["RPUSH", "biglist", *[b"x" * 100] * 300],
        ["SADD", "intset", "1", "2", "-3"],
        ["SADD", "set", "a", "b"],
        ["SADD", "bigset", *many],
        ["ZADD", "zset", "1", "a", "2.5", "b", "-inf", "c"],
        ["ZADD", "bigzset", *[x for i, m in enumerate(many) for x in (str(i / 7), m)]],
        ["HSET", "hash", "f", "v", "g", ""],
        ["HSET", "bighash", *[x for m in many for x in (m, m)]],
        ["XADD", "stream", "1-1", "f", "v"],
        ["XADD", "stream", "2-0", "f", "w", "g", "x"],
        ["XADD", "stream", "3-0", "a", "b"],
        ["XDEL", "stream", "2-0"],
        ["XADD", "emptystream", "MAXLEN", "0", "5-5", "f", "v"],
        ["XADD", "grouped", "1-1", "f", "v"],
        ["XGROUP", "CREATE", "grouped", "g", "0"],
    ]
    for command in setup:
        server.execute_command(*command)
    names = [str(command[1]) for command in setup if command[0] not in ("XDEL", "XGROUP")]
    yield {name: server.dump(name) for name in dict.fromkeys(names)}
    server.flushall()


def test_restore_of_every_type_matches_redis(
    server: redis.Redis, tmp_path: Path, dumps: dict[str, bytes]
) -> None:
    """Every payload restored under a new name, then over an existing key with REPLACE and
    an absolute expiry: same values as Redis's, byte for byte."""
    commands: list[list[str | bytes]] = []
    for name, payload in dumps.items():
        if name != "grouped":
            commands += [["RESTORE", f"new-{name}", "0", payload]]
            commands += [["RESTORE", "str", FAR, payload, "REPLACE", "ABSTTL"]]
    run(server, tmp_path, commands)


def test_restore_options_and_errors_match_redis(
    server: redis.Redis, tmp_path: Path, dumps: dict[str, bytes]
) -> None:
    p = dumps["hash"]
    bad_crc = p[:-1] + bytes([p[-1] ^ 1])
    run(
        server,
        tmp_path,
        [
            ["SET", "k", "x"],
            ["RESTORE", "k", "0", p],  # BUSYKEY
            ["RESTORE", "k", "x", p],  # BUSYKEY comes before the TTL
            ["RESTORE", "k", "0", p, "BADOPT"],  # options come first
            ["RESTORE", "k", "0", p, "replace"],
            ["RESTORE", "k", "0", p, "REPLACE", "IDLETIME", "10"],
            ["RESTORE", "k", "0", p, "REPLACE", "FREQ", "255"],
            ["RESTORE", "k", FAR, p, "REPLACE", "ABSTTL", "ABSTTL"],
            ["RESTORE", "n1", "0", p, "IDLETIME", "1", "FREQ", "1"],  # syntax error
            ["RESTORE", "n1", "0", p, "FREQ", "1", "IDLETIME", "1"],  # syntax error
            ["RESTORE", "n1", "0", p, "FREQ", "256"],
            ["RESTORE", "n1", "0", p, "IDLETIME", "-1"],
            ["RESTORE", "n1", "0", p, "IDLETIME", "x"],
            ["RESTORE", "n1", "0", p, "FREQ"],
            ["RESTORE", "n1", "0", p, "IDLETIME"],
            ["RESTORE", "n1", "-1", p],
            ["RESTORE", "n1", "1.5", p],
            ["RESTORE", "n1"],
            ["RESTORE", "n1", "0", bad_crc],
            ["RESTORE", "n1", "0", p[:9]],
            ["RESTORE", "n1", "0", ""],
            ["RESTORE", "n1", "0", dump_payload(b"\x08\x00")],  # no value type
            ["RESTORE", "n1", "0", dump_payload(b"\x00\x10abc")],  # a string cut short
            ["RESTORE", "n1", "0", dump_payload(b"\x12\x00")],  # an empty list: Redis refuses it
            ["RESTORE", "n1", "0", dump_payload(b"\x02\x00")],  # an empty set
            ["RESTORE", "n1", "0", dump_payload(b"\x00\x03abc")],  # a hand-made string
            ["RESTORE", "n2", PAST, p, "ABSTTL"],  # already expired: nothing is created
            ["RESTORE", "k", PAST, p, "REPLACE", "ABSTTL"],  # ... and a replaced key is deleted
            ["RESTORE", "k", "0", dumps["list"], "REPLACE"],
        ],
    )


def test_relative_ttl_is_logged_as_an_absolute_time(
    server: redis.Redis, tmp_path: Path, dumps: dict[str, bytes]
) -> None:
    """A relative TTL counts from the command's time; the key is logged by value (its
    expiry included), and a deleted key as Redis propagates it: ``DEL``."""
    server.flushall()
    server.restore("k", 100_000, dumps["zset"])
    theirs = redis_entry(server, b"k")
    with shard_writer(tmp_path / "shard") as writer:
        lsn = writer.execute(0, ["RESTORE", "k", "100000", dumps["zset"]]).lsns[0]
        ours = writer.keyspace.get(0, b"k")
        writer.execute(0, ["RESTORE", "k", PAST, dumps["str"], "REPLACE", "ABSTTL"])
    assert ours is not None and theirs is not None and ours.expire_at_ms is not None
    assert abs(ours.expire_at_ms - (theirs.expire_at_ms or 0)) < 5_000
    assert comparable(ours)[:2] == comparable(theirs)[:2]
    first, deleted = moonish.read(tmp_path / "shard", lsn, 10).events
    assert first.record.command == b"RESTORE" and first.record.replay.name == "STATE"
    assert first.record.argv == () and first.op == "c"
    assert (deleted.op, deleted.record.command) == ("d", b"DEL")


def test_payloads_moonish_cannot_hold_are_refused_naming_the_key(
    tmp_path: Path, dumps: dict[str, bytes]
) -> None:
    """A module value is refused (UnsupportedFormatError naming the key), not restored without
    what it holds; a stream keeps its consumer groups; a version above 12 is refused as Redis
    refuses a version it does not know."""
    module = dump_payload(b"\x07\x81" + struct.pack(">Q", 0x1234 << 10) + b"\x00")
    with shard_writer(tmp_path / "shard") as writer:
        with pytest.raises(UnsupportedFormatError, match="module") as info:
            writer.execute(0, [b"RESTORE", b"m", b"0", module])
        assert repr(b"m") in info.value.message
        assert writer.execute(0, [b"RESTORE", b"g", b"0", dumps["grouped"]]).reply == b"OK"
        restored = writer.keyspace.get(0, b"g")
        assert restored is not None and [g for g in restored.value.groups] == [b"g"]
        writer.execute(0, [b"DEL", b"g"])
        with pytest.raises(CommandError, match="version or checksum"):
            writer.execute(0, ["RESTORE", "v", "0", dump_payload(b"\x00\x01a", version=13)])
        assert (
            writer.execute(0, ["RESTORE", "v", "0", dump_payload(b"\x00\x01a", 12)]).reply == b"OK"
        )
        assert len(writer.keyspace) == 1 and writer.next_lsn == 4
