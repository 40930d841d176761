"""Hash-field times for the Redis 7.4 and Valkey 9 tests, a hash as the server and as moonish hold
it (type, value, expire_at_ms, field times), the changes a ShardWriter logged at given LSNs, and
commands run on both sides and compared (:func:`run`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis

from moonish.errors import CommandError
from moonish.log.records import KvChange
from moonish.state.shard import ShardWriter
from moonish.values.model import HASH, Entry
from tests.support.servers.redis_server import shard_writer

PAST = "1000000000000"  # 2001: long gone


FAR = "4102444800000"  # 2100-01-01 in ms


LATER = "4102444900000"


SOONER = "4102444700000"


FAR_S = "4102444800"


def redis_hash(client: redis.Redis, key: bytes) -> Any:
    """(type, value, expire_at_ms, field times) of a key as Redis 7.4 (or Valkey 9) holds it."""
    kind = client.type(key).decode()
    if kind == "none":
        return None
    expire = client.pexpiretime(key)
    if kind != HASH:
        return (kind, None, expire, {})
    fields = client.hgetall(key)
    times = client.execute_command("HPEXPIRETIME", key, "FIELDS", len(fields), *fields)
    ttls = {f: t for f, t in zip(fields, times, strict=True) if t >= 0}
    return (kind, fields, expire, ttls)


def our_hash(entry: Entry | None) -> Any:
    if entry is None:
        return None
    expire = -1 if entry.expire_at_ms is None else entry.expire_at_ms
    if entry.type != HASH:
        return (entry.type, None, expire, {})
    return (HASH, dict(entry.value), expire, entry.field_expire_at_ms or {})


def changes_at(writer: ShardWriter, lsns: list[int]) -> list[KvChange]:
    from moonish.log.payloads import decode_payload
    from moonish.log.reader import ShardReader

    if not lsns:
        return []
    writer.sync()
    reader = ShardReader(writer.shard_dir)
    try:
        reader.seek(lsns[0])
        frames = reader.poll(len(lsns))
    finally:
        reader.close()
    out = [decode_payload(frame.record_type, frame.payload) for frame in frames]
    return [record for record in out if isinstance(record, KvChange)]


def run(server: redis.Redis, tmp_path: Path, commands: list[list[str]]) -> list[Any]:
    """Each command on the server (Redis 7.4, Valkey 9) and on a ShardWriter: the same reply
    (or error text), the same state of its key afterwards, and ``c``/``u``/``d`` matching the
    key's existence."""
    server.flushall()
    replies = []
    with shard_writer(tmp_path / "shard") as writer:
        for argv in commands:
            key = argv[1].encode() if len(argv) > 1 else b""
            existed = bool(server.exists(key)) if key else False
            try:
                theirs = server.execute_command(*argv)
            except redis.ResponseError as exc:
                theirs = exc
            try:
                result = writer.execute(0, argv)
            except CommandError as exc:
                assert isinstance(theirs, redis.ResponseError), (argv, exc.message, theirs)
                assert exc.message.removeprefix("ERR ") == str(theirs), (argv, exc.message)
                replies.append(exc.message)
                continue
            assert not isinstance(theirs, redis.ResponseError), (argv, theirs)
            ours = result.reply
            if isinstance(ours, list):
                assert ours == theirs, (argv, ours, theirs)
            elif isinstance(ours, int) and isinstance(theirs, bool):
                assert ours == int(theirs), argv
            elif isinstance(ours, bytes) and isinstance(theirs, bool):
                assert ours == b"OK" and theirs, argv
            elif isinstance(theirs, float):  # redis-py parses HINCRBYFLOAT's reply
                assert float(ours) == theirs, (argv, ours, theirs)
            else:
                assert str(ours).encode() == theirs or ours == theirs, (argv, ours, theirs)
            replies.append(ours)
            for name in {key, *(a.encode() for a in argv[2:3] if argv[0] in ("COPY", "RENAME"))}:
                assert our_hash(writer.keyspace.get(0, name)) == redis_hash(server, name), argv
            exists = writer.keyspace.get(0, key) is not None
            ops = [c.op for c in changes_at(writer, result.lsns) if c.key == key and not c.expired]
            if existed != exists:
                assert ops == ["c" if exists else "d"], (argv, ops)
            elif ops:
                assert ops == ["u"] and exists, (argv, ops)
    return replies
