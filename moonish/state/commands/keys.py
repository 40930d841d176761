"""Key commands: DEL, UNLINK, RENAME, RENAMENX, COPY, EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT,
PERSIST, FLUSHDB, FLUSHALL, MOVE, SWAPDB (semantics of Redis 7.0, redis.io/commands)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.log.records import MAX_DB
from moonish.state.commands import parse
from moonish.state.keyspace import Access
from moonish.values.model import STREAM, Entry


def cmd_del(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -2)
    removed = 0
    for key in argv[1:]:
        if acc.get(db, key) is not None:
            acc.remove(db, key)
            removed += 1
    return removed


def clone(entry: Entry) -> Entry:
    """A deep copy of an entry (COPY, and moving a value to another key)."""
    value = entry.value.copy() if entry.type == STREAM else copy.copy(entry.value)
    ttls = entry.field_expire_at_ms  # a hash's field times go with it (hashTypeDup)
    return Entry(entry.type, value, entry.expire_at_ms, None if ttls is None else dict(ttls))


def cmd_rename(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 3)
    source, destination = argv[1], argv[2]
    entry = acc.get(db, source)
    if entry is None:
        raise CommandError("ERR no such key")
    nx = argv[0].upper() == b"RENAMENX"
    if source == destination:
        return 0 if nx else b"OK"
    if nx and acc.get(db, destination) is not None:
        return 0
    acc.remove(db, source)
    acc.put(db, destination, entry)
    return 1 if nx else b"OK"


def cmd_copy(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    source, destination = argv[1], argv[2]
    target_db, replace, i = db, False, 3
    while i < len(argv):
        option = argv[i].upper()
        if option == b"REPLACE":
            replace = True
        elif option == b"DB" and i + 1 < len(argv):
            i += 1
            target_db = parse.integer(argv[i], "ERR value is not an integer or out of range")
            if target_db < 0:
                raise CommandError("ERR DB index is out of range")
        else:
            raise CommandError(parse.SYNTAX)
        i += 1
    if source == destination and db == target_db:
        raise CommandError("ERR source and destination objects are the same")
    entry = acc.get(db, source)
    if entry is None:
        return 0
    if acc.get(target_db, destination) is not None and not replace:
        return 0
    acc.put(target_db, destination, clone(entry))
    return 1


_EXPIRE_UNITS = {
    b"EXPIRE": (1000, False),
    b"PEXPIRE": (1, False),
    b"EXPIREAT": (1000, True),
    b"PEXPIREAT": (1, True),
}


def cmd_expire(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    name = argv[0].upper()
    unit, absolute = _EXPIRE_UNITS[name]
    amount = parse.integer(argv[2])
    flags = {flag.upper() for flag in argv[3:]}
    if not flags <= {b"NX", b"XX", b"GT", b"LT"} or len(flags) != len(argv) - 3:
        raise CommandError(f"ERR Unsupported option {argv[3].decode(errors='replace')}")
    if b"NX" in flags and flags & {b"XX", b"GT", b"LT"}:
        raise CommandError("ERR NX and XX, GT or LT options at the same time are not compatible")
    if {b"GT", b"LT"} <= flags:
        raise CommandError("ERR GT and LT options at the same time are not compatible")
    when = amount * unit + (0 if absolute else acc.now_ms)
    if not parse.INT64_MIN <= when <= parse.INT64_MAX:
        raise CommandError(f"ERR invalid expire time in '{name.decode().lower()}' command")
    entry = acc.get(db, argv[1])
    if entry is None:
        return 0
    current = entry.expire_at_ms
    if (
        (b"NX" in flags and current is not None)
        or (b"XX" in flags and current is None)
        or (b"GT" in flags and (current is None or when <= current))
        or (b"LT" in flags and current is not None and when >= current)
    ):
        return 0
    if when <= acc.now_ms and acc.expire:  # loading an AOF keeps it until the sweep
        acc.remove(db, argv[1])
    else:
        acc.set_expiry(db, argv[1], entry, when)
    return 1


def cmd_persist(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 2)
    entry = acc.get(db, argv[1])
    if entry is None or entry.expire_at_ms is None:
        return 0
    acc.set_expiry(db, argv[1], entry, None)
    return 1


def cmd_flush(acc: Access, db: int, argv: list[bytes]) -> Any:
    if len(argv) > 2 or (len(argv) == 2 and argv[1].upper() not in (b"ASYNC", b"SYNC")):
        raise CommandError(parse.SYNTAX)
    for key_db, key in acc.keys(db if argv[0].upper() == b"FLUSHDB" else None):
        if acc.get(key_db, key) is not None:
            acc.remove(key_db, key)
    return b"OK"


def _db_index(value: bytes, message: str | None = None) -> int:
    """``getIntFromObjectOrReply`` then ``selectDb``'s check. Redis refuses indexes from its
    ``databases`` setting on (16 by default), which moonish does not know: it refuses what
    its records cannot hold (above ``MAX_DB``)."""
    number = parse.integer(value, message or parse.NOT_INTEGER)
    if not -(2**31) <= number < 2**31:
        raise CommandError(
            message or "ERR value is out of range, value must between -2147483648 and 2147483647"
        )
    if not 0 <= number <= MAX_DB:
        raise CommandError("ERR DB index is out of range")
    return number


def cmd_move(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 3)
    target = _db_index(argv[2])
    if target == db:
        raise CommandError("ERR source and destination objects are the same")
    entry = acc.get(db, argv[1])
    if entry is None or acc.get(target, argv[1]) is not None:
        return 0
    acc.remove(db, argv[1])
    acc.put(target, argv[1], entry)
    return 1


def cmd_swapdb(acc: Access, db: int, argv: list[bytes]) -> Any:
    """Swaps two databases: a change for every key of both (each key's new value in each)."""
    parse.arity(argv, 3)
    first = _db_index(argv[1], "ERR invalid first DB index")
    second = _db_index(argv[2], "ERR invalid second DB index")
    if first == second:
        return b"OK"
    keys = {key: None for _, key in acc.keys(first) + acc.keys(second)}
    held = [(key, acc.get(first, key), acc.get(second, key)) for key in keys]
    for key, in_first, in_second in held:
        for number, old, new in ((first, in_first, in_second), (second, in_second, in_first)):
            if new is not None:
                acc.put(number, key, new)
            elif old is not None:
                acc.remove(number, key)
    return b"OK"


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"DEL": (cmd_del, "all"),
    b"UNLINK": (cmd_del, "all"),
    b"RENAME": (cmd_rename, [1, 2]),
    b"RENAMENX": (cmd_rename, [1, 2]),
    b"COPY": (cmd_copy, [1, 2]),
    b"EXPIRE": (cmd_expire, [1]),
    b"PEXPIRE": (cmd_expire, [1]),
    b"EXPIREAT": (cmd_expire, [1]),
    b"PEXPIREAT": (cmd_expire, [1]),
    b"PERSIST": (cmd_persist, [1]),
    b"FLUSHDB": (cmd_flush, []),
    b"FLUSHALL": (cmd_flush, []),
    b"MOVE": (cmd_move, [1]),
    b"SWAPDB": (cmd_swapdb, []),
}
