"""moonish's keyspace against a real Redis: the same commands, the same state after each.

Every command goes to a redis-server on 127.0.0.1 and to a ShardWriter; afterwards each key
the command names must hold the same type, value and expiry in both, Redis must refuse exactly
the commands moonish refuses, and the c/u/d moonish logged must match the key's existence
before and after in Redis.
"""

from __future__ import annotations

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
from moonish.state.commands.execute import keys_of
from moonish.state.shard import ShardWriter
from moonish.values.model import _element_bytes as element_bytes
from tests.support.paths import ROOT
from tests.support.redis.command_strategy import COMMAND
from tests.support.servers.redis_server import (
    comparable,
    redis_entries,
    redis_server,
    redis_shapes,
    shape,
    shard_writer,
)

pytestmark = pytest.mark.redis

FIXTURES = ROOT / "fixtures" / "redis-aof"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[redis.Redis]:
    with redis_server(tmp_path_factory.mktemp("redis")) as client:
        yield client


def check_command(
    server: redis.Redis,
    writer: ShardWriter,
    db: int,
    argv: list[bytes],
    read_back: bool = True,
    deep: bool = True,
) -> None:
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


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(commands=st.lists(COMMAND, min_size=1, max_size=25))
def test_random_commands_match_redis(
    server: redis.Redis,
    tmp_path_factory: pytest.TempPathFactory,
    commands: list[tuple[bytes, ...]],
) -> None:
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
