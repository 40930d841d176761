"""A Valkey 9 workload of every type moonish supports, hash-field TTLs (HEXPIRE family,
HGETEX, HPERSIST, HSETEX with every option, HGETDEL) and a RESTORE of a DUMP taken on Valkey;
and a keyspace as Valkey and as moonish hold it, field times included."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import redis

import moonish
from moonish.values.model import HASH, Entry
from tests.support.redis.capture import client_of, every_type
from tests.support.redis.hash_ttls import FAR, LATER, PAST
from tests.support.servers.redis_server import comparable, redis_entry, shard_writer


def hash_ttl_workload(client: redis.Redis, tag: str) -> None:
    """Hashes with field times that stay, pass during the run, are set in the past, removed,
    copied, restored from a DUMP, and set through HGETEX (propagated as HPEXPIREAT/HPERSIST)."""
    big = [x for i in range(200) for x in (f"f{i}", f"v{i}")]  # a hash table
    commands = [
        ["HSET", f"h{tag}", "a", "1", "b", "2", "c", "3", "d", "4"],
        ["HSET", f"big{tag}", *big],
        ["HPEXPIREAT", f"h{tag}", FAR, "FIELDS", "2", "a", "b"],
        ["HPEXPIREAT", f"big{tag}", LATER, "FIELDS", "3", "f1", "f2", "f3"],
        ["HPEXPIRE", f"h{tag}", "1", "FIELDS", "1", "c"],
        ["HPEXPIRE", f"big{tag}", "1", "FIELDS", "2", "f4", "f5"],
        ["HPEXPIREAT", f"h{tag}", PAST, "FIELDS", "1", "zz"],
        ["HPERSIST", f"h{tag}", "FIELDS", "2", "b", "d"],
        ["HSET", f"gone{tag}", "a", "1", "b", "2"],
        ["HPEXPIREAT", f"gone{tag}", PAST, "FIELDS", "2", "a", "b"],
        ["HSET", f"gx{tag}", "a", "1", "b", "2", "c", "3"],
        ["HGETEX", f"gx{tag}", "EX", "100000", "FIELDS", "2", "a", "b"],
        ["HGETEX", f"gx{tag}", "PERSIST", "FIELDS", "1", "a"],
        ["COPY", f"h{tag}", f"{{h{tag}}}copy"],
        ["HEXPIRE", f"{{h{tag}}}copy", "100000", "GT", "FIELDS", "2", "a", "d"],
    ]
    for command in commands:
        client.execute_command(*command)
    for source in (f"h{tag}", f"big{tag}", f"gx{tag}"):  # DUMP payloads with footer 80
        payload = client.dump(source)
        assert payload is not None and payload[-10:-8] == b"\x50\x00", "not a Valkey 9 DUMP"
        client.restore(f"{{r}}{source}", 0, payload)
    client.restore(f"{{r}}timed{tag}", 10**9, client.dump(f"big{tag}"))


def hash_setex_workload(client: redis.Redis, tag: str) -> None:
    """HSETEX with every option (NX/XX, FNX/FXX, EX/PX/EXAT/PXAT/KEEPTTL, a past time, a
    1 ms time that passes during the run), HGETDEL and HGETEX (every option). Valkey propagates
    HSETEX with ``PXAT`` (or ``HDEL`` for a past time), HGETDEL as it is, HGETEX as
    HPEXPIREAT/HPERSIST/HDEL."""
    s, x = f"sx{tag}", f"{{sx{tag}}}x"
    commands = [
        ["HSETEX", s, "FIELDS", "2", "a", "1", "b", "2"],
        ["HSETEX", s, "EX", "100000", "FIELDS", "1", "c", "3"],
        ["HSETEX", s, "PX", "100000000", "FIELDS", "2", "d", "4", "e", "5"],
        ["HSETEX", s, "EXAT", FAR[:-3], "FIELDS", "1", "f", "6"],
        ["HSETEX", s, "PXAT", LATER, "FIELDS", "1", "g", "7"],
        ["HSETEX", s, "KEEPTTL", "FIELDS", "2", "c", "33", "a", "11"],
        ["HSETEX", s, "FIELDS", "1", "d", "44"],  # loses its time
        ["HSETEX", s, "XX", "FXX", "KEEPTTL", "FIELDS", "2", "e", "55", "f", "66"],
        ["HSETEX", s, "XX", "FNX", "PX", "1", "FIELDS", "1", "h", "8"],  # passes in the run
        ["HSETEX", s, "PXAT", str(2**63 - 1), "FIELDS", "1", "i", "9"],  # Valkey's latest
        ["HSETEX", s, "FNX", "FIELDS", "2", "a", "9", "zz", "9"],  # a exists: 0
        ["HSETEX", s, "FXX", "FIELDS", "2", "a", "9", "zz", "9"],  # zz does not: 0
        ["HSETEX", s, "NX", "FIELDS", "1", "a", "9"],  # the key exists: 0
        ["HSETEX", x, "NX", "FNX", "EX", "100000", "FIELDS", "2", "a", "1", "b", "2"],
        ["HSETEX", x, "PXAT", PAST, "FIELDS", "2", "a", "1", "zz", "1"],  # HDEL x a
        ["HSETEX", f"{{sx{tag}}}gone", "PXAT", PAST, "FIELDS", "1", "a", "1"],  # nothing
        ["HGETDEL", s, "FIELDS", "3", "b", "zz", "b"],
        ["HGETDEL", x, "FIELDS", "1", "b"],  # its last field: the key goes
        ["HSET", x, "a", "1", "b", "2", "c", "3", "d", "4"],
        ["HGETEX", x, "EX", "100000", "FIELDS", "1", "a"],
        ["HGETEX", x, "PX", "100000000", "FIELDS", "2", "b", "zz"],
        ["HGETEX", x, "EXAT", FAR[:-3], "FIELDS", "1", "c"],
        ["HGETEX", x, "PXAT", str(2**63 - 2), "FIELDS", "1", "c"],  # past Redis's 2^46 - 1
        ["HGETEX", x, "PXAT", LATER, "FIELDS", "1", "d"],
        ["HGETEX", x, "PERSIST", "FIELDS", "2", "a", "d"],
        ["HGETEX", x, "PXAT", PAST, "FIELDS", "1", "b"],  # HDEL x b
        ["HGETEX", x, "FIELDS", "1", "c"],  # nothing
    ]
    for command in commands:
        client.execute_command(*command)


def valkey_workload(client: redis.Redis, rng: random.Random, count: int, tag: str) -> None:
    """:func:`every_type` (every type, db 1, expiring keys, Lua, a stream), hash-field TTLs
    (:func:`hash_ttl_workload`, :func:`hash_setex_workload`), a stream with a consumer group,
    then a pause for the 1 ms field times to pass (Valkey's
    active expiry writes their HDELs)."""
    every_type(client, rng, count, tag, live=True)
    hash_ttl_workload(client, tag)
    hash_setex_workload(client, tag)
    client.xadd(f"{{x}}s{tag}", {"a": "1"})
    client.xgroup_create(f"{{x}}s{tag}", "g", id="0")
    client.xreadgroup("g", "c", {f"{{x}}s{tag}": ">"})
    time.sleep(0.3)


def _field_times(client: redis.Redis, key: bytes) -> dict[bytes, int]:
    fields = client.hkeys(key)
    if not fields:
        return {}
    times = client.execute_command("HPEXPIRETIME", key, "FIELDS", len(fields), *fields)
    return {f: t for f, t in zip(fields, times, strict=True) if t >= 0}


def valkey_state(client: redis.Redis, dbs: tuple[int, ...] = (0, 1)) -> dict[Any, Any]:
    """Every key of ``dbs`` as :func:`comparable`, with a hash's field times (ms)."""
    state = {}
    for db in dbs:
        in_db = client_of(client, db)
        for key in in_db.scan_iter(count=1000):
            entry = redis_entry(in_db, key)
            times = _field_times(in_db, key) if entry and entry.type == "hash" else {}
            state[(db, key)] = (comparable(entry), times)
        in_db.close()
    return state


def our_valkey_state(data_dir: Path) -> dict[Any, Any]:
    """moonish's keyspace as :func:`valkey_state` gives Valkey's: a hash field whose time has
    passed is left out, as Valkey's reads leave it out before its active expiry removes it
    (and propagates the HDEL)."""
    state = {}
    now_ms = int(time.time() * 1000)
    for shard_dir in moonish.shard_dirs(data_dir):
        with shard_writer(Path(shard_dir)) as writer:
            for db, key, entry in writer.keyspace.items():
                times = dict(entry.field_expire_at_ms or {})
                gone = {field for field, at in times.items() if at <= now_ms}
                if gone:
                    value = {f: v for f, v in entry.value.items() if f not in gone}
                    entry = Entry(HASH, value, entry.expire_at_ms)
                    times = {f: at for f, at in times.items() if f not in gone}
                state[(db, key)] = (comparable(entry), times)
    return state
