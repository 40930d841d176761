"""DUMP payloads: a key's value as ``DUMP`` writes it and ``RESTORE`` reads it, an RDB value
with a footer.

A DUMP payload (Redis ``cluster.c`` ``createDumpPayload`` / ``verifyDumpPayload``)::

    payload := body rdb_version:u16 crc64:u64        (both little endian)
    body    := <type byte> <value>                   DUMP of a key (moonish.redis.rdb.values)
             | (0xF5 <string library code>)*         FUNCTION DUMP (functions.c)

``crc64`` is Redis's CRC-64 (moonish.redis.rdb.reader ``crc64``) of every byte before it. A
payload of an RDB version above this reader's (:data:`moonish.redis.rdb.reader.MAX_VERSION`,
12: Redis 7.4), other than Valkey 9's 80, or with a wrong CRC is refused as Redis refuses it.
Redis 7.0 itself refuses versions above 10; moonish takes what Redis 7.2 and 7.4 write too,
since their AOFs hold such payloads, and Valkey 9's (footer version 80, the same CRC-64; Valkey
``cluster.c`` ``createDumpPayload`` / ``verifyDumpPayload``), whose body is read in Valkey's
dialect (type 22 is its hash 2: moonish.redis.rdb.valkey). The commands that take these
payloads are in moonish.state.commands (``restore``, ``functions``).
"""

from __future__ import annotations

import struct

from moonish.errors import CommandError, UnsupportedFormatError
from moonish.redis.rdb.contents import entry_of_key
from moonish.redis.rdb.reader import MAX_VERSION, RdbCorruptionError, RdbKey, bytes_source, crc64
from moonish.redis.rdb.valkey import VALKEY_VERSIONS, value_dialect
from moonish.redis.rdb.values import UnsupportedValue, ValueCorrupt
from moonish.values.model import HASH, LIST, SET, ZSET, Entry

FOOTER = struct.Struct(
    "<"
    "H"  # rdb_version: the RDB version of the body's encoding
    "Q"  # crc64: Redis's CRC-64 of every payload byte before this field
)


PAYLOAD_ERROR = "ERR DUMP payload version or checksum are wrong"


BAD_DATA = "ERR Bad data format"


_CONTAINERS = frozenset({HASH, LIST, SET, ZSET})


def verify_dump_payload(payload: bytes) -> int:
    """The RDB version of a DUMP payload whose footer holds (``verifyDumpPayload``).

    Raises:
        CommandError: shorter than the footer, a version above :data:`MAX_VERSION` that is
            not Valkey's (80), or a CRC that does not match (Redis's error text).
    """
    if len(payload) < FOOTER.size:
        raise CommandError(PAYLOAD_ERROR)
    version, stored = FOOTER.unpack_from(payload, len(payload) - FOOTER.size)
    supported = version <= MAX_VERSION or version in VALKEY_VERSIONS
    if not supported or crc64(0, payload[:-8]) != stored:
        raise CommandError(PAYLOAD_ERROR)
    return int(version)


def decode_dump(key: bytes, payload: bytes, rdb_version: int) -> Entry:
    """The value of a key's verified DUMP payload as a keyspace entry (no expiry), its body
    read in the dialect of ``rdb_version`` (:func:`verify_dump_payload`'s result).

    Raises:
        CommandError: ``Bad data format``: not a value type, bytes that do not follow the
            encoding, or an empty container (Redis's ``rdbLoadObject`` refuses them too).
        UnsupportedFormatError: a module value (the key named).
    """
    src = bytes_source(payload, "RESTORE payload")
    type_names, read_value = value_dialect(rdb_version)
    try:
        rdb_type = src.byte()
        if rdb_type not in type_names:
            raise CommandError(BAD_DATA)
        decoded = read_value(src, rdb_type)
    except (ValueCorrupt, RdbCorruptionError):
        raise CommandError(BAD_DATA) from None
    except UnsupportedValue as exc:
        raise UnsupportedFormatError(f"cannot RESTORE key {key!r}: {exc}") from None
    if decoded.type in _CONTAINERS and not decoded.value:
        raise CommandError(BAD_DATA)
    item = RdbKey(
        0,
        key,
        decoded.type,
        decoded.value,
        None,
        0,
        stream=decoded.stream,
        field_expire_at_ms=decoded.field_expire_at_ms,
    )
    try:  # a stream with its counters and groups, a hash with its field TTLs
        return entry_of_key(item, "RESTORE payload")
    except RdbCorruptionError:  # a pending entry no consumer owns
        raise CommandError(BAD_DATA) from None
