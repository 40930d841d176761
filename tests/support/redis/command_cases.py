"""One case per write command (the tests of tests/state/commands/test_*_commands.py): the
reply, the c/u/d of each key it wrote, and the key's value afterwards, pinned down without a
redis-server (semantics of Redis 7.0; tests/state/test_keyspace_matches_redis.py checks them
against a real one)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

import moonish
from moonish.clock import FixedClock
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import _element_bytes
from tests.support.servers.redis_server import comparable
from tests.support.wal import START_US

NOW_MS = START_US // 1000
INF = float("inf")

Case = tuple[list[list[str]], list[str], Any, list[tuple[str, str]], str, Any]
"""(setup commands, the command, its reply, [(key, op)] logged, key to inspect, its
comparable() value: (type, value, expire_at_ms) or None)."""


def run_case(shard: Path, name: str, case: Case) -> None:
    """The case's setup, then its command, on a new shard: the reply, the key's value (and its
    size kept exact) and the changes logged."""
    setup, command, reply, logged, key, value = case
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
