"""String commands: SET (all options), SETNX, SETEX, PSETEX, GETSET, GETDEL, APPEND, INCR,
DECR, INCRBY, DECRBY, INCRBYFLOAT, MSET, MSETNX (semantics of Redis 7.0, redis.io/commands)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.keyspace import Access
from moonish.values.model import STRING, Entry

_EXPIRE_OPTIONS: Final = {b"EX": 1000, b"PX": 1, b"EXAT": 1000, b"PXAT": 1}


def _write(acc: Access, db: int, key: bytes, value: bytes, expire_at_ms: int | None) -> None:
    """Set a string; an expiry time already past removes the key (Redis propagates a DEL)."""
    if expire_at_ms is not None and expire_at_ms <= acc.now_ms and acc.expire:
        if acc.get(db, key) is not None:
            acc.remove(db, key)
        return
    acc.put_string(db, key, value, expire_at_ms)


def _expire_at(acc: Access, option: bytes, amount: bytes, command: str) -> int:
    number = parse.integer(amount)
    if number <= 0:
        raise CommandError(f"ERR invalid expire time in '{command}' command")
    unit = _EXPIRE_OPTIONS[option]
    at = number * unit if option.endswith(b"AT") else acc.now_ms + number * unit
    if at > parse.INT64_MAX:
        raise CommandError(f"ERR invalid expire time in '{command}' command")
    return at


def cmd_set(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    key, value = argv[1], argv[2]
    condition = None
    get = keepttl = False
    expire_at: int | None = None
    i = 3
    while i < len(argv):
        option = argv[i].upper()
        if option in (b"NX", b"XX") and condition is None:
            condition = option
        elif option == b"GET" and not get:
            get = True
        elif option == b"KEEPTTL" and not keepttl and expire_at is None:
            keepttl = True
        elif option in _EXPIRE_OPTIONS and expire_at is None and not keepttl and i + 1 < len(argv):
            i += 1
            expire_at = _expire_at(acc, option, argv[i], "set")
        else:
            raise CommandError(parse.SYNTAX)
        i += 1
    current = acc.get(db, key, STRING if get else None)
    old = current.value if get and current is not None else None
    if (condition == b"NX" and current is not None) or (condition == b"XX" and current is None):
        return old if get else None
    if keepttl and current is not None:
        expire_at = current.expire_at_ms
    _write(acc, db, key, value, expire_at)
    return old if get else b"OK"


def cmd_setnx(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 3)
    if acc.get(db, argv[1]) is not None:
        return 0
    acc.put(db, argv[1], Entry(STRING, argv[2]))
    return 1


def cmd_setex(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    option = b"EX" if argv[0].upper() == b"SETEX" else b"PX"
    at = _expire_at(acc, option, argv[2], argv[0].decode(errors="replace").lower())
    _write(acc, db, argv[1], argv[3], at)
    return b"OK"


def cmd_getset(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 3)
    current = acc.get(db, argv[1], STRING)
    acc.put(db, argv[1], Entry(STRING, argv[2]))
    return None if current is None else current.value


def cmd_getdel(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 2)
    current = acc.get(db, argv[1], STRING)
    if current is None:
        return None
    acc.remove(db, argv[1])
    return current.value


def cmd_append(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 3)
    current = acc.get(db, argv[1], STRING)
    if current is None:
        acc.put(db, argv[1], Entry(STRING, argv[2]))
        return len(argv[2])
    current.value += argv[2]
    acc.changed(db, argv[1], current)
    return len(current.value)


def _incr(acc: Access, db: int, key: bytes, increment: int) -> int:
    current = acc.get(db, key, STRING)
    base = 0 if current is None else parse.integer(current.value)
    total = parse.add_int(base, increment)
    if current is None:
        acc.put(db, key, Entry(STRING, b"%d" % total))
    else:
        current.value = b"%d" % total
        acc.changed(db, key, current)
    return total


def cmd_incr(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 2)
    return _incr(acc, db, argv[1], 1 if argv[0].upper() == b"INCR" else -1)


def cmd_incrby(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 3)
    amount = parse.integer(argv[2])
    if argv[0].upper() == b"DECRBY":
        if amount == parse.INT64_MIN:
            raise CommandError("ERR decrement would overflow")
        amount = -amount
    return _incr(acc, db, argv[1], amount)


def cmd_incrbyfloat(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 3)
    current = acc.get(db, argv[1], STRING)
    increment = parse.decimal(argv[2])
    base = parse.decimal(current.value) if current is not None else parse.decimal(b"0")
    value = parse.add_decimal(base, increment)
    if current is None:
        acc.put(db, argv[1], Entry(STRING, value))
    else:
        current.value = value
        acc.changed(db, argv[1], current)
    return value


def cmd_mset(acc: Access, db: int, argv: list[bytes]) -> Any:
    count = len(argv)
    if count < 3 or count % 2 == 0:
        name = argv[0].decode(errors="replace").lower()
        raise CommandError(f"ERR wrong number of arguments for '{name}' command")
    nx = argv[0].upper() == b"MSETNX"
    if nx and any(acc.get(db, argv[i]) is not None for i in range(1, count, 2)):
        return 0
    for i in range(1, count, 2):  # (by index: no slices, pairs or list of them)
        acc.put_string(db, argv[i], argv[i + 1])
    return 1 if nx else b"OK"


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"SET": (cmd_set, [1]),
    b"SETNX": (cmd_setnx, [1]),
    b"SETEX": (cmd_setex, [1]),
    b"PSETEX": (cmd_setex, [1]),
    b"GETSET": (cmd_getset, [1]),
    b"GETDEL": (cmd_getdel, [1]),
    b"APPEND": (cmd_append, [1]),
    b"INCR": (cmd_incr, [1]),
    b"DECR": (cmd_incr, [1]),
    b"INCRBY": (cmd_incrby, [1]),
    b"DECRBY": (cmd_incrby, [1]),
    b"INCRBYFLOAT": (cmd_incrbyfloat, [1]),
    b"MSET": (cmd_mset, "pairs"),
    b"MSETNX": (cmd_mset, "pairs"),
}
"""Name -> (handler, key positions: a list of argv indexes, ``"pairs"``, ``"all"``)."""
