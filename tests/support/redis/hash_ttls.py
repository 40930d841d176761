"""Hash-field times for the Redis 7.4 tests, a hash as Redis 7.4 and as moonish hold it (type,
value, expire_at_ms, field times), and the changes a ShardWriter logged at given LSNs."""

from __future__ import annotations

from typing import Any

import redis

from moonish.log.records import KvChange
from moonish.state.shard import ShardWriter
from moonish.values.model import HASH, Entry

PAST = "1000000000000"  # 2001: long gone


FAR = "4102444800000"  # 2100-01-01 in ms


LATER = "4102444900000"


SOONER = "4102444700000"


FAR_S = "4102444800"


def redis_hash(client: redis.Redis, key: bytes) -> Any:
    """(type, value, expire_at_ms, field times) of a key as Redis 7.4 holds it."""
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
