"""The records of expiry, and the active sweep (docs/images.md, "Expiry").

A key removed because it expired is a ``d`` record, ``source.command: "DEL"``, marked
``expired`` (Redis propagates ``DEL``); so is a live capture's ``DEL``/``UNLINK`` from the
master of a key whose time had passed (``ShardWriter.live_source``). Hash fields removed
because they expired (Redis 7.4) are one record per hash and occasion: ``u`` (``d`` when the
hash lost its last field), ``source.command: "HDEL"``, marked ``expired``, replayed as ``HDEL
key field...`` (Redis propagates one ``HDEL key field`` per field; t_hash.c
``propagateHashFieldDeletion``).
"""

from __future__ import annotations

from moonish.log.records import KvChange, Replay, ViewType
from moonish.state.config import StreamConfig
from moonish.state.fieldttl import due_fields, expire_fields, next_expiry
from moonish.state.keyspace import Keyspace
from moonish.values.model import Entry, full_image, key_image


def key_expiry_record(config: StreamConfig, db: int, key: bytes, entry: Entry) -> KvChange:
    """The ``d`` record, marked as an expiry, of a key removed because it expired."""
    before = b""
    if config.view is not ViewType.OFF:
        before = (
            full_image(db, key, entry, config.max_value_bytes)
            if config.old_images
            else key_image(db, key)
        )
    return KvChange(
        "d", db, b"DEL", key, before, b"", config.view, True, Replay.COMMAND, b"", (b"DEL", key)
    )


def field_expiry_record(
    config: StreamConfig,
    db: int,
    key: bytes,
    fields: list[bytes],
    before: bytes,
    after: bytes | None,
) -> KvChange:
    """The record, marked as an expiry, of hash fields removed because they expired:
    ``before``/``after`` are the hash's full images (made with the shard's limit; ``after``
    ``None`` when the hash went with its last field), kept per the view type."""
    view, only_key = config.view, b""
    if view is not ViewType.OFF and not (config.old_images and config.new_images):
        only_key = key_image(db, key)
    if view is ViewType.OFF:
        before = b""
    elif not config.old_images:
        before = only_key
    shown = b"" if after is None or view is ViewType.OFF else after
    if shown and not config.new_images:
        shown = only_key
    return KvChange(
        "u" if after is not None else "d",
        db,
        b"HDEL",
        key,
        before,
        shown,
        view,
        True,
        Replay.COMMAND,
        b"",
        (b"HDEL", key, *fields),
    )


def sweep(keyspace: Keyspace, config: StreamConfig, now_ms: int) -> list[KvChange]:
    """Remove every key whose expiry time is at or before ``now_ms``, then every hash field
    whose time is (Redis's active expire cycle, without its per-cycle quotas); returns their
    records, keys first, each group soonest first."""
    records = []
    for db, key in list(keyspace.due(now_ms)):
        entry = keyspace.get(db, key)
        if entry is not None:
            keyspace.remove(db, key)
            records.append(key_expiry_record(config, db, key, entry))
    for (db, key), entry in keyspace.fields_due(now_ms):
        fields = due_fields(entry, now_ms)
        before, after = expire_fields(entry, db, key, fields, config.max_value_bytes)
        if after is None:
            keyspace.remove(db, key)
        else:
            keyspace.note_field_expiry(db, key, next_expiry(entry))
        records.append(field_expiry_record(config, db, key, fields, before, after))
    return records
