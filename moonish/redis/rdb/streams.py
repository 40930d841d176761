"""A stream key read from an RDB file as a complete moonish
:class:`~moonish.values.streams.Stream`.

:mod:`moonish.redis.rdb.reader` yields a stream key's entries and last ID as ``RdbKey.value``
and the rest (counters, consumer groups, pending entries, consumers) as ``RdbKey.stream``
(:class:`~moonish.redis.rdb.values.RdbStreamMeta`). :func:`complete_stream` joins them the
way Redis 7.0 loads them (``rdbLoadObject`` in src/rdb.c):

- RDB stream types 19 and 21 (Redis 7.0+) carry ``entries_added``, ``max_deleted_entry_id``
  and each group's ``entries_read`` (-1: unknown); they are kept as stored.
- Type 15 (Redis 5 to 6.2) carries none of them: ``entries_added`` becomes the stream's length,
  ``max_deleted_id`` 0-0, and each group's ``entries_read`` Redis's estimate for its last
  delivered ID (``streamEstimateDistanceFromFirstEverEntry``), as Redis migrates them.
- Type 21's consumer ``active-time`` (Redis 7.2) is dropped: moonish keeps Redis 7.0's fields.
- The stored first ID is not kept: moonish derives it from the entries (Redis's always equals
  the first entry's ID, or 0-0).

Example::

    for item in read_rdb("dump.rdb"):
        if isinstance(item, RdbKey) and item.type == STREAM:
            entry = Entry(STREAM, complete_stream(item, "dump.rdb"), item.expire_at_ms)
"""

from __future__ import annotations

from moonish.redis.rdb.reader import RdbCorruptionError, RdbKey
from moonish.values.streams import INVALID_ENTRIES_READ, ConsumerGroup, PendingEntry, Stream


def complete_stream(key: RdbKey, path: str) -> Stream:
    """The whole stream of a stream ``key`` read from the RDB file at ``path`` (module
    docstring). The entries are shared with ``key.value``, not copied.

    Raises:
        ValueError: ``key`` is not a stream key (no ``stream`` metadata).
        RdbCorruptionError: a pending entry that no consumer owns (Redis refuses it under
            ``sanitize-dump-payload`` and cannot show it otherwise); path, the key's offset
            and the key in the error.
    """
    meta = key.stream
    if meta is None or not isinstance(key.value, Stream):
        raise ValueError(f"key {key.key!r} is not a stream read from an RDB file")
    stream = Stream()
    stream.entries, stream.last_id = key.value.entries, key.value.last_id
    migrated = meta.entries_added is None
    if meta.entries_added is None or meta.max_deleted_id is None:  # RDB type 15
        stream.entries_added = len(stream.entries)
    else:
        stream.entries_added, stream.max_deleted_id = meta.entries_added, meta.max_deleted_id
    for rdb_group in meta.groups:
        if migrated:
            entries_read = stream.estimate_entries_read(rdb_group.last_id)
        elif rdb_group.entries_read is None:
            entries_read = INVALID_ENTRIES_READ
        else:
            entries_read = rdb_group.entries_read
        group = ConsumerGroup(rdb_group.last_id, entries_read)
        for consumer in rdb_group.consumers:
            group.consumers[consumer.name] = consumer.seen_time_ms
        for pending in rdb_group.pending:
            if pending.consumer is None:
                raise RdbCorruptionError(
                    f"stream group {rdb_group.name!r}: pending entry {pending.id} has no consumer",
                    path=path,
                    offset=key.offset,
                    key=key.key,
                )
            group.pending[pending.id] = PendingEntry(
                pending.consumer, pending.delivery_time_ms, pending.delivery_count
            )
        stream.groups[rdb_group.name] = group
    return stream
