"""Redis 7.4 hash-field expiry commands: HEXPIRE, HPEXPIRE, HEXPIREAT, HPEXPIREAT (with
``NX``/``XX``/``GT``/``LT``) and HPERSIST.

Source: Redis 7.4 ``t_hash.c`` (``hexpireGenericCommand``, ``hashTypeSetEx``,
``hpersistCommand``). Replies are one integer per field, in argument order:

- HEXPIRE family: ``-2`` no such field (or no such key), ``0`` the condition was not met,
  ``1`` the time was set, ``2`` the field was deleted (the time is at or before now; Redis
  propagates ``HDEL``; not while loading an AOF, when the time is set as given);
- HPERSIST: ``-2`` no such field (or its time has passed), ``-1`` the field has no time,
  ``1`` the time was removed.

The conditions: ``NX`` the field has no time; ``XX`` it has one; ``GT`` it has one and the new
time is later (no time counts as infinite); ``LT`` it has no time, or the new time is earlier.
A key the command changed gets one record (``u``, or ``d`` when past times deleted its last
field). Relative times (HEXPIRE, HPEXPIRE) are from the command's time, so replaying the
command at its commit time gives the same absolute times (Redis propagates HPEXPIREAT).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.fieldttl import HFE_MAX_ABS_TIME_MS, drop_fields, set_ttl
from moonish.state.keyspace import Access
from moonish.values.model import HASH, Entry

_UNITS = {
    b"HEXPIRE": (1000, False),
    b"HPEXPIRE": (1, False),
    b"HEXPIREAT": (1000, True),
    b"HPEXPIREAT": (1, True),
}
_CONDITIONS = (b"NX", b"XX", b"GT", b"LT")
_FIELDS_MISSING = "ERR Mandatory argument FIELDS is missing or not at the right position"
_NUMFIELDS_MISMATCH = "ERR The `numfields` parameter must match the number of arguments"


def _fields(argv: list[bytes], at: int, message: str) -> list[bytes]:
    """``FIELDS numfields field...`` with ``FIELDS`` at ``at - 1``: the fields.

    Raises:
        CommandError: no ``FIELDS`` there, a count below 1 or not an integer (``message``),
            or a count that is not the number of fields that follow.
    """
    if argv[at - 1].upper() != b"FIELDS":
        raise CommandError(_FIELDS_MISSING)
    count = parse.integer(argv[at], message)
    if count < 1:
        raise CommandError(message)
    if count != len(argv) - at - 1:
        raise CommandError(_NUMFIELDS_MISMATCH)
    return argv[at + 1 :]


def _field_result(entry: Entry, field: bytes, when: int, condition: bytes | None) -> int | None:
    """``hashTypeSetEx``'s checks for one field: -2 or 0, or ``None`` when it proceeds."""
    if field not in entry.value:
        return -2
    ttls = entry.field_expire_at_ms
    current = None if ttls is None else ttls.get(field)
    if current is None:
        return 0 if condition in (b"XX", b"GT") else None
    if (
        (condition == b"GT" and current >= when)
        or (condition == b"LT" and current <= when)
        or condition == b"NX"
    ):
        return 0
    return None


def cmd_hexpire(acc: Access, db: int, argv: list[bytes]) -> Any:
    """HEXPIRE / HPEXPIRE / HEXPIREAT / HPEXPIREAT ``key time [NX|XX|GT|LT] FIELDS n f...``.

    Checks in Redis's order: arity, ``WRONGTYPE``, the time (an integer, not negative, the
    absolute time at most ``HFE_MAX_ABS_TIME_MSEC``), the condition, ``FIELDS``, the count.
    While loading (a replica's stream, an AOF) the time may be up to 2^63 - 1 ms: Valkey 9
    accepts such times (and propagates HGETEX's as HPEXPIREAT); Redis never propagates one
    past its limit.

    Raises:
        CommandError: as Redis would (nothing changed).
    """
    parse.arity(argv, -6)
    name = argv[0].upper()
    unit, absolute = _UNITS[name]
    key = argv[1]
    entry = acc.get(db, key, HASH)
    when = parse.integer(argv[2])
    if when < 0:
        raise CommandError("ERR invalid expire time, must be >= 0")
    base = 0 if absolute else acc.now_ms
    limit = HFE_MAX_ABS_TIME_MS if acc.expire else parse.INT64_MAX  # loading: Valkey's limit
    if (unit == 1000 and when > limit // 1000) or (when * unit > limit - base):
        raise CommandError(f"ERR invalid expire time in '{name.decode().lower()}' command")
    when = when * unit + base
    condition = argv[3].upper() if argv[3].upper() in _CONDITIONS else None
    fields = _fields(
        argv, 5 if condition else 4, "ERR Parameter `numFields` should be greater than 0"
    )
    if entry is None:
        return [-2] * len(fields)
    replies, grew, noted = [], 0, None
    past = when <= acc.now_ms and acc.expire  # checkAlreadyExpired
    for field in fields:
        result = _field_result(entry, field, when, condition)
        if result is None:
            if past:
                grew += drop_fields(entry, [field])
                result = 2
            else:
                set_ttl(entry, field, when)
                noted, result = when, 1
        replies.append(result)
    if 2 in replies:
        acc.changed(db, key, entry, grew)  # removes the key when it lost its last field
    elif noted is not None:
        acc.fields_changed(db, key, entry, noted)
    return replies


def cmd_hpersist(acc: Access, db: int, argv: list[bytes]) -> Any:
    """HPERSIST ``key FIELDS n field...``: remove the fields' expiry times. A field whose time
    has passed counts as missing (-2) and keeps it, even while loading an AOF.

    Raises:
        CommandError: arity, ``WRONGTYPE``, ``FIELDS`` or the count, as Redis would.
    """
    parse.arity(argv, -5)
    key = argv[1]
    entry = acc.get(db, key, HASH)
    fields = _fields(argv, 3, "ERR Number of fields must be a positive integer")
    if entry is None:
        return [-2] * len(fields)
    replies, changed = [], False
    for field in fields:
        ttls = entry.field_expire_at_ms
        current = None if ttls is None else ttls.get(field)
        if field not in entry.value:
            replies.append(-2)
        elif current is None:
            replies.append(-1)
        elif current < acc.now_ms:
            replies.append(-2)
        else:
            set_ttl(entry, field, None)
            replies.append(1)
            changed = True
    if changed:
        acc.fields_changed(db, key, entry, None)
    return replies


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"HEXPIRE": (cmd_hexpire, [1]),
    b"HPEXPIRE": (cmd_hexpire, [1]),
    b"HEXPIREAT": (cmd_hexpire, [1]),
    b"HPEXPIREAT": (cmd_hexpire, [1]),
    b"HPERSIST": (cmd_hpersist, [1]),
}
