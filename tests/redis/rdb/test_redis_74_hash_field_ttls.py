"""An RDB file a real Redis 7.4 saved with hashes with field TTLs (``RDB_TYPE_HASH_LISTPACK_EX``,
``RDB_TYPE_HASH_METADATA``) gives the entries Redis holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonish.errors import InvalidArgumentError
from moonish.redis.rdb.keys import hash_entry
from moonish.redis.rdb.reader import RdbKey, read_rdb
from tests.support.redis.hash_ttls import FAR, LATER, our_hash, redis_hash
from tests.support.servers.redis_server import redis74_binary, redis_server

pytestmark = pytest.mark.redis


def test_rdb_of_redis_74_hashes_with_field_ttls(tmp_path: Path) -> None:
    """Redis 7.4 saves small hashes with times as ``RDB_TYPE_HASH_LISTPACK_EX`` and large ones
    as ``RDB_TYPE_HASH_METADATA``: :func:`hash_entry` gives the entries Redis holds."""
    workdir = tmp_path / "redis"
    workdir.mkdir()
    with redis_server(workdir, binary=redis74_binary()) as client:
        client.hset("small", mapping={"a": "1", "b": "2", "c": "3"})
        client.execute_command("HPEXPIREAT", "small", FAR, "FIELDS", "2", "a", "c")
        client.hset("large", mapping={f"f{i}": f"v{i}" * 20 for i in range(300)})
        client.execute_command("HPEXPIREAT", "large", LATER, "FIELDS", "2", "f7", "f9")
        client.execute_command("HPEXPIREAT", "large", FAR, "FIELDS", "1", "f8")
        client.hset("plain", "a", "1")
        client.set("s", "x")
        client.pexpireat("small", int(LATER))
        client.save()
        theirs = {key: redis_hash(client, key) for key in (b"small", b"large", b"plain")}
    items = {i.key: i for i in read_rdb(workdir / "dump.rdb") if isinstance(i, RdbKey)}
    for key, state in theirs.items():
        entry = hash_entry(items[key])
        assert our_hash(entry) == state, key
    assert hash_entry(items[b"plain"]).field_expire_at_ms is None
    with pytest.raises(InvalidArgumentError, match="is a string, not a hash"):
        hash_entry(items[b"s"])
    bad = RdbKey(0, b"h", "hash", {b"a": b"1"}, None, 9, field_expire_at_ms={b"b": 5})
    with pytest.raises(InvalidArgumentError, match="fields it does not hold") as info:
        hash_entry(bad)
    assert info.value.offset == 9
