"""``RESTORE`` and ``FUNCTION RESTORE``: commands whose argument is a ``DUMP`` payload, an RDB
value decoded with moonish.redis.rdb_values. Importing this module adds them to the command
table (moonish.state.execute ``register``; ``import moonish`` does).

A DUMP payload (Redis ``cluster.c`` ``createDumpPayload`` / ``verifyDumpPayload``)::

    payload := body rdb_version:u16 crc64:u64        (both little endian)
    body    := <type byte> <value>                   DUMP of a key (rdb_values.py)
             | (0xF5 <string library code>)*         FUNCTION DUMP (functions.c)

``crc64`` is Redis's CRC-64 (moonish.redis.rdb ``crc64``) of every byte before it. A payload of
an RDB version above this reader's (:data:`moonish.redis.rdb.MAX_VERSION`, 12: Redis 7.4) or
with a wrong CRC is refused as Redis refuses it. Redis 7.0 itself refuses versions above 10;
moonish takes what Redis 7.2 and 7.4 write too, since their AOFs hold such payloads.

RESTORE key ttl payload [REPLACE] [ABSTTL] [IDLETIME s] [FREQ f] (``restoreCommand``, cluster.c,
Redis 7.0): options are checked first, then BUSYKEY (without REPLACE), the TTL (0: none;
relative ms unless ABSTTL), then the payload. A TTL already past deletes the key (a
replaced key is then logged as Redis propagates it, ``DEL key``) except while loading an AOF,
where the key is set with that expiry time and removed by the sweep after the import. IDLETIME
and FREQ are checked and not kept (moonish holds no LRU/LFU data). A restored key is logged by
value (``Replay.STATE``), so replaying the log needs no RDB decoder.

Refused with :class:`UnsupportedFormatError` naming the key: module values. A stream keeps its
counters and consumer groups (moonish.redis.rdb_streams), a Redis 7.4 hash its field TTLs.
"""

from __future__ import annotations

import struct
from typing import Any

from moonish.errors import CommandError, UnsupportedFormatError
from moonish.redis.rdb import (
    MAX_VERSION,
    OP_FUNCTION2,
    RdbCorruptionError,
    RdbKey,
    bytes_source,
    crc64,
)
from moonish.redis.rdb_load import entry_of_key
from moonish.redis.rdb_values import TYPE_NAMES, UnsupportedValue, ValueCorrupt, read_value
from moonish.state import functions, parse
from moonish.state.execute import register
from moonish.state.keyspace import Access
from moonish.state.values import HASH, LIST, SET, ZSET, Entry, text

FOOTER = struct.Struct(
    "<"
    "H"  # rdb_version: the RDB version of the body's encoding
    "Q"  # crc64: Redis's CRC-64 of every payload byte before this field
)
PAYLOAD_ERROR = "ERR DUMP payload version or checksum are wrong"
BAD_DATA = "ERR Bad data format"
BUSYKEY = "BUSYKEY Target key name already exists."
_CONTAINERS = frozenset({HASH, LIST, SET, ZSET})


def verify_dump_payload(payload: bytes) -> int:
    """The RDB version of a DUMP payload whose footer holds (``verifyDumpPayload``).

    Raises:
        CommandError: shorter than the footer, a version above :data:`MAX_VERSION`, or a CRC
            that does not match (Redis's error text).
    """
    if len(payload) < FOOTER.size:
        raise CommandError(PAYLOAD_ERROR)
    version, stored = FOOTER.unpack_from(payload, len(payload) - FOOTER.size)
    if version > MAX_VERSION or crc64(0, payload[:-8]) != stored:
        raise CommandError(PAYLOAD_ERROR)
    return int(version)


def decode_dump(key: bytes, payload: bytes) -> Entry:
    """The value of a key's verified DUMP payload as a keyspace entry (no expiry).

    Raises:
        CommandError: ``Bad data format``: not a value type, bytes that do not follow the
            encoding, or an empty container (Redis's ``rdbLoadObject`` refuses them too).
        UnsupportedFormatError: a module value (the key named).
    """
    src = bytes_source(payload, "RESTORE payload")
    try:
        rdb_type = src.byte()
        if rdb_type not in TYPE_NAMES:
            raise CommandError(BAD_DATA)
        decoded = read_value(src, rdb_type)
    except (ValueCorrupt, RdbCorruptionError):
        raise CommandError(BAD_DATA) from None
    except UnsupportedValue as exc:
        raise UnsupportedFormatError(f"cannot RESTORE key {key!r}: {exc}") from None
    if decoded.type in _CONTAINERS and not decoded.value:
        raise CommandError(BAD_DATA)
    item = RdbKey(0, key, decoded.type, decoded.value, None, 0, stream=decoded.stream,
                  field_expire_at_ms=decoded.field_expire_at_ms)  # fmt: skip
    try:  # a stream with its counters and groups, a hash with its field TTLs
        return entry_of_key(item, "RESTORE payload")
    except RdbCorruptionError:  # a pending entry no consumer owns
        raise CommandError(BAD_DATA) from None


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
    verify_dump_payload(argv[3])
    entry = decode_dump(key, argv[3])
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


def decode_function_dump(payload: bytes) -> list[tuple[bytes, bytes]]:
    """The (library name, code) pairs of a verified FUNCTION DUMP payload, in payload order
    (``functionRestoreCommand``, and ``rdbFunctionLoad`` in rdb.c).

    Raises:
        CommandError: Redis's error: an item that is not a function, a code string that
            cannot be read, a bad shebang, or a library twice in the payload.
    """
    src = bytes_source(payload, "FUNCTION RESTORE payload")
    found: dict[bytes, bytes] = {}
    while len(payload) - src.offset > FOOTER.size:
        if src.byte() != OP_FUNCTION2:
            raise CommandError("ERR given type is not a function")
        try:
            code = src.string()
        except RdbCorruptionError:
            raise CommandError("ERR Failed loading library payload") from None
        name = functions.library_name(code)
        if name in found:
            raise CommandError(f"ERR Library '{name.decode()}' already exists")
        found[name] = code
    return list(found.items())


POLICIES = {b"append": "append", b"replace": "replace", b"flush": "flush"}


def cmd_function_restore(acc: Access, db: int, argv: list[bytes]) -> Any:
    """``FUNCTION RESTORE <payload> [FLUSH|APPEND|REPLACE]``: the libraries of a FUNCTION DUMP
    payload, added with the policy (default APPEND)."""
    libraries = acc.libraries
    if libraries is None:
        raise UnsupportedFormatError("FUNCTION runs only on a shard writer's keyspace")
    if len(argv) > 4:
        raise functions.subcommand_syntax_error(argv)
    policy = "append"
    if len(argv) == 4:
        chosen = POLICIES.get(argv[3].split(b"\0", 1)[0].lower())  # strcasecmp
        if chosen is None:
            raise CommandError(
                "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE."
            )
        policy = chosen
    verify_dump_payload(argv[2])
    restored = decode_function_dump(argv[2])
    functions.restore_libraries(libraries, restored, policy)
    functions.log(acc, db, {
        "command": "restore", "policy": policy,
        "libraries": [{"library": name.decode(), "code": text(code)}
                      for name, code in restored],
    })  # fmt: skip
    return b"OK"


register(b"RESTORE", cmd_restore, [1])
functions.SUBCOMMANDS[b"RESTORE"] = (cmd_function_restore, -3)
