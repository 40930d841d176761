"""Sorted set commands: ZADD (all flags), ZINCRBY, ZREM, ZPOPMIN, ZPOPMAX (semantics of
Redis 7.0, redis.io/commands). Streams are in :mod:`moonish.state.cmd_streams` and
:mod:`moonish.state.cmd_groups`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state import parse
from moonish.state.keyspace import Access
from moonish.state.values import ZSET, Entry, SortedSet

# -- sorted sets ---------------------------------------------------------------------------


def cmd_zadd(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -4)
    flags: set[bytes] = set()
    i = 2
    while i < len(argv) and argv[i].upper() in (b"NX", b"XX", b"GT", b"LT", b"CH", b"INCR"):
        flags.add(argv[i].upper())
        i += 1
    rest = argv[i:]
    if not rest or len(rest) % 2:
        raise CommandError(parse.SYNTAX)
    if {b"NX", b"XX"} <= flags:
        raise CommandError("ERR XX and NX options at the same time are not compatible")
    if len(flags & {b"GT", b"LT", b"NX"}) > 1:
        raise CommandError("ERR GT, LT, and/or NX options at the same time are not compatible")
    incr = b"INCR" in flags
    if incr and len(rest) != 2:
        raise CommandError("ERR INCR option supports a single increment-element pair")
    pairs = [(parse.score(s), m) for s, m in zip(rest[::2], rest[1::2], strict=True)]
    entry = acc.get(db, argv[1], ZSET)
    if entry is None and b"XX" in flags:
        return None if incr else 0
    zset = SortedSet() if entry is None else entry.value
    scores = zset.scores
    added = changed = grew = 0
    result: float | None = None
    for new, member in pairs:
        old = scores.get(member)
        if (old is None and b"XX" in flags) or (old is not None and b"NX" in flags):
            continue
        if incr:
            new = (old or 0.0) + new
            if math.isnan(new):
                raise CommandError("ERR resulting score is not a number (NaN)")
        if old is not None and ((b"GT" in flags and new <= old) or (b"LT" in flags and new >= old)):
            continue
        result = new
        if old is None:
            added += 1
            grew += len(member)
        elif old != new:
            changed += 1
        else:
            continue
        zset.add(member, new)
    if added or changed:
        if entry is None:
            acc.put(db, argv[1], Entry(ZSET, zset))
        else:
            acc.changed(db, argv[1], entry, grew)
    if incr:
        return result
    return added + changed if b"CH" in flags else added


def cmd_zincrby(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    return cmd_zadd(acc, db, [b"ZADD", argv[1], b"INCR", argv[2], argv[3]])


def cmd_zrem(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    entry = acc.get(db, argv[1], ZSET)
    if entry is None:
        return 0
    gone = [member for member in set(argv[2:]) if entry.value.remove(member)]
    removed = len(gone)
    if removed:
        acc.changed(db, argv[1], entry, -sum(map(len, gone)))
    return removed


def cmd_zpop(acc: Access, db: int, argv: list[bytes]) -> Any:
    if len(argv) not in (2, 3):
        parse.arity(argv, 2)  # raises
    count = parse.count_arg(argv[2]) if len(argv) == 3 else 1
    entry = acc.get(db, argv[1], ZSET)
    if entry is None or count == 0:
        return []
    popped = entry.value.pop(count, argv[0].upper() == b"ZPOPMAX")
    acc.changed(db, argv[1], entry, -sum(len(member) for member, _ in popped))
    return popped


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"ZADD": (cmd_zadd, [1]),
    b"ZINCRBY": (cmd_zincrby, [1]),
    b"ZREM": (cmd_zrem, [1]),
    b"ZPOPMIN": (cmd_zpop, [1]),
    b"ZPOPMAX": (cmd_zpop, [1]),
}
