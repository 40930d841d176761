"""What a redis-server writing an AOF propagates for the cases of
tests/state/commands/test_{bitmaps_and_hyperloglogs,set_stores,geo}_match_redis.py, imported
into 3 shards, holds exactly the keyspace of a redis-server that loads the same AOF."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import redis

import moonish
from moonish.redis.aof.importer import import_aof
from tests.state.commands.test_bitmaps_and_hyperloglogs_match_redis import HLL_CASES, STRING_CASES
from tests.state.commands.test_geo_match_redis import GEO_CASES
from tests.state.commands.test_set_stores_match_redis import SET_CASES, SORT_CASES, ZSET_CASES
from tests.support.servers.redis_server import comparable, redis_entry, redis_server, shard_writer

pytestmark = pytest.mark.redis


def test_redis_aof_of_these_commands_imports_to_redis_keyspace(tmp_path: Path) -> None:
    """Every case of those modules sent to a redis-server writing an AOF (what Redis propagates for
    them, errors included; each case in a db of its own, then a SWAPDB); the AOF imported
    into 3 shards holds exactly the keyspace of a redis-server that loads the same AOF. (Not
    always the writer's: a BITFIELD whose every write fails creates a zero string that Redis
    does not propagate.)"""
    cases = [
        *STRING_CASES.values(),
        *SET_CASES.values(),
        *ZSET_CASES.values(),
        *SORT_CASES.values(),
        *HLL_CASES.values(),
        *GEO_CASES.values(),
    ]
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
        "SETRANGE",
        "SETBIT",
        "BITOP",
        "BITFIELD",
        "SINTERSTORE",
        "SUNIONSTORE",
        "SDIFFSTORE",
        "ZREMRANGEBYSCORE",
        "ZREMRANGEBYRANK",
        "ZREMRANGEBYLEX",
        "ZRANGESTORE",
        "ZUNIONSTORE",
        "ZINTERSTORE",
        "ZDIFFSTORE",
        "SORT",
        "PFADD",
        "PFCOUNT",
        "PFMERGE",
        "SWAPDB",
        "GEORADIUS",
        "GEORADIUSBYMEMBER",
        "GEOSEARCHSTORE",
    }
    ours = {}
    for shard_dir in moonish.shard_dirs(tmp_path / "data"):
        with shard_writer(Path(shard_dir)) as writer:
            ours.update({(db, k): comparable(e) for db, k, e in writer.keyspace.items()})
    assert len(theirs) > 50
    assert ours == theirs
