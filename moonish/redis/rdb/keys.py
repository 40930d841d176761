"""Keys read from an RDB file (moonish.redis.rdb.reader.RdbKey) as keyspace entries
(moonish.values.model.Entry).

Hashes (:func:`hash_entry`): a Redis 7.4 hash's field expiry times come with it, all of them,
those already past included: Redis 7.4 loads them as they are (``rdb.c``, ``rdbLoadObject``,
``RDB_TYPE_HASH_METADATA`` / ``RDB_TYPE_HASH_LISTPACK_EX``) and its active expiry removes
them afterwards, as moonish's sweep does (each removal an ``HDEL`` record).
"""

from __future__ import annotations

from moonish.errors import InvalidArgumentError
from moonish.redis.rdb.reader import RdbKey
from moonish.values.model import HASH, Entry


def hash_entry(item: RdbKey) -> Entry:
    """The entry of a hash key read from an RDB file, with its field expiry times.

    ``item.value`` is taken as it is (not copied); times for fields the hash does not hold
    are an error.

    Raises:
        InvalidArgumentError: ``item`` is not a hash, or has times for fields it does not
            hold (the RDB reader never yields such a key); the offset is the key's.
    """
    if item.type != HASH:
        raise InvalidArgumentError(
            f"key {item.key!r} is a {item.type}, not a hash", offset=item.offset
        )
    ttls = item.field_expire_at_ms
    if ttls and not ttls.keys() <= item.value.keys():
        raise InvalidArgumentError(
            f"hash {item.key!r} has expiry times for fields it does not hold", offset=item.offset
        )
    return Entry(HASH, item.value, item.expire_at_ms, dict(ttls) if ttls else None)
