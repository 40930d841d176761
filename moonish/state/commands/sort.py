"""SORT with its options (``BY``, ``GET``, ``LIMIT``, ``ASC``/``DESC``, ``ALPHA``, ``STORE``),
semantics of Redis 7.0 (src/sort.c ``sortCommandGeneric``, ``lookupKeyByPattern``,
``sortCompare``).

Only ``SORT … STORE`` writes (Redis propagates nothing else); without ``STORE`` the sorted
elements are the reply. With ``STORE`` the destination (any type, its expiry time too) is
replaced by the result as a list, or deleted when the result is empty.

Order: numbers (``strtod`` of the element, or of the ``BY`` key's value; a missing ``BY`` key
counts as 0) with ties by element bytes; ``ALPHA`` by bytes (Redis compares bytes when it
stores, ``strcoll`` otherwise); ``BY`` a pattern without ``*`` keeps the list's or sorted set's
own order (a set is then sorted ``ALPHA`` for ``STORE``, as Redis does for replication). Equal
``ALPHA BY`` values keep the source's order, as glibc's merge sort does: for a list that is
Redis's order; for a set or a sorted set Redis's order is its hash table's, which moonish does
not have (it takes the members by bytes, or the sorted set's order).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.commands.hash_set_list import store_result
from moonish.state.keyspace import WRONGTYPE, Access
from moonish.values.model import HASH, LIST, SET, STRING, ZSET, Entry


def _split_pattern(pattern: bytes) -> tuple[bytes, bytes, bytes | None] | None:
    """A ``BY``/``GET`` pattern as (key prefix, key suffix, hash field or ``None``): the key
    is the prefix, an element, the suffix; ``None`` for a pattern without ``*`` (of the
    pattern as a C string)."""
    text = pattern.split(b"\0", 1)[0]
    star = text.find(b"*")
    if star < 0:
        return None
    arrow = text.find(b"->", star + 1)
    field = pattern[arrow + 2 :] if arrow >= 0 and arrow + 2 < len(text) else None
    end = len(pattern) - (len(field) + 2 if field is not None else 0)
    return pattern[:star], pattern[star + 1 : end], field


def _lookup_pattern(acc: Access, db: int, pattern: bytes, element: bytes) -> bytes | None:
    """``lookupKeyByPattern``: ``#`` is the element; else the first ``*`` (of the pattern as a
    C string) becomes the element, and ``key->field`` reads a hash field; a pattern without
    ``*``, a missing key or one of another type is None."""
    if pattern.split(b"\0", 1)[0] == b"#":
        return element
    split = _split_pattern(pattern)
    if split is None:
        return None
    prefix, suffix, field = split
    key = prefix + element + suffix
    entry = acc.get(db, key)
    if entry is None:
        return None
    if field is not None:  # an expired field is removed on the way (HFE_LAZY_EXPIRE)
        return acc.hash_field(db, key, entry, field)[0] if entry.type == HASH else None
    return entry.value if entry.type == STRING else None


def _score(value: bytes) -> float | None:
    """``strtod`` over the C string, as SORT reads a number; None for what SORT refuses
    (trailing bytes, ``ERANGE``, NaN)."""
    text = value.split(b"\0", 1)[0]
    number, used, erange = parse.strtod(text)
    if used != len(text) or erange or number != number:
        return None
    return number


def _options(argv: list[bytes]) -> dict[str, Any]:
    """The options, parsed as Redis parses them (the last of a repeated one wins)."""
    found: dict[str, Any] = {
        "desc": False,
        "alpha": False,
        "start": 0,
        "count": -1,
        "store": None,
        "by": None,
        "get": [],
    }
    i = 2
    while i < len(argv):
        option, left = argv[i].upper(), len(argv) - i - 1
        if option in (b"ASC", b"DESC"):
            found["desc"] = option == b"DESC"
        elif option == b"ALPHA":
            found["alpha"] = True
        elif option == b"LIMIT" and left >= 2:
            found["start"], found["count"] = parse.integer(argv[i + 1]), parse.integer(argv[i + 2])
            i += 2
        elif option in (b"STORE", b"BY", b"GET") and left >= 1:
            i += 1
            if option == b"GET":
                found["get"].append(argv[i])
            else:
                found[option.decode().lower()] = argv[i]
        else:
            raise CommandError(parse.SYNTAX)
        i += 1
    return found


def _limits(size: int, start: int, count: int) -> range:
    """The positions ``LIMIT start count`` selects, clamped as Redis clamps them."""
    start, count = min(max(start, 0), size), min(max(count, -1), size)
    end = size - 1 if count < 0 else start + count - 1
    if start >= size:
        start, end = size - 1, size - 2
    return range(start, min(end, size - 1) + 1)


def cmd_sort(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -2)
    opts = _options(argv)
    entry = acc.get(db, argv[1])
    if entry is not None and entry.type not in (SET, LIST, ZSET):
        raise CommandError(WRONGTYPE)
    by, alpha, desc = opts["by"], opts["alpha"], opts["desc"]
    dontsort = by is not None and b"*" not in by.split(b"\0", 1)[0]
    kind = LIST if entry is None else entry.type
    if dontsort and kind == SET and opts["store"] is not None:
        dontsort, alpha, by = False, True, None  # a set is sorted for replication
    if entry is None:
        elements: list[bytes] = []
    elif kind == ZSET:
        elements = [member for member, _ in entry.value.items()]
    else:
        elements = sorted(entry.value) if kind == SET else list(entry.value)
    if dontsort:
        if desc and kind != SET:
            elements.reverse()
    else:
        key: Callable[[bytes], Any]
        if alpha and by is None:
            key = bytes
        elif alpha:
            values = {e: _lookup_pattern(acc, db, by, e) for e in elements}
            key = lambda e: (0, b"") if values[e] is None else (1, values[e])  # noqa: E731
        else:
            scores: dict[bytes, float | None] = {}
            for element in elements:  # every key is looked up before the error, as in Redis
                value = element if by is None else _lookup_pattern(acc, db, by, element)
                scores[element] = 0.0 if value is None else _score(value)
            if None in scores.values():
                raise CommandError("ERR One or more scores can't be converted into double")
            key = lambda e: (scores[e], e)  # noqa: E731
        elements.sort(key=key, reverse=desc)
    selected = [elements[i] for i in _limits(len(elements), opts["start"], opts["count"])]
    gets: list[bytes] = opts["get"]
    if gets:
        output = [_lookup_pattern(acc, db, g, e) for e in selected for g in gets]
    else:
        output = list(selected)
    if opts["store"] is None:
        return output
    result = [b"" if value is None else value for value in output]
    store_result(acc, db, opts["store"], Entry(LIST, deque(result)) if result else None)
    return len(result)


def sort_keys(argv: list[bytes]) -> list[int]:
    """``sortGetKeys``: the sorted key and the last ``STORE`` destination."""
    skips = {b"LIMIT": 2, b"GET": 1, b"BY": 1}
    store, i = None, 2
    while i < len(argv):
        option = argv[i].upper()
        if option in skips:
            i += skips[option]
        elif option == b"STORE" and i + 1 < len(argv):
            store = i + 1
        i += 1
    return [1] if store is None else [1, store]


def reads_patterns(argv: list[bytes]) -> bool:
    """Whether ``SORT`` reads keys its arguments do not name (``BY``/``GET`` patterns with
    ``*``): those may live in any shard."""
    return any(
        argv[i].upper() in (b"BY", b"GET") and b"*" in argv[i + 1] for i in range(2, len(argv) - 1)
    )


def pattern_keys(argv: list[bytes]) -> Callable[[bytes], bool]:
    """Whether a key is one ``SORT``'s ``BY``/``GET`` patterns may read (a key of the form
    prefix, anything, suffix of one of them); a superset when options repeat."""
    affixes = [
        split
        for i in range(2, len(argv) - 1)
        if argv[i].upper() in (b"BY", b"GET") and (split := _split_pattern(argv[i + 1])) is not None
    ]

    def reads(key: bytes) -> bool:
        return any(
            len(key) >= len(prefix) + len(suffix)
            and key.startswith(prefix)
            and key.endswith(suffix)
            for prefix, suffix, _ in affixes
        )

    return reads


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"SORT": (cmd_sort, sort_keys),
}
"""Name -> (handler, key positions: a function of argv giving them)."""
