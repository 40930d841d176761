"""The records of one command: for every key it wrote whose existence or value changed, a
``kv_change`` record (``c``/``u``/``d``) with images per the shard's stream view type, and how
the record replays (docs/images.md; moonish.log.payloads, "kv_change").

Ordering: the records follow ``Access.written`` (the order the command wrote its keys). The
first record of a command that replays by command carries its arguments; the others replay
with it (``Replay.NONE``); a command that replays by value gives each record the key's
state (``Replay.STATE``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from moonish.log.frames import kv_change
from moonish.log.records import KvChange, Message, Replay, ViewType
from moonish.state.keyspace import Access, Keyspace
from moonish.values.model import full_image, key_image, state_image

# The enum members the write path uses, read once: compiled code reads a Final from a C
# static instead of looking the member up on its class each time.
OFF: Final = ViewType.OFF
NONE: Final = Replay.NONE
COMMAND: Final = Replay.COMMAND
STATE: Final = Replay.STATE
_new_change: Final = kv_change  # the records' constructor (C where built), as a C static

Facts = tuple[ViewType, int, bool, bool]
"""What the write path reads of a stream configuration: (view, image limit in bytes, old
images, new images)."""


def change_records(
    facts: Facts,
    keyspace: Keyspace,
    live_source: bool,
    acc: Access,
    argv: list[bytes],
    replay: Replay,
    owns: Callable[[bytes], bool] | None = None,
) -> list[KvChange | Message]:
    """One record per key ``acc`` wrote in ``keyspace`` (those ``owns`` accepts, when given)
    whose existence or value changed, in the order written. ``live_source``: a ``d`` of a
    key whose expiry time had passed at the command's time (``acc.overdue``: the master's
    ``DEL``/``UNLINK`` of a key it expired) is marked as an expiry."""
    view, limit, old, new = facts
    off, loading = view is OFF, not acc.expire
    dbs, before_of, overdue = keyspace.dbs, acc.before, acc.overdue
    lapses = live_source and bool(overdue)
    command = argv[0]
    out: list[KvChange | Message] = []
    for db, key in acc.written:
        if owns is not None and not owns(key):
            continue
        existed, before_image = before_of[db, key]
        keys = dbs.get(db)
        entry = None if keys is None else keys.get(key)
        lapsed = False
        if entry is None:
            if not existed:
                continue
            op = "d"
            lapsed = lapses and (db, key) in overdue
        else:
            op = "u" if existed else "c"
        before = after = b""
        if not off:
            only_key = b"" if old and new else key_image(db, key)
            if existed:
                before = before_image if old and before_image else only_key
            if entry is not None:
                after = full_image(db, key, entry, limit) if new else only_key
        state = b""
        args: tuple[bytes, ...] = ()
        if replay is STATE:
            kind = STATE
            if entry is not None:
                state = state_image(db, key, entry)
        elif out:
            kind = NONE
        else:  # the first record replays the command
            kind, args = COMMAND, tuple(argv)
        out.append(
            _new_change(
                op,
                db,
                command,
                key,
                before,
                after,
                view,
                lapsed,
                kind,
                state,
                args,
                loading,
                b"",
                "",
            )
        )
    return out
