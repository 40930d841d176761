"""Redis 7.4 hash-field expiry on moonish's hash entries (``Entry.field_expire_at_ms``).

Source: Redis 7.4 ``t_hash.c`` (``hashTypeSetEx``, ``hashTypeGetValue``, ``hashTypeSet``,
``listpackExExpire``) and ``ebuckets.c``. Redis decides "expired" three ways, kept here:

- on access (lazy, :func:`is_expired`): a field whose time is *before* the command's time
  (``hfieldIsExpired``: ``expire < now``); only HINCRBY, HINCRBYFLOAT, HSETNX and SORT's
  ``BY``/``GET key->field`` look a field up this way among the write commands; HSET, HDEL and
  the HEXPIRE family do not (an expired field still there is overwritten, deleted or given a
  new time as if it were live);
- by the active sweep (:func:`due_fields`): a time at or before now (``ebExpire``,
  ``listpackExExpire``: ``expire <= now``);
- a time given to HPEXPIREAT at or before now deletes the field at once
  (``checkAlreadyExpired``), except while loading an AOF.

Every field removed because it expired is propagated by Redis as ``HDEL key field``; the last
field's removal deletes the key (no ``DEL`` is propagated: the replica's ``HDEL`` does it).
"""

from __future__ import annotations

from moonish.values.model import Entry, full_image

HFE_MAX_ABS_TIME_MS = 0xFFFF_FFFF_FFFF >> 2
"""The largest field expiry time a command may set (``HFE_MAX_ABS_TIME_MSEC``:
``EB_EXPIRE_TIME_MAX >> 2``), ms since the Unix epoch."""


def set_ttl(entry: Entry, field: bytes, expire_at_ms: int | None) -> None:
    """Give ``field`` (which the hash holds) an expiry time, or remove it with ``None``."""
    ttls = entry.field_expire_at_ms
    if expire_at_ms is not None:
        if ttls is None:
            ttls = entry.field_expire_at_ms = {}
        ttls[field] = expire_at_ms
    elif ttls is not None:
        ttls.pop(field, None)
        if not ttls:
            entry.field_expire_at_ms = None


def clear_ttls(entry: Entry, fields: list[bytes] | dict[bytes, bytes]) -> None:
    """Forget the expiry times of ``fields`` (HSET overwrote them, HDEL removed them)."""
    ttls = entry.field_expire_at_ms
    if ttls is not None:
        for field in fields:
            ttls.pop(field, None)
        if not ttls:
            entry.field_expire_at_ms = None


def is_expired(entry: Entry, field: bytes, now_ms: int) -> bool:
    """Whether a lookup at ``now_ms`` finds ``field`` expired (``expire < now``)."""
    ttls = entry.field_expire_at_ms
    if ttls is None:
        return False
    at = ttls.get(field)
    return at is not None and at < now_ms


def due_fields(entry: Entry, now_ms: int) -> list[bytes]:
    """The fields the active sweep removes at ``now_ms`` (time at or before it), soonest
    first (equal times: in the order their times were set)."""
    ttls = entry.field_expire_at_ms
    if ttls is None:
        return []
    due = [(at, field) for field, at in ttls.items() if at <= now_ms]
    due.sort(key=lambda pair: pair[0])
    return [field for _, field in due]


def next_expiry(entry: Entry) -> int | None:
    """The soonest field expiry time of a hash, or ``None``."""
    ttls = entry.field_expire_at_ms
    return None if ttls is None else min(ttls.values())


def drop_fields(entry: Entry, fields: list[bytes]) -> int:
    """Remove ``fields`` (which the hash holds) and their times; returns by how many bytes
    the hash's elements grew (negative: see ``Entry.nbytes``)."""
    value, grew = entry.value, 0
    for field in fields:
        grew -= len(field) + len(value.pop(field))
    clear_ttls(entry, fields)
    return grew


def expire_fields(
    entry: Entry, db: int, key: bytes, fields: list[bytes], max_value_bytes: int | None
) -> tuple[bytes, bytes | None]:
    """Remove expired ``fields`` from a hash; returns its images before and after (``None``:
    the hash is now empty, and the caller removes the key)."""
    before = full_image(db, key, entry, max_value_bytes)
    grew = drop_fields(entry, fields)
    entry.stale()
    if entry.nbytes is not None:
        entry.nbytes += grew
    if not entry.value:
        return before, None
    return before, full_image(db, key, entry, max_value_bytes)
