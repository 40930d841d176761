"""Redis's default AOF (an RDB base file) from a real redis-server: reruns add only what is new,
also after BGREWRITEAOF removed the files the stored positions name; the base file's keys are
snapshot rows."""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish
from moonish.cdc import shard_read
from moonish.redis.aof.importer import import_aof
from tests.support.redis.aof import DEFAULT_AOF, INCR, our_state, records, redis_state, workload
from tests.support.servers.redis_server import redis_server, rewrite_aof

pytestmark = pytest.mark.redis


def test_redis_default_aof_imports_and_reruns_add_only_what_is_new(
    tmp_path: Path, workdir: Path
) -> None:
    """Redis's own defaults: the AOF has an RDB base file. An import, then Redis writes more
    and a rerun adds only that; then BGREWRITEAOF removes the files the positions name, Redis
    writes and deletes more, and a rerun gives each shard only the differences."""
    rng = random.Random(11)
    data = tmp_path / "data"
    with redis_server(workdir, *DEFAULT_AOF) as client:
        workload(client, rng, 400)
        first = import_aof(workdir / "appendonlydir", data, 3)
        assert first.files[0].endswith(".base.rdb") and first.rdb_keys == 0
        assert our_state(data) == redis_state(client)
        again = import_aof(workdir / "appendonlydir", data, 3)
        assert again.records == 0
        workload(client, rng, 200)
        more = import_aof(workdir / "appendonlydir", data, 3)
        assert 0 < more.commands <= 200 + 3 * 200  # MULTI/EXEC blocks hold 3
        assert our_state(data) == redis_state(client)
        before = records(data)
        rewrite_aof(client)
        while (workdir / "appendonlydir" / INCR).exists():  # removed in the background
            time.sleep(0.02)
        client.set("{k1}:new", "v")
        client.delete("{k2}:l", "{k3}:l")
        gone = {b"{k2}:l", b"{k3}:l"}
        resync = import_aof(workdir / "appendonlydir", data, 3)
        assert resync.resynced
        assert our_state(data) == redis_state(client)
        after = records(data)
    added = [
        change for shard, old in zip(after, before, strict=True) for change in shard[len(old) :]
    ]
    assert ("c", "{k1}:new", added[[c[1] for c in added].index("{k1}:new")][2]) in added
    deleted = {key.encode() for op, key, _ in added if op == "d"}
    assert deleted == gone & {key for (_, key) in our_state_keys(before)}
    assert len(added) == 1 + len(deleted)  # nothing else changed: nothing else written


def our_state_keys(shards: list[list[tuple[str, str, Any]]]) -> set[tuple[int, bytes]]:
    live: set[tuple[int, bytes]] = set()
    for shard in shards:
        for op, key, _ in shard:
            (live.discard if op == "d" else live.add)((0, key.encode()))
    return live


def test_rdb_base_keys_are_snapshot_rows(tmp_path: Path, workdir: Path) -> None:
    with redis_server(workdir, *DEFAULT_AOF) as client:
        workload(client, random.Random(5), 300)
        rewrite_aof(client)
        client.set("after-rewrite", "1")
        report = import_aof(workdir / "appendonlydir", tmp_path / "data", 2)
        assert our_state(tmp_path / "data") == redis_state(client)
    assert report.rdb_keys == len(our_state(tmp_path / "data")) - 1
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        events = [orjson.loads(e.envelope) for e in shard_read.tail(shard_dir)]
        rows = [e for e in events if e["op"] == "r"]
        assert rows and all(e["before"] is None and e["after"] for e in rows)
        assert rows == events[: len(rows)]  # the base first, then the AOF's commands
        marks = [e["source"]["snapshot"] for e in rows]
        assert marks[0] == "first" and marks[-1] == "last" and set(marks[1:-1]) <= {"true"}
        assert all(e["source"]["snapshot"] == "false" for e in events[len(rows) :])
