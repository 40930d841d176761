"""``RESTORE``: a key set from a ``DUMP`` payload (moonish.redis.rdb.dump decodes it).

RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f] (``restoreCommand``, cluster.c,
Redis 7.0): options are checked first, then BUSYKEY (without REPLACE), the TTL (0: none;
relative ms unless ABSTTL), then the payload. A TTL already past deletes the key (a
replaced key is then logged as Redis propagates it, ``DEL key``) except while loading an AOF,
where the key is set with that expiry time and removed by the sweep after the import. IDLETIME
and FREQ are checked and not kept (moonish holds no LRU/LFU data). A restored key is logged by
value (``Replay.STATE``), so replaying the log needs no RDB decoder.

Refused with :class:`UnsupportedFormatError` naming the key: module values. A stream keeps its
counters and consumer groups (moonish.redis.rdb.streams), a Redis 7.4 hash its field TTLs.
``FUNCTION RESTORE`` is a FUNCTION subcommand (moonish.state.commands.functions).

``RESTORE-ASKING`` (what ``MIGRATE`` sends a cluster node, which propagates it to its replicas
and AOF as received) is the same command (``commands/restore-asking.json``: ``"function":
"restoreCommand"``); a cluster capture pairs it with the source node's ``DEL``
(moonish.redis.cluster.handoff).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from moonish.errors import CommandError
from moonish.redis.rdb.dump import decode_dump, verify_dump_payload
from moonish.state.commands import parse
from moonish.state.keyspace import Access

BUSYKEY = "BUSYKEY Target key name already exists."


def _options(argv: list[bytes]) -> tuple[bool, bool]:
    """(REPLACE, ABSTTL) of RESTORE's options, checked in Redis's order."""
    replace = absttl = False
    idle = freq = False
    i = 4
    while i < len(argv):
        option, more = argv[i].lower(), len(argv) - i - 1
        if option == b"replace":
            replace = True
        elif option == b"absttl":
            absttl = True
        elif option == b"idletime" and more >= 1 and not freq:
            i += 1
            if parse.integer(argv[i]) < 0:
                raise CommandError("ERR Invalid IDLETIME value, must be >= 0")
            idle = True
        elif option == b"freq" and more >= 1 and not idle:
            i += 1
            if not 0 <= parse.integer(argv[i]) <= 255:
                raise CommandError("ERR Invalid FREQ value, must be >= 0 and <= 255")
            freq = True
        else:
            raise CommandError(parse.SYNTAX)
        i += 1
    return replace, absttl


def cmd_restore(acc: Access, db: int, argv: list[bytes]) -> Any:
    """``RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f]`` (module
    docstring)."""
    parse.arity(argv, -4)
    replace, absttl = _options(argv)
    key = argv[1]
    existing = acc.get(db, key)
    if existing is not None and not replace:
        raise CommandError(BUSYKEY)
    ttl = parse.integer(argv[2])
    if ttl < 0:
        raise CommandError("ERR Invalid TTL value, must be >= 0")
    entry = decode_dump(key, argv[3], verify_dump_payload(argv[3]))
    acc.by_value = True
    if ttl and not absttl:
        ttl += acc.now_ms
    if ttl and ttl <= acc.now_ms and acc.expire:  # checkAlreadyExpired: not when loading
        if existing is not None:
            acc.remove(db, key)
            acc.log_argv = [b"DEL", key]
        return b"OK"
    entry.expire_at_ms = ttl or None
    acc.put(db, key, entry)
    return b"OK"


COMMANDS: dict[bytes, tuple[Callable[[Access, int, list[bytes]], Any], Any]] = {
    b"RESTORE": (cmd_restore, [1]),
    b"RESTORE-ASKING": (cmd_restore, [1]),
}
"""The command of this module -> (handler, key positions), as in moonish.state.commands.execute."""
