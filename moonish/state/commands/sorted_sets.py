"""Sorted set commands (semantics of Redis 7.0, redis.io/commands, src/t_zset.c): ZADD (all
flags), ZINCRBY, ZREM, ZPOPMIN, ZPOPMAX; the range and store commands ZREMRANGEBYSCORE,
ZREMRANGEBYRANK, ZREMRANGEBYLEX, ZRANGESTORE (BYSCORE, BYLEX, REV, LIMIT), ZUNIONSTORE,
ZINTERSTORE (WEIGHTS, AGGREGATE), ZDIFFSTORE (``zremrangeGenericCommand``,
``zrangeGenericCommand``, ``zunionInterDiffGenericCommand``). Streams are in
:mod:`moonish.state.commands.streams` and :mod:`moonish.state.commands.stream_groups`.

Scores are IEEE doubles computed in Redis's order: the sources of ZUNIONSTORE/ZINTERSTORE
are taken from the smallest to the largest (a stable sort, as glibc's ``qsort`` does for
small arrays), a weighted score that is NaN (``0 * inf``) counts as 0, and a sum of
``inf`` and ``-inf`` is 0. A set used as a source gives its members the score 1.

Lexicographic ranges assume, as Redis documents, that the members share one score; for a
sorted set whose scores differ, moonish follows Redis's listpack encoding (small sorted
sets): start at the first member in order that is at or after ``min``, and stop at the first
one after ``max``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.commands.hash_set_list import store_result
from moonish.state.keyspace import WRONGTYPE, Access
from moonish.values.model import SET, ZSET, Entry, SortedSet

_NOT_FLOAT_RANGE = "ERR min or max is not a float"
_NOT_LEX_RANGE = "ERR min or max not valid string range item"
_NOT_WEIGHT = "ERR weight value is not a float"

Items = list[tuple[bytes, float]]
"""(member, score) pairs in Redis's order (or its reverse)."""

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


# -- ranges --------------------------------------------------------------------------------


def _score_bound(value: bytes) -> tuple[float, bool]:
    """One end of a score range (``zslParseRange``): ``strtod`` over the C string (up to a
    NUL byte; an empty string is 0), ``(`` for an open end; NaN is refused."""
    text = value.split(b"\0", 1)[0]
    exclusive = text.startswith(b"(")
    if exclusive:
        text = text[1:]
    number, used, _ = parse.strtod(text)
    if used != len(text) or math.isnan(number):
        raise CommandError(_NOT_FLOAT_RANGE)
    return number, exclusive


LexBound = tuple[int, bytes]
"""(-1 for ``-``, 1 for ``+``, else 0; the bytes): ordered as Redis's ``sdscmplex``."""


def _lex_bound(value: bytes) -> tuple[LexBound, bool]:
    """One end of a lexicographic range (``zslParseLexRangeItem``): ``-``, ``+``, ``(x``,
    ``[x``."""
    first, rest = value[:1], value[1:]
    if first in (b"-", b"+"):
        if rest[:1] not in (b"", b"\0"):  # C string: c[1] must be the end
            raise CommandError(_NOT_LEX_RANGE)
        return (-1 if first == b"-" else 1, b""), True
    if first in (b"(", b"["):
        return (0, rest), first == b"("
    raise CommandError(_NOT_LEX_RANGE)


def _score_range(low: bytes, high: bytes) -> Callable[[Items], Items]:
    """Parse a score range; returns what selects it from pairs in order (or reversed)."""
    (low_n, low_ex), (high_n, high_ex) = _score_bound(low), _score_bound(high)

    def select(ordered: Items) -> Items:
        return [
            (member, score)
            for member, score in ordered
            if (score > low_n if low_ex else score >= low_n)
            and (score < high_n if high_ex else score <= high_n)
        ]

    return select


class LexRange:
    """A parsed lexicographic range (``zlexrangespec``)."""

    def __init__(self, low: bytes, high: bytes) -> None:
        (self.low, self.low_ex), (self.high, self.high_ex) = _lex_bound(low), _lex_bound(high)

    def gte_min(self, member: bytes) -> bool:
        value = (0, member)
        return value > self.low if self.low_ex else value >= self.low

    def lte_max(self, member: bytes) -> bool:
        value = (0, member)
        return value < self.high if self.high_ex else value <= self.high

    def start(self, members: list[bytes], reverse: bool) -> int | None:
        """The index where a forward (or reverse) walk starts, or None when nothing is in
        range (``zzlIsInLexRange``, then ``zzlFirstInLexRange`` / ``zzlLastInLexRange``)."""
        if (
            self.low > self.high
            or (self.low == self.high and (self.low_ex or self.high_ex))
            or not members
            or not self.gte_min(members[-1])
            or not self.lte_max(members[0])
        ):
            return None
        if reverse:
            for i in range(len(members) - 1, -1, -1):
                if self.lte_max(members[i]):
                    return i if self.gte_min(members[i]) else None
        else:
            for i, member in enumerate(members):
                if self.gte_min(member):
                    return i if self.lte_max(member) else None
        return None

    def walk(self, items: Items, reverse: bool, offset: int = 0, limit: int = -1) -> Items:
        """The members in range from :meth:`start`, ``offset`` skipped first (a negative one
        skips everything), at most ``limit`` (negative: no limit)."""
        start = self.start([member for member, _ in items], reverse)
        if start is None or offset < 0:
            return []
        ordered = items[start::-1] if reverse else items[start:]
        inside = self.gte_min if reverse else self.lte_max
        taken: Items = []
        for member, score in ordered[offset:]:
            if len(taken) == limit or not inside(member):
                break
            taken.append((member, score))
        return taken


def _page(items: Items, offset: int, limit: int) -> Items:
    """``LIMIT offset count``: a negative offset gives nothing, a negative count no limit."""
    if offset < 0:
        return []
    return items[offset:] if limit < 0 else items[offset : offset + limit]


# -- ZREMRANGEBY* --------------------------------------------------------------------------


def cmd_zremrange(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, 4)
    kind = argv[0].upper()[len(b"ZREMRANGEBY") :]
    if kind == b"RANK":
        start, end = parse.integer(argv[2]), parse.integer(argv[3])
    elif kind == b"SCORE":
        select = _score_range(argv[2], argv[3])
    else:
        lex = LexRange(argv[2], argv[3])
    entry = acc.get(db, argv[1], ZSET)
    if entry is None:
        return 0
    zset: SortedSet = entry.value
    items = zset.items()
    if kind == b"RANK":
        size = len(items)
        start, end = max(start + size if start < 0 else start, 0), end + size if end < 0 else end
        doomed = items[start : end + 1] if start <= end and start < size else []
    elif kind == b"SCORE":
        doomed = select(items)
    else:
        doomed = lex.walk(items, reverse=False)
    for member, _ in doomed:
        zset.remove(member)
    if doomed:
        acc.changed(db, argv[1], entry, -sum(len(member) for member, _ in doomed))
    return len(doomed)


# -- ZRANGESTORE ---------------------------------------------------------------------------


def cmd_zrangestore(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -5)
    reverse = False
    by: bytes | None = None
    offset, limit = 0, -1
    i = 5
    while i < len(argv):
        option = argv[i].upper()
        if option == b"LIMIT" and len(argv) - i - 1 >= 2:
            offset, limit = parse.integer(argv[i + 1]), parse.integer(argv[i + 2])
            i += 2
        elif option == b"REV" and not reverse:
            reverse = True
        elif option in (b"BYLEX", b"BYSCORE") and by is None:
            by = option
        else:
            raise CommandError(parse.SYNTAX)
        i += 1
    if limit != -1 and by is None:
        raise CommandError(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
        )
    low, high = (argv[4], argv[3]) if reverse and by is not None else (argv[3], argv[4])
    if by is None:
        start, end = parse.integer(low), parse.integer(high)
    elif by == b"BYSCORE":
        select = _score_range(low, high)
    else:
        lex = LexRange(low, high)
    entry = acc.get(db, argv[2], ZSET)
    items: Items = []
    if entry is not None:
        ordered = entry.value.items()
        if reverse:
            ordered.reverse()
        if by is None:
            size = len(ordered)
            start, end = (
                max(start + size if start < 0 else start, 0),
                (end + size if end < 0 else end),
            )
            items = ordered[start : end + 1] if start <= end and start < size else []
        elif by == b"BYSCORE":
            items = _page(select(ordered), offset, limit)
        else:
            items = lex.walk(entry.value.items(), reverse, offset, limit)
    result = SortedSet(dict(items)) if items else None
    store_result(acc, db, argv[1], None if result is None else Entry(ZSET, result))
    return len(items)


# -- ZUNIONSTORE, ZINTERSTORE, ZDIFFSTORE --------------------------------------------------


def _numkeys(argv: list[bytes]) -> int:
    """The ``numkeys`` argument, checked as Redis checks it."""
    count = parse.integer(argv[2])
    if count < 1:
        name = argv[0].decode(errors="replace").lower()
        raise CommandError(f"ERR at least 1 input key is needed for '{name}' command")
    if count > len(argv) - 3:
        raise CommandError(parse.SYNTAX)
    return count


def _aggregate(mode: bytes, target: float, value: float) -> float:
    """``zunionInterAggregate``."""
    if mode == b"SUM":
        total = target + value
        return 0.0 if math.isnan(total) else total
    if mode == b"MIN":
        return value if value < target else target
    return value if value > target else target


def cmd_zsetop(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -4)
    name = argv[0].upper()
    count = _numkeys(argv)
    sources: list[dict[bytes, float]] = []
    for key in argv[3 : 3 + count]:
        entry = acc.get(db, key)
        if entry is None:
            sources.append({})
        elif entry.type == ZSET:
            sources.append(entry.value.scores)
        elif entry.type == SET:
            sources.append(dict.fromkeys(entry.value, 1.0))
        else:
            raise CommandError(WRONGTYPE)
    weights, mode = [1.0] * count, b"SUM"
    i = 3 + count
    while i < len(argv):
        option, left = argv[i].upper(), len(argv) - i
        if name != b"ZDIFFSTORE" and option == b"WEIGHTS" and left >= count + 1:
            weights = [parse.score(w, _NOT_WEIGHT) for w in argv[i + 1 : i + 1 + count]]
            i += count + 1
        elif name != b"ZDIFFSTORE" and option == b"AGGREGATE" and left >= 2:
            mode = argv[i + 1].upper()
            if mode not in (b"SUM", b"MIN", b"MAX"):
                raise CommandError(parse.SYNTAX)
            i += 2
        else:
            raise CommandError(parse.SYNTAX)
    result: dict[bytes, float] = {}
    if name == b"ZDIFFSTORE":
        first, rest = sources[0], sources[1:]
        result = {m: s for m, s in first.items() if not any(m in other for other in rest)}
    else:
        order = sorted(range(count), key=lambda k: len(sources[k]))  # stable, as glibc's
        weighted = [(sources[k], weights[k]) for k in order]
        if name == b"ZINTERSTORE":
            (smallest, weight), others = weighted[0], weighted[1:]
            for member, score in smallest.items():
                total = weight * score
                total = 0.0 if math.isnan(total) else total
                for source, other_weight in others:
                    found = source.get(member)
                    if found is None:
                        break
                    total = _aggregate(mode, total, found * other_weight)
                else:
                    result[member] = total
        else:
            for source, weight in weighted:
                for member, score in source.items():
                    value = weight * score
                    value = 0.0 if math.isnan(value) else value
                    old = result.get(member)
                    result[member] = value if old is None else _aggregate(mode, old, value)
    store_result(acc, db, argv[1], Entry(ZSET, SortedSet(result)) if result else None)
    return len(result)


def _zsetop_keys(argv: list[bytes]) -> list[int]:
    """The destination and the ``numkeys`` sources (as far as they parse)."""
    try:
        count = int(argv[2]) if len(argv) > 2 else 0
    except ValueError:
        count = 0
    return [1, *range(3, min(3 + max(count, 0), len(argv)))]


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"ZADD": (cmd_zadd, [1]),
    b"ZINCRBY": (cmd_zincrby, [1]),
    b"ZREM": (cmd_zrem, [1]),
    b"ZPOPMIN": (cmd_zpop, [1]),
    b"ZPOPMAX": (cmd_zpop, [1]),
    b"ZREMRANGEBYSCORE": (cmd_zremrange, [1]),
    b"ZREMRANGEBYRANK": (cmd_zremrange, [1]),
    b"ZREMRANGEBYLEX": (cmd_zremrange, [1]),
    b"ZRANGESTORE": (cmd_zrangestore, [1, 2]),
    b"ZUNIONSTORE": (cmd_zsetop, _zsetop_keys),
    b"ZINTERSTORE": (cmd_zsetop, _zsetop_keys),
    b"ZDIFFSTORE": (cmd_zsetop, _zsetop_keys),
}
"""Name -> (handler, key positions: argv indexes, or a function of argv giving them)."""
