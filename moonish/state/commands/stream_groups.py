"""Stream consumer group commands: XGROUP (CREATE, SETID, DESTROY, CREATECONSUMER,
DELCONSUMER), XCLAIM, XACK, with Redis 7.0's semantics, order of checks and error texts
(src/t_stream.c: ``xgroupCommand``, ``xclaimCommand``, ``xackCommand``; subcommand errors from
src/server.c).

These are also the forms in which Redis writes the commands it does not propagate verbatim
(``streamPropagateXCLAIM``, ``streamPropagateGroupID``, ``streamPropagateConsumerCreation``;
``rewriteStreamObject`` in src/aof.c): XREADGROUP arrives as ``XCLAIM <key> <group>
<consumer> 0 <id> TIME <ms> RETRYCOUNT <n> FORCE JUSTID LASTID <id>`` per delivered entry (and
``XGROUP SETID … ENTRIESREAD`` / ``XGROUP CREATECONSUMER`` under NOACK), XCLAIM and XAUTOCLAIM
as one such XCLAIM per claimed entry (and per pending entry whose stream entry was deleted,
which drops it), a rewritten AOF as ``XGROUP CREATE … ENTRIESREAD``, ``XCLAIM … JUSTID FORCE``
per pending entry and ``XGROUP CREATECONSUMER`` per consumer without pending entries.

Times: a command's time is ``Access.now_ms`` (the writer's clock; the record's commit time on
replay). XCLAIM sets delivery times to it, or to ``TIME <ms>`` / now minus ``IDLE <ms>``
(a time before 0 or after now becomes now, as in Redis); a consumer's seen time becomes it
when XCLAIM claims for it or XGROUP CREATECONSUMER creates it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.state.commands import parse
from moonish.state.commands.streams import parse_id, stream_for
from moonish.state.keyspace import Access
from moonish.values.model import STREAM, Entry, StreamId
from moonish.values.streams import INVALID_ENTRIES_READ, ConsumerGroup, PendingEntry, Stream

_SUBCOMMAND_ARITY = {
    b"CREATE": -5,
    b"SETID": -5,
    b"DESTROY": 4,
    b"CREATECONSUMER": 5,
    b"DELCONSUMER": 5,
    b"HELP": 2,
}
"""XGROUP's subcommands and their arity (src/commands/xgroup-*.json)."""


def _c(value: bytes) -> str:
    """An argument as Redis prints it with ``%s`` (a C string: up to its first NUL)."""
    return value.partition(b"\0")[0].decode(errors="replace")


def _syntax(argv: list[bytes]) -> CommandError:
    return CommandError(
        f"ERR unknown subcommand or wrong number of arguments for '{_c(argv[1])[:128]}'. "
        "Try XGROUP HELP."
    )


def cmd_xgroup(acc: Access, db: int, argv: list[bytes]) -> Any:
    """XGROUP; ``XGROUP HELP`` changes nothing and replies ``None`` (its text is not kept)."""
    parse.arity(argv, -2)
    sub = argv[1].upper()
    arity = _SUBCOMMAND_ARITY.get(sub)
    if arity is None:
        raise CommandError(f"ERR unknown subcommand '{_c(argv[1])[:128]}'. Try XGROUP HELP.")
    if (arity > 0 and len(argv) != arity) or len(argv) < -arity:
        raise CommandError(
            f"ERR wrong number of arguments for 'xgroup|{sub.decode().lower()}' command"
        )
    if sub == b"HELP":
        return None
    mkstream, entries_read, i = False, INVALID_ENTRIES_READ, 5
    while i < len(argv):
        option = argv[i].upper()
        if sub == b"CREATE" and option == b"MKSTREAM":
            mkstream, i = True, i + 1
        elif sub in (b"CREATE", b"SETID") and option == b"ENTRIESREAD" and i + 1 < len(argv):
            entries_read = parse.integer(argv[i + 1])
            if entries_read < 0 and entries_read != INVALID_ENTRIES_READ:
                raise CommandError("ERR value for ENTRIESREAD must be positive or -1")
            i += 2
        else:
            raise _syntax(argv)
    key, name = argv[2], argv[3]
    entry, stream = stream_for(acc, db, key)
    group = None if stream is None else stream.groups.get(name)
    if not mkstream:
        if stream is None:
            raise CommandError(
                "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you "
                "may want to use the MKSTREAM option to create an empty stream automatically."
            )
        if group is None and sub in (b"SETID", b"CREATECONSUMER", b"DELCONSUMER"):
            raise CommandError(
                f"NOGROUP No such consumer group '{_c(name)}' for key name '{_c(key)}'"
            )
    if sub == b"CREATE":
        if len(argv) > 8:
            raise _syntax(argv)
        return _create(acc, db, argv, entry, stream, entries_read)
    assert entry is not None and stream is not None
    if sub == b"SETID":
        if len(argv) not in (5, 7):
            raise _syntax(argv)
        assert group is not None
        last = stream.last_id if argv[4] == b"$" else parse_id(argv[4], strict=False)
        group.last_id, group.entries_read = last, entries_read
    elif sub == b"DESTROY":
        if group is None:
            return 0
        del stream.groups[name]
    elif sub == b"CREATECONSUMER":
        assert group is not None
        if argv[4] in group.consumers:
            return 0
        group.consumers[argv[4]] = acc.now_ms
    else:  # DELCONSUMER
        assert group is not None
        if argv[4] not in group.consumers:
            return 0
        owned = group.owned_by(argv[4])
        for stream_id in owned:
            del group.pending[stream_id]
        del group.consumers[argv[4]]
        acc.changed(db, key, entry)
        return len(owned)
    acc.changed(db, key, entry)
    return b"OK" if sub == b"SETID" else 1


def _create(
    acc: Access,
    db: int,
    argv: list[bytes],
    entry: Entry | None,
    stream: Stream | None,
    entries_read: int,
) -> Any:
    last = parse_id(argv[4]) if argv[4] != b"$" else stream.last_id if stream else (0, 0)
    if entry is None or stream is None:
        stream = Stream()
        entry = Entry(STREAM, stream)
        acc.put(db, argv[2], entry)
    elif argv[3] in stream.groups:
        raise CommandError("BUSYGROUP Consumer Group name already exists")
    stream.groups[argv[3]] = ConsumerGroup(last, entries_read)
    acc.changed(db, argv[2], entry)
    return b"OK"


def cmd_xack(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -4)
    entry, stream = stream_for(acc, db, argv[1])
    group = None if stream is None else stream.groups.get(argv[2])
    if entry is None or group is None:
        return 0  # before the IDs are parsed, as Redis does
    ids = [parse_id(arg) for arg in argv[3:]]
    acknowledged = sum(1 for stream_id in ids if group.pending.pop(stream_id, None) is not None)
    if acknowledged:
        acc.changed(db, argv[1], entry)
    return acknowledged


def _xclaim_options(
    argv: list[bytes], j: int, now_ms: int
) -> tuple[int, int, bool, bool, StreamId]:
    """XCLAIM's options from ``argv[j]``: (delivery time, retry count or -1, FORCE, JUSTID,
    LASTID or 0-0)."""
    delivery_ms, retry, force, justid, last_id = -1, -1, False, False, (0, 0)
    while j < len(argv):
        more = len(argv) - 1 - j
        option = argv[j].upper()
        if option == b"FORCE":
            force = True
        elif option == b"JUSTID":
            justid = True
        elif option == b"IDLE" and more:
            j += 1
            idle = parse.integer(argv[j], "ERR Invalid IDLE option argument for XCLAIM")
            delivery_ms = now_ms - idle
        elif option == b"TIME" and more:
            j += 1
            delivery_ms = parse.integer(argv[j], "ERR Invalid TIME option argument for XCLAIM")
        elif option == b"RETRYCOUNT" and more:
            j += 1
            retry = parse.integer(argv[j], "ERR Invalid RETRYCOUNT option argument for XCLAIM")
        elif option == b"LASTID" and more:
            j += 1
            last_id = parse_id(argv[j])
        else:
            raise CommandError(f"ERR Unrecognized XCLAIM option '{_c(argv[j])}'")
        j += 1
    if delivery_ms < 0 or delivery_ms > now_ms:  # also: neither IDLE nor TIME given
        delivery_ms = now_ms
    return delivery_ms, retry, force, justid, last_id


def cmd_xclaim(acc: Access, db: int, argv: list[bytes]) -> Any:
    parse.arity(argv, -6)
    key, name, consumer = argv[1], argv[2], argv[3]
    entry, stream = stream_for(acc, db, key)
    group = None if stream is None else stream.groups.get(name)
    if entry is None or stream is None or group is None:
        raise CommandError(f"NOGROUP No such key '{_c(key)}' or consumer group '{_c(name)}'")
    min_idle = max(parse.integer(argv[4], "ERR Invalid min-idle-time argument for XCLAIM"), 0)
    ids: list[StreamId] = []
    for arg in argv[5:]:  # IDs until the first argument that is not one, then options
        try:
            ids.append(parse_id(arg))
        except CommandError:
            break
    now = acc.now_ms
    delivery_ms, retry, force, justid, last_id = _xclaim_options(argv, 5 + len(ids), now)
    changed = False
    if last_id > group.last_id:
        group.last_id, changed = last_id, True
    reply: list[Any] = []
    seen = False
    for stream_id in ids:
        pending = group.pending.get(stream_id)
        if stream_id not in stream.entries:
            if pending is not None:  # the entry is gone: its pending entry goes too
                del group.pending[stream_id]
                changed = True
            continue
        fresh = pending is None
        if fresh:
            if not force:
                continue
            pending = PendingEntry(consumer, now, 1)  # streamCreateNACK: count 1
        assert pending is not None
        if not fresh and min_idle and now - pending.delivery_time_ms < min_idle:
            continue
        if not seen:  # streamLookupConsumer / streamCreateConsumer: seen now
            group.consumers[consumer], seen = now, True
        group.pending[stream_id] = pending
        pending.consumer, pending.delivery_time_ms = consumer, delivery_ms
        if retry >= 0:
            pending.delivery_count = retry
        elif not justid:
            pending.delivery_count += 1
        reply.append(
            b"%d-%d" % stream_id
            if justid
            else [b"%d-%d" % stream_id, list(stream.entries[stream_id])]
        )
        changed = True
    if changed:
        acc.changed(db, key, entry)
    return reply


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"XGROUP": (cmd_xgroup, [2]),
    b"XACK": (cmd_xack, [1]),
    b"XCLAIM": (cmd_xclaim, [1]),
}
