"""Sorted set and stream commands: ZADD (all flags), ZINCRBY, ZREM, ZPOPMIN, ZPOPMAX; XADD,
XDEL, XTRIM, XSETID (semantics of Redis 7.0, redis.io/commands).

Approximate trimming (``MAXLEN ~ n``) trims exactly here: Redis promises at least ``n``
entries kept and trims by whole internal nodes; moonish keeps exactly ``n``.
"""

from __future__ import annotations

import math
from typing import Any

from moonish.errors import CommandError
from moonish.state import parse
from moonish.state.keyspace import Access
from moonish.state.values import STREAM, ZSET, Entry, SortedSet, Stream, StreamId

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


# -- streams -------------------------------------------------------------------------------


def _stream_id(text: bytes, *, missing_seq: int = 0) -> StreamId:
    ms, dash, seq = text.partition(b"-")
    try:
        parsed = (int(ms), int(seq) if dash else missing_seq)
    except ValueError:
        raise CommandError("ERR Invalid stream ID specified as stream command argument") from None
    if not (0 <= parsed[0] < 2**64 and 0 <= parsed[1] < 2**64) or ms.startswith(b"+"):
        raise CommandError("ERR Invalid stream ID specified as stream command argument")
    return parsed


Trim = tuple[bytes, "int | StreamId"]
"""(b"MAXLEN", entries to keep) or (b"MINID", lowest ID kept)."""


def _trim_spec(argv: list[bytes], i: int) -> tuple[Trim, int]:
    """The trim clause at ``argv[i]`` (checked) and the index after it."""
    strategy = argv[i].upper()
    i += 1
    if i < len(argv) and argv[i] in (b"=", b"~"):
        i += 1
    if i >= len(argv):
        raise CommandError(parse.SYNTAX)
    threshold: int | StreamId
    if strategy == b"MAXLEN":
        threshold = parse.integer(argv[i])
        if threshold < 0:
            raise CommandError("ERR The MAXLEN argument must be >= 0.")
    else:
        threshold = _stream_id(argv[i])
    i += 1
    if i + 1 < len(argv) and argv[i].upper() == b"LIMIT":
        parse.integer(argv[i + 1])
        i += 2
    return (strategy, threshold), i


def _trim(stream: Stream, trim: Trim) -> int:
    _, threshold = trim
    if isinstance(threshold, int):
        doomed = list(stream.entries)[: max(len(stream.entries) - threshold, 0)]
    else:
        doomed = [i for i in stream.entries if i < threshold]
    for stream_id in doomed:
        del stream.entries[stream_id]
    return len(doomed)


def cmd_xadd(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -5)
    i, nomkstream = 2, False
    trim: Trim | None = None
    while i < len(argv):
        option = argv[i].upper()
        if option == b"NOMKSTREAM":
            nomkstream, i = True, i + 1
        elif option in (b"MAXLEN", b"MINID"):
            trim, i = _trim_spec(argv, i)
        else:
            break
    if i >= len(argv) or (len(argv) - i - 1) % 2 or len(argv) - i - 1 < 2:
        raise CommandError("ERR wrong number of arguments for 'xadd' command")
    if argv[i] != b"*" and not argv[i].endswith(b"-*") and _stream_id(argv[i]) == (0, 0):
        raise CommandError("ERR The ID specified in XADD must be greater than 0-0")
    entry = acc.get(db, argv[1], STREAM)
    stream = Stream() if entry is None else entry.value
    new_id = _next_id(stream, argv[i], acc.now_ms)
    if entry is None and nomkstream:
        return None
    stream.entries[new_id] = list(argv[i + 1 :])
    stream.last_id = new_id
    if trim is not None:
        _trim(stream, trim)
    if entry is None:
        acc.put(db, argv[1], Entry(STREAM, stream))
    else:
        acc.changed(db, argv[1], entry)
    return b"%d-%d" % new_id


def _next_id(stream: Stream, text: bytes, now_ms: int) -> StreamId:
    last = stream.last_id
    if text == b"*":
        ms = max(now_ms, last[0])
        return (ms, last[1] + 1) if ms == last[0] else (ms, 0)
    if text.endswith(b"-*"):
        ms = _stream_id(text[:-2])[0]
        new_id = (ms, last[1] + 1) if ms == last[0] else (ms, 0)
    else:
        new_id = _stream_id(text)
    if new_id == (0, 0):
        raise CommandError("ERR The ID specified in XADD must be greater than 0-0")
    if new_id <= last:
        raise CommandError(
            "ERR The ID specified in XADD is equal or smaller than the target stream top item"
        )
    return new_id


def cmd_xdel(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    entry = acc.get(db, argv[1], STREAM)
    if entry is None:
        return 0  # Redis looks the key up before it parses the IDs
    ids = [_stream_id(text) for text in argv[2:]]
    removed = sum(1 for stream_id in set(ids) if entry.value.entries.pop(stream_id, None))
    if removed:
        acc.changed(db, argv[1], entry)
    return removed


def cmd_xtrim(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -4)
    if argv[2].upper() not in (b"MAXLEN", b"MINID"):
        raise CommandError(parse.SYNTAX)
    trim, i = _trim_spec(argv, 2)
    if i != len(argv):
        raise CommandError(parse.SYNTAX)
    entry = acc.get(db, argv[1], STREAM)
    if entry is None:
        return 0
    removed = _trim(entry.value, trim)
    if removed:
        acc.changed(db, argv[1], entry)
    return removed


def cmd_xsetid(acc: Access, db: int, argv: list[bytes]) -> Any:
    """Sets the stream's last ID (what a rewritten AOF writes after a stream's entries).
    ``ENTRIESADDED`` and ``MAXDELETEDID`` are checked as Redis checks them; moonish keeps
    neither counter (no image shows them)."""
    parse.arity(argv, -3)
    new_id = _stream_id(argv[2])
    entries_added, i = -1, 3
    while i < len(argv):
        option = argv[i].upper()
        if option == b"ENTRIESADDED" and i + 1 < len(argv):
            entries_added = parse.integer(argv[i + 1])
            if entries_added < 0:
                raise CommandError("ERR entries_added must be positive")
        elif option == b"MAXDELETEDID" and i + 1 < len(argv):
            if new_id < _stream_id(argv[i + 1]):
                raise CommandError(
                    "ERR The ID specified in XSETID is smaller than the provided "
                    "max_deleted_entry_id"
                )
        else:
            raise CommandError(parse.SYNTAX)
        i += 2
    entry = acc.get(db, argv[1], STREAM)
    if entry is None:
        raise CommandError("ERR no such key")
    stream: Stream = entry.value
    if stream.entries:
        if new_id < max(stream.entries):
            raise CommandError(
                "ERR The ID specified in XSETID is smaller than the target stream top item"
            )
        if entries_added != -1 and len(stream.entries) > entries_added:
            raise CommandError(
                "ERR The entries_added specified in XSETID is smaller than the target stream length"
            )
    stream.last_id = new_id
    acc.changed(db, argv[1], entry)
    return b"OK"


COMMANDS = {
    b"ZADD": (cmd_zadd, [1]),
    b"ZINCRBY": (cmd_zincrby, [1]),
    b"ZREM": (cmd_zrem, [1]),
    b"ZPOPMIN": (cmd_zpop, [1]),
    b"ZPOPMAX": (cmd_zpop, [1]),
    b"XADD": (cmd_xadd, [1]),
    b"XDEL": (cmd_xdel, [1]),
    b"XTRIM": (cmd_xtrim, [1]),
    b"XSETID": (cmd_xsetid, [1]),
}
