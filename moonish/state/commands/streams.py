"""Stream entry commands: XADD, XDEL, XTRIM, XSETID, with Redis 7.0's semantics and error
texts (src/t_stream.c: ``xaddCommand``, ``streamParseAddOrTrimArgsOrReply``,
``streamAppendItem``, ``xdelCommand``, ``xtrimCommand``, ``xsetidCommand``), and Redis's stream
ID parsing (``streamGenericParseIDOrReply``, ``string2ull``). Consumer group commands are in
:mod:`moonish.state.commands.stream_groups`.

The counters follow Redis: XADD adds one to ``entries_added``; XDEL raises ``max_deleted_id``
to the largest ID it removed (trimming does not); XSETID sets the last ID and, when given,
``entries_added`` and a non-zero ``max_deleted_id``.

Approximate trimming (``MAXLEN ~ n``) trims exactly here: Redis promises at least ``n``
entries kept and trims by whole internal nodes; moonish keeps exactly ``n``. (The AOF and a
replica see Redis's exact result: Redis rewrites ``~`` as ``=`` with the count it kept.)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.keyspace import Access
from moonish.values.model import STREAM, Entry, StreamId
from moonish.values.streams import ZERO_ID, Stream

U64_MAX = 2**64 - 1
MAX_ID: StreamId = (U64_MAX, U64_MAX)
INVALID_ID = "ERR Invalid stream ID specified as stream command argument"
_STRTOULL = re.compile(rb"[ \t\n\v\f\r]*([+-]?)([0-9]+)\Z")
_STRING2LL = re.compile(rb"0|-?[1-9][0-9]*\Z")


def _string2ull(digits: bytes) -> int | None:
    """Redis's ``string2ull`` (src/util.c): ``string2ll``'s strict form (negative refused),
    else C's ``strtoull`` over the whole string (leading space, a sign, leading zeros; a
    ``-`` negates modulo 2**64); ``None`` where it fails."""
    if _STRING2LL.match(digits) and -(2**63) <= int(digits) < 2**63:
        number = int(digits)
        return number if number >= 0 else None
    match = _STRTOULL.match(digits)
    if match is None or int(match[2]) > U64_MAX:
        return None
    number = int(match[2])
    return (-number) % 2**64 if match[1] == b"-" else number


def parse_id(
    arg: bytes, *, strict: bool = True, missing_seq: int = 0, message: str = INVALID_ID
) -> StreamId:
    """A stream ID argument as ``streamGenericParseIDOrReply`` reads it: ``<ms>-<seq>`` or
    ``<ms>`` (the sequence is then ``missing_seq``); not ``strict``, also ``-`` (0-0) and
    ``+`` (the largest ID).

    Raises:
        CommandError: ``message``.
    """
    found = _parse_id(arg, strict, missing_seq, star=False)
    if found is None:
        raise CommandError(message)
    return found[0]


def _parse_id(
    arg: bytes, strict: bool, missing_seq: int, star: bool
) -> tuple[StreamId, bool] | None:
    """(ID, whether the sequence was given) or None; ``star`` allows ``<ms>-*``."""
    if len(arg) > 127:
        return None
    buf = arg.partition(b"\0")[0]  # Redis reads the argument as a C string
    if buf in (b"-", b"+"):
        return None if strict else ((ZERO_ID if buf == b"-" else MAX_ID), True)
    ms_text, dash, seq_text = buf.partition(b"-")
    ms = _string2ull(ms_text)
    if ms is None:
        return None
    if not dash:
        return (ms, missing_seq), True
    if star and seq_text == b"*":
        return (ms, 0), False
    seq = _string2ull(seq_text)
    return None if seq is None else ((ms, seq), True)


def stream_for(acc: Access, db: int, key: bytes) -> tuple[Entry | None, Stream | None]:
    """The key's entry and stream, or ``(None, None)``.

    Raises:
        CommandError: WRONGTYPE.
    """
    entry = acc.get(db, key, STREAM)
    return entry, None if entry is None else entry.value


Trim = tuple[bytes, "int | StreamId"]
"""(b"MAXLEN", entries to keep) or (b"MINID", lowest ID kept)."""


def _add_or_trim_args(acc: Access, argv: list[bytes], xadd: bool) -> tuple[Trim | None, int, bool]:
    """``streamParseAddOrTrimArgsOrReply``: (trim, index of XADD's ID, NOMKSTREAM).

    A ``LIMIT`` without ``~`` is refused from a client but accepted while loading (an AOF
    holds ``MAXLEN = n LIMIT m`` after Redis rewrote a ``~``), as Redis's ``mustObeyClient``.
    """
    i, limit, limit_given, approx, nomkstream = 2, 0, False, False, False
    trim: Trim | None = None
    while i < len(argv):
        more = len(argv) - 1 - i
        option = argv[i].upper()
        if xadd and argv[i] == b"*":
            break
        if option in (b"MAXLEN", b"MINID") and more:
            if trim is not None:
                raise CommandError(
                    "ERR syntax error, MAXLEN and MINID options at the same time are not compatible"
                )
            approx = more >= 2 and argv[i + 1] == b"~"
            if more >= 2 and argv[i + 1] in (b"~", b"="):
                i += 1
            if option == b"MAXLEN":
                maxlen = parse.integer(argv[i + 1])
                if maxlen < 0:
                    raise CommandError("ERR The MAXLEN argument must be >= 0.")
                trim = (option, maxlen)
            else:
                trim = (option, parse_id(argv[i + 1]))
            i += 1
        elif option == b"LIMIT" and more:
            limit, limit_given = parse.integer(argv[i + 1]), True
            if limit < 0:
                raise CommandError("ERR The LIMIT argument must be >= 0.")
            i += 1
        elif xadd and option == b"NOMKSTREAM":
            nomkstream = True
        elif xadd:
            break  # the ID (checked by the caller)
        else:
            raise CommandError(parse.SYNTAX)
        i += 1
    if limit and trim is None:
        raise CommandError(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"
        )
    if not xadd and trim is None:
        raise CommandError("ERR syntax error, XTRIM must be called with a trimming strategy")
    if acc.expire and limit_given and not approx:  # acc.expire: a live client, not loading
        raise CommandError("ERR syntax error, LIMIT cannot be used without the special ~ option")
    return trim, i, nomkstream


def _trim(stream: Stream, trim: Trim) -> int:
    """Remove entries from the front: O(entries removed), as Redis's ``streamTrim``."""
    _, threshold = trim
    entries = stream.entries
    if isinstance(threshold, int):
        doomed = max(len(entries) - threshold, 0)
        for _ in range(doomed):
            entries.popitem(last=False)
        return doomed
    removed = 0
    while entries and next(iter(entries)) < threshold:  # entries are in ID order
        entries.popitem(last=False)
        removed += 1
    return removed


def _incr(stream_id: StreamId) -> StreamId:
    ms, seq = stream_id
    return (ms, seq + 1) if seq < U64_MAX else (ms + 1, 0)


def cmd_xadd(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -5)
    trim, i, nomkstream = _add_or_trim_args(acc, argv, xadd=True)
    given: tuple[StreamId, bool] | None = None
    if i < len(argv) and argv[i] != b"*":
        given = _parse_id(argv[i], strict=True, missing_seq=0, star=True)
        if given is None:
            raise CommandError(INVALID_ID)
    fields = len(argv) - i - 1
    if fields < 2 or fields % 2:
        raise CommandError("ERR wrong number of arguments for 'xadd' command")
    if given is not None and given == (ZERO_ID, True):
        raise CommandError("ERR The ID specified in XADD must be greater than 0-0")
    entry, stream = stream_for(acc, db, argv[1])
    if stream is None:
        if nomkstream:
            return None
        stream = Stream()
    last = stream.last_id
    if last == MAX_ID:
        raise CommandError(
            "ERR The stream has exhausted the last possible ID, unable to add more items"
        )
    if given is None:
        new_id = (acc.now_ms, 0) if acc.now_ms > last[0] else _incr(last)
    elif given[1]:
        new_id = given[0]
    else:
        ms = given[0][0]
        new_id = (ms, last[1] + 1) if ms == last[0] and last[1] < U64_MAX else (ms, 0)
    if new_id <= last:
        raise CommandError(
            "ERR The ID specified in XADD is equal or smaller than the target stream top item"
        )
    stream.entries[new_id] = argv[i + 1 :]
    stream.last_id = new_id
    stream.entries_added += 1
    if trim is not None:
        _trim(stream, trim)
    if entry is None:
        acc.put(db, argv[1], Entry(STREAM, stream))
    else:
        acc.changed(db, argv[1], entry)
    return b"%d-%d" % new_id


def cmd_xdel(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -3)
    entry, stream = stream_for(acc, db, argv[1])
    if entry is None or stream is None:
        return 0  # Redis looks the key up before it parses the IDs
    ids = [parse_id(arg) for arg in argv[2:]]
    deleted = 0
    for stream_id in ids:
        if stream.entries.pop(stream_id, None) is not None:
            deleted += 1
            stream.max_deleted_id = max(stream.max_deleted_id, stream_id)
    if deleted:
        acc.changed(db, argv[1], entry)
    return deleted


def cmd_xtrim(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -4)
    trim, _, _ = _add_or_trim_args(acc, argv, xadd=False)
    assert trim is not None
    entry, stream = stream_for(acc, db, argv[1])
    if entry is None or stream is None:
        return 0
    removed = _trim(stream, trim)
    if removed:
        acc.changed(db, argv[1], entry)
    return removed


def cmd_xsetid(acc: Access, db: int, argv: list[bytes]) -> Any:
    """Sets the stream's last ID and, with ``ENTRIESADDED``/``MAXDELETEDID``, its counters
    (what a rewritten AOF writes after a stream's entries)."""
    parse.arity(argv, -3)
    new_id = parse_id(argv[2])
    entries_added, max_deleted, i = -1, ZERO_ID, 3
    while i < len(argv):
        option = argv[i].upper()
        if option == b"ENTRIESADDED" and i + 1 < len(argv):
            entries_added = parse.integer(argv[i + 1])
            if entries_added < 0:
                raise CommandError("ERR entries_added must be positive")
        elif option == b"MAXDELETEDID" and i + 1 < len(argv):
            max_deleted = parse_id(argv[i + 1])
            if new_id < max_deleted:
                raise CommandError(
                    "ERR The ID specified in XSETID is smaller than the provided "
                    "max_deleted_entry_id"
                )
        else:
            raise CommandError(parse.SYNTAX)
        i += 2
    entry, stream = stream_for(acc, db, argv[1])
    if entry is None or stream is None:
        raise CommandError("ERR no such key")
    if stream.entries:
        if new_id < next(reversed(stream.entries)):
            raise CommandError(
                "ERR The ID specified in XSETID is smaller than the target stream top item"
            )
        if entries_added != -1 and len(stream.entries) > entries_added:
            raise CommandError(
                "ERR The entries_added specified in XSETID is smaller than the target stream length"
            )
    stream.last_id = new_id
    if entries_added != -1:
        stream.entries_added = entries_added
    if max_deleted != ZERO_ID:
        stream.max_deleted_id = max_deleted
    acc.changed(db, argv[1], entry)
    return b"OK"


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"XADD": (cmd_xadd, [1]),
    b"XDEL": (cmd_xdel, [1]),
    b"XTRIM": (cmd_xtrim, [1]),
    b"XSETID": (cmd_xsetid, [1]),
}
