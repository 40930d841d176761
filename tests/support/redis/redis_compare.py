"""The same commands on a redis-server and on a ShardWriter, compared after each: the same reply
(or error text), the same keyspace (type, value byte for byte, scores as doubles, expiry) in the
databases used, the ``c``/``u``/``d`` of each record matching the key's existence before and
after, and the same keyspace again after the log is replayed."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from hypothesis import HealthCheck

import moonish
from moonish.errors import CommandError
from moonish.state.shard import ShardWriter
from tests.support.servers.redis_server import comparable, redis_entry, shard_writer

DBS = (0, 1)


FAR = "4102444800000"  # 2100-01-01 in ms: an absolute expiry time both sides agree on


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
    server: redis.Redis,
    tmp_path: Path,
    commands: list[list[str | bytes]],
    *,
    redis_state: Callable[[redis.Redis], State] = _redis_state,
    our_state: Callable[[ShardWriter], State] = _our_state,
    same_state: Callable[[State, State, list[bytes]], None] = _equal_states,
) -> list[Any]:
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


RANDOM: dict[str, Any] = {
    "deadline": None,
    "suppress_health_check": [HealthCheck.function_scoped_fixture],
}
