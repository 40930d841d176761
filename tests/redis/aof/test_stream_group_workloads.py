"""Random consumer-group workloads (seeded) sent by a client to a real redis-server 7.0 that
writes an AOF (``appendonly yes``, ``aof-use-rdb-preamble no``, a BGREWRITEAOF half way), then:

- the AOF imported into 1 and into 3 moonish shards holds, for every stream, what a
  redis-server that loads the same AOF holds (``XINFO STREAM <key> FULL``): entries, last ID,
  max deleted ID, entries added, groups with last delivered ID, entries read and pending
  entries (consumer, delivery time, count, exactly), consumers. Seen times are the load's
  time on both sides (Redis sets them when it loads), so each side's are checked against the
  window of its own load;
- with what the live server held it agrees on what Redis propagates faithfully: entries,
  counters, groups and their last delivered IDs (not entries read, nor what history reads
  change: docs/images.md, "Streams");
- an RDB file of each server (SAVE), read and completed by
  :func:`moonish.redis.rdb.streams.complete_stream`, equals that server's streams exactly,
  times included.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import redis

import moonish
from moonish.redis.aof.importer import import_aof
from moonish.redis.rdb.reader import RdbKey, read_rdb
from moonish.redis.rdb.streams import complete_stream
from moonish.values.model import STREAM
from tests.support.servers.redis_server import (
    StreamState,
    raw_client,
    redis_server,
    redis_stream,
    rewrite_aof,
    shard_writer,
    split_times,
    stream_state,
)

pytestmark = pytest.mark.redis

KEYS = [b"s0", b"s1", b"{t}s2"]
GROUPS = [b"g0", b"g1"]
CONSUMERS = [b"alice", b"bob", b"carol"]
AOF = ("--appendonly", "yes", "--aof-use-rdb-preamble", "no", "--appendfsync", "always")


def _ids(raw: redis.Redis, key: bytes) -> list[bytes]:
    return [i for i, _ in raw.execute_command("XRANGE", key, "-", "+")]


def _pending(raw: redis.Redis, key: bytes, group: bytes) -> list[bytes]:
    try:
        return [p[0] for p in raw.execute_command("XPENDING", key, group, "-", "+", "100")]
    except redis.ResponseError:
        return []


def _command(raw: redis.Redis, rng: random.Random) -> list[Any]:
    """One random stream command, with IDs that exist (or are pending) most of the time."""
    key, group, consumer = rng.choice(KEYS), rng.choice(GROUPS), rng.choice(CONSUMERS)
    ids = _ids(raw, key) + _pending(raw, key, group) + [b"1-0", b"99999999999999-0"]
    some = rng.sample(ids, min(len(ids), rng.randint(1, 3)))
    kind = rng.choices(
        [
            "xadd",
            "xdel",
            "xtrim",
            "create",
            "setid",
            "destroy",
            "createconsumer",
            "delconsumer",
            "read",
            "claim",
            "autoclaim",
            "ack",
            "xsetid",
        ],
        [10, 2, 1, 3, 1, 0.3, 1, 0.7, 8, 3, 2, 3, 0.2],
    )[0]
    if kind == "xadd":
        trim = rng.choice([[], [], ["MAXLEN", "=", rng.randint(2, 8)], ["MINID", "=", some[0]]])
        return ["XADD", key, *trim, "*", "f", rng.randint(0, 9), "g", "x"]
    if kind == "xdel":
        return ["XDEL", key, *some]
    if kind == "xtrim":
        return ["XTRIM", key, "MAXLEN", "=", rng.randint(1, 10)]
    if kind in ("create", "setid"):
        start = rng.choice(["$", "0", some[0]])
        read = rng.choice([[], [], ["ENTRIESREAD", rng.randint(-1, 12)]])
        if kind == "setid":
            return ["XGROUP", "SETID", key, group, start, *read]
        return ["XGROUP", "CREATE", key, group, start, *rng.choice([[], ["MKSTREAM"]]), *read]
    if kind == "destroy":
        return ["XGROUP", "DESTROY", key, group]
    if kind in ("createconsumer", "delconsumer"):
        return ["XGROUP", kind.upper(), key, group, consumer]
    if kind == "read":
        count = rng.choice([[], ["COUNT", rng.randint(1, 4)]])
        noack = rng.choice([[], [], ["NOACK"]])
        start = rng.choice([">", ">", ">", "0"])  # "0": the consumer's history
        return ["XREADGROUP", "GROUP", group, consumer, *count, *noack, "STREAMS", key, start]
    if kind == "claim":
        options: list[Any] = []
        for option in rng.sample(["IDLE", "TIME", "RETRYCOUNT", "FORCE", "JUSTID", "LASTID"], 3):
            if option == "IDLE":
                options += ["IDLE", rng.choice([0, 5000, 10**9])]
            elif option == "TIME":
                options += ["TIME", int(time.time() * 1000) - rng.randint(0, 10**6)]
            elif option == "RETRYCOUNT":
                options += ["RETRYCOUNT", rng.randint(0, 5)]
            elif option == "LASTID":
                options += ["LASTID", rng.choice(ids)]
            else:
                options.append(option)
        return ["XCLAIM", key, group, consumer, rng.choice([0, 0, 1000]), *some, *options]
    if kind == "autoclaim":
        count = rng.choice([[], ["COUNT", rng.randint(1, 3)]])
        justid = rng.choice([[], ["JUSTID"]])
        return ["XAUTOCLAIM", key, group, consumer, rng.choice([0, 10**7]), "0", *count, *justid]
    if kind == "ack":
        return ["XACK", key, group, *some]
    return ["XSETID", key, f"99999999999999-{rng.randint(0, 9)}"]


def _streams(raw: redis.Redis) -> dict[bytes, StreamState | None]:
    return {key: redis_stream(raw, key) for key in KEYS}


def _rdb_streams(path: Path) -> dict[bytes, StreamState | None]:
    found: dict[bytes, StreamState | None] = dict.fromkeys(KEYS)
    for item in read_rdb(path):
        if isinstance(item, RdbKey) and item.type == STREAM:
            found[item.key] = stream_state(complete_stream(item, str(path)))
    return found


def _imported(data: Path) -> dict[bytes, StreamState | None]:
    found: dict[bytes, StreamState | None] = dict.fromkeys(KEYS)
    for shard_dir in moonish.shard_dirs(data):
        with shard_writer(Path(shard_dir)) as writer:  # replays the shard's log
            for _, key, entry in writer.keyspace.items():
                assert entry.type == STREAM
                found[key] = stream_state(entry.value)
    return found


def _in_window(states: dict[bytes, StreamState | None], start_ms: int, end_ms: int) -> None:
    for state in states.values():
        for seen in split_times(state)[2]:
            assert start_ms <= seen <= end_ms, (seen, start_ms, end_ms)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _faithful(state: StreamState | None) -> Any:
    """What the AOF reproduces of a live stream: entries, counters, group names and last
    delivered IDs."""
    if state is None:
        return None
    entries, last, deleted, added, groups = state
    return entries, last, deleted, added, [(g[0], g[1]) for g in groups]


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_random_workload_imports_as_redis_loads_it(tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir, *AOF) as client:
        raw = raw_client(client)
        steps = 400
        for step in range(steps):
            if step == steps // 2:
                rewrite_aof(client)
            if rng.random() < 0.05:  # a transaction: MULTI/EXEC in the AOF
                commands = [_command(raw, rng) for _ in range(3)]
                pipe = raw.pipeline(transaction=True)
                for argv in commands:
                    pipe.execute_command(*argv)
                pipe.execute(raise_on_error=False)
                continue
            with contextlib.suppress(redis.ResponseError):  # refused: not propagated
                raw.execute_command(*_command(raw, rng))
        live = _streams(raw)
        raw.execute_command("SAVE")
        raw.close()
    shutil.move(workdir / "dump.rdb", tmp_path / "live.rdb")
    assert _rdb_streams(tmp_path / "live.rdb") == live
    assert sum(len(s[4]) for s in live.values() if s) > 0, "the workload made no groups"

    load_start = _now_ms()
    with redis_server(workdir, *AOF) as client:
        load_end = _now_ms()
        raw = raw_client(client)
        loaded = _streams(raw)
        raw.execute_command("SAVE")
        raw.close()
    assert _rdb_streams(workdir / "dump.rdb") == loaded
    _in_window(loaded, load_start, load_end)
    assert {k: _faithful(s) for k, s in loaded.items()} == {
        k: _faithful(s) for k, s in live.items()
    }

    for shards in (1, 3):
        start = _now_ms()
        report = import_aof(workdir / "appendonlydir", tmp_path / f"data-{shards}", shards)
        end = _now_ms()
        assert {"XCLAIM", "XGROUP", "XSETID"} <= set(report.per_command)
        ours = _imported(tmp_path / f"data-{shards}")
        _in_window(ours, start, end)
        for key in KEYS:
            bare, delivered, _ = split_times(ours[key])
            their_bare, their_delivered, _ = split_times(loaded[key])
            assert (bare, delivered) == (their_bare, their_delivered), (shards, key)


def test_approximate_trims_import_as_redis_wrote_them(tmp_path: Path) -> None:
    """``MAXLEN ~``/``MINID ~`` (with ``LIMIT``) trim whole nodes on the primary, which writes
    them as ``=`` with the count or ID it kept (``LIMIT`` stays): moonish accepts a LIMIT
    without ``~`` while loading (a client's is refused) and ends with Redis's entries."""
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir, *AOF, "--stream-node-max-entries", "10") as client:
        raw = raw_client(client)
        for i in range(1, 120):
            raw.execute_command("XADD", "s", f"{i}-0", "f", i)
        raw.execute_command("XADD", "s", "MAXLEN", "~", "55", "LIMIT", "20", "*", "f", "v")
        raw.execute_command("XTRIM", "s", "MINID", "~", "90", "LIMIT", "1000")
        raw.execute_command("XTRIM", "s", "MAXLEN", "~", "5")
        live = redis_stream(raw, b"s")
        raw.close()
    assert live is not None and 5 < len(live[0]) < 100  # trimmed, approximately
    import_aof(workdir / "appendonlydir", tmp_path / "data", 1)
    assert _imported(tmp_path / "data")[b"s"] == live
