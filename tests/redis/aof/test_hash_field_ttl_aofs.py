"""Redis 7.4 hashes with field TTLs in AOFs: one a real Redis 7.4 wrote (its propagation:
HPEXPIREAT, HPERSIST, HDEL of expired fields, and its rewrite's ``HMSET`` + ``HPEXPIREAT …
FIELDS 1``) and a hand-written one."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import moonish
from moonish.log.records import KvChange, Replay
from moonish.redis.aof.importer import import_aof
from moonish.slots import shard_of_key
from tests.support.redis.hash_ttls import FAR, LATER, PAST, our_hash, redis_hash
from tests.support.servers.redis_server import (
    redis74_binary,
    redis_server,
    rewrite_aof,
    shard_writer,
)

AOF = ("--appendonly", "yes", "--aof-use-rdb-preamble", "no", "--appendfsync", "always")


def _redis_keyspace(client: redis.Redis) -> dict[tuple[int, bytes], Any]:
    found = {}
    for db in range(16):
        client.execute_command("SELECT", db)
        for key in client.scan_iter(count=1000):
            found[(db, key)] = redis_hash(client, key)
    client.execute_command("SELECT", 0)
    return found


def _our_keyspace(data_dir: Path) -> dict[tuple[int, bytes], Any]:
    found = {}
    for shard_dir in moonish.shard_dirs(data_dir):
        with shard_writer(Path(shard_dir)) as writer:
            found.update({(db, k): our_hash(e) for db, k, e in writer.keyspace.items()})
    return found


def _workload(client: redis.Redis, number: int) -> None:
    """Hashes with field times that stay, that pass during the run (active and lazy expiry
    in Redis: HDELs in the AOF), that are set in the past, removed and moved."""
    big = [x for i in range(200) for x in (f"f{i}", f"v{i}")]  # a hash table, not a listpack
    commands = [
        ["HSET", f"h{number}", "a", "1", "b", "2", "c", "3", "d", "4"],
        ["HSET", f"big{number}", *big],
        ["HPEXPIREAT", f"h{number}", FAR, "FIELDS", "2", "a", "b"],
        ["HPEXPIREAT", f"big{number}", LATER, "FIELDS", "3", "f1", "f2", "f3"],
        ["HPEXPIRE", f"h{number}", "1", "FIELDS", "1", "c"],
        ["HPEXPIRE", f"big{number}", "1", "FIELDS", "2", "f4", "f5"],
        ["HPEXPIREAT", f"h{number}", PAST, "FIELDS", "1", "zz"],
        ["HSET", f"lazy{number}", "n", "5", "m", "x"],
        ["HPEXPIRE", f"lazy{number}", "1", "FIELDS", "2", "n", "m"],
        ["HPERSIST", f"h{number}", "FIELDS", "2", "b", "d"],
        ["HSET", f"gone{number}", "a", "1", "b", "2"],
        ["HPEXPIREAT", f"gone{number}", PAST, "FIELDS", "2", "a", "b"],
        ["COPY", f"h{number}", f"{{h{number}}}copy"],
        ["HEXPIRE", f"{{h{number}}}copy", "100000", "GT", "FIELDS", "2", "a", "d"],
    ]
    for command in commands:
        client.execute_command(*command)
    time.sleep(0.01)
    client.execute_command("HINCRBY", f"lazy{number}", "n", "2")  # HDEL n, HINCRBY (MULTI)


@pytest.mark.redis
def test_redis_74_aof_with_field_ttls_imports_to_its_keyspace(tmp_path: Path) -> None:
    """A Redis 7.4 AOF, rewritten in the middle (its base: ``HMSET`` + ``HPEXPIREAT … FIELDS
    1`` per timed field), imported into 2 shards holds what a Redis 7.4 loading it holds."""
    workdir = tmp_path / "redis"
    workdir.mkdir()
    binary = redis74_binary()
    with redis_server(workdir, *AOF, binary=binary) as client:
        _workload(client, 0)
        client.execute_command("SELECT", 3)
        _workload(client, 1)
        rewrite_aof(client)
        _workload(client, 2)
        time.sleep(0.3)  # the 1 ms times pass; Redis's active expiry writes their HDELs
    appendonlydir = workdir / "appendonlydir"
    base = b"".join(p.read_bytes() for p in appendonlydir.glob("*.base.aof"))
    incr = b"".join(p.read_bytes() for p in appendonlydir.glob("*.incr.aof"))
    assert b"HPEXPIREAT" in base and b"HMSET" in base
    assert b"HPEXPIREAT" in incr and b"HPERSIST" in incr and b"HDEL" in incr
    loaded = tmp_path / "loaded"
    shutil.copytree(workdir, loaded)
    with redis_server(loaded, *AOF, binary=binary) as client:  # loads the AOF
        time.sleep(0.3)
        theirs = _redis_keyspace(client)
    report = import_aof(appendonlydir, tmp_path / "data", 2)
    assert {"HPEXPIREAT", "HPERSIST", "HDEL", "HMSET", "HINCRBY"} <= set(report.per_command)
    ours = _our_keyspace(tmp_path / "data")
    assert len(theirs) == 12  # h, big, lazy and the copy, thrice (gone went)
    assert ours == theirs
    timed = [state for state in ours.values() if state[3]]
    assert len(timed) == 9 and all(
        at == int(LATER) or at > time.time() * 1000 for state in timed for at in state[3].values()
    )


def _resp(*argv: bytes) -> bytes:
    return b"*%d\r\n" % len(argv) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in argv)


def test_handwritten_74_aof_loads_as_redis_loads_it(tmp_path: Path) -> None:
    """Loading keeps a past field time (``checkAlreadyExpired`` is off while loading); the
    sweep at the end removes those fields (records marked expired); a COPY across shards
    carries the times in its state records, which replay."""
    source, copy = b"h", b"h2"
    assert shard_of_key(source, 2) != shard_of_key(copy, 2)
    far, past = FAR.encode(), PAST.encode()
    commands = [
        (b"HMSET", source, b"a", b"1"),
        (b"HPEXPIREAT", source, far, b"FIELDS", b"1", b"a"),
        (b"HMSET", source, b"b", b"2"),
        (b"HPEXPIREAT", source, past, b"FIELDS", b"1", b"b"),
        (b"HMSET", source, b"c", b"3"),
        (b"HMSET", b"g", b"x", b"1"),
        (b"HPEXPIREAT", b"g", past, b"NX", b"FIELDS", b"1", b"x"),
        (b"HPERSIST", source, b"FIELDS", b"2", b"b", b"c"),  # b's time passed: -2, kept
        (b"MULTI",),
        (b"HDEL", source, b"c"),
        (b"HSET", source, b"d", b"4"),
        (b"EXEC",),
        (b"COPY", source, copy),
    ]
    appendonlydir = tmp_path / "appendonlydir"
    appendonlydir.mkdir()
    (appendonlydir / "appendonly.aof.1.base.aof").write_bytes(
        b"".join(_resp(*argv) for argv in commands)
    )
    (appendonlydir / "appendonly.aof.manifest").write_text(
        "file appendonly.aof.1.base.aof seq 1 type b\n"
    )
    report = import_aof(appendonlydir, tmp_path / "data", 2)
    assert report.per_command["HPEXPIREAT"] == 3
    expected = (moonish.values.model.HASH, {b"a": b"1", b"d": b"4"}, -1, {b"a": int(FAR)})
    assert _our_keyspace(tmp_path / "data") == {(0, source): expected, (0, copy): expected}
    changes = []
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        events = moonish.read(shard_dir, 1, 1000).events
        changes += [e.record for e in events if isinstance(e.record, KvChange)]
    expiries = {(c.key, c.op, c.argv) for c in changes if c.expired}
    assert expiries == {
        (source, "u", (b"HDEL", source, b"b")),
        (copy, "u", (b"HDEL", copy, b"b")),  # copied with its (past) time
        (b"g", "d", (b"HDEL", b"g", b"x")),
    }
    (state,) = [c for c in changes if c.key == copy and not c.expired]
    assert state.replay is Replay.STATE and b'"field_expire_at_ms":[["a",' in state.state
