"""Loading an RDB file into shards: the keys it holds, as Redis's loader keeps them.

Used for an AOF whose base is an RDB file (``aof-use-rdb-preamble yes``, Redis's default), for
``moonish wal import-rdb`` and for the payload of a replica's full resync. The whole file is
read (and its CRC-64 checked) before any record is written, so a damaged or truncated file
writes nothing; the keys are then held per shard in memory, as the shards' keyspaces hold them
anyway.

What Redis's loader does, and so does this one (Redis ``rdb.c``, ``rdbLoadRioWithLoadingCtx``):

- an empty list, set, zset or hash is skipped (``empty_keys_skipped``);
- a key whose expiry time has passed is skipped when a master loads a snapshot (``keys
  expired``), but kept when the RDB is the base of an AOF (the AOF's own commands, or the
  expiry that follows loading, remove it): ``drop_expired``;
- a key twice in one db is an error (Redis panics: "Duplicated key found in RDB file").
"""

from __future__ import annotations

import os
from collections.abc import Container
from dataclasses import dataclass, field
from typing import IO

from moonish.errors import MoonishError
from moonish.redis.rdb.keys import hash_entry
from moonish.redis.rdb.reader import (
    READ_CHUNK_BYTES,
    RdbAux,
    RdbCorruptionError,
    RdbFunction,
    RdbKey,
    RdbReader,
    RdbUnsupportedError,
    crc64,
)
from moonish.redis.rdb.streams import complete_stream
from moonish.slots import shard_of_key
from moonish.values.model import STREAM, STRING, Entry

CRC_BYTES = 8


@dataclass
class RdbContents:
    """What an RDB file holds, split by shard.

    Attributes:
        keys: per shard, ``(db, key, entry)`` in file order.
        functions: function library codes (FUNCTION2), in file order.
        aux: AUX fields (``redis-ver``, ``repl-id`` ...), name -> value.
        version: the RDB version.
        keys_loaded, keys_expired, empty_keys_skipped: as Redis's loader counts them.
    """

    keys: list[list[tuple[int, bytes, Entry]]]
    functions: list[bytes] = field(default_factory=list)
    aux: dict[bytes, bytes] = field(default_factory=dict)
    version: int = 0
    keys_loaded: int = 0
    keys_expired: int = 0
    empty_keys_skipped: int = 0


def rdb_identity(path: str) -> str:
    """``<size>-<stored CRC-64 as 16 hex digits>`` of an RDB file: what tells two dumps
    apart (Redis stores the CRC in the last 8 bytes).

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(max(0, size - CRC_BYTES))
        return f"{size}-{file.read(CRC_BYTES)[::-1].hex()}"


def damage_or_unsupported(path: str, error: RdbUnsupportedError) -> MoonishError:
    """What an unsupported item in the RDB file ``path`` really is: damage when the file's
    stored CRC-64 (its last 8 bytes) does not match its bytes (a flipped byte can read as an
    unknown opcode or type), else ``error`` itself. A stored CRC of 0 (``rdbchecksum no``)
    leaves ``error`` as it is.

    Raises:
        OSError: the file cannot be read.
    """
    with open(path, "rb") as file:
        size = file.seek(0, os.SEEK_END)
        file.seek(0)
        crc, left = 0, size - CRC_BYTES
        while left > 0:
            chunk = file.read(min(left, READ_CHUNK_BYTES))
            if not chunk:
                return error  # shrank while read
            crc, left = crc64(crc, chunk), left - len(chunk)
        stored = int.from_bytes(file.read(CRC_BYTES), "little")
    if not stored or stored == crc:
        return error
    return RdbCorruptionError(
        f"damaged RDB file: its CRC-64 does not match (stored {stored:016x}, computed "
        f"{crc:016x}), where the reader found: {error.message}",
        path=path,
        offset=error.offset if error.offset is not None else 0,
        key=None,
    )


def read_contents(
    file: IO[bytes],
    path: str,
    shards: int,
    *,
    now_ms: int,
    drop_expired: bool,
    shards_kept: Container[int] | None = None,
) -> RdbContents:
    """Read a whole RDB from ``file`` (``path`` for errors) and split its keys by shard
    (``moonish.slots.shard_of_key``).

    Args:
        now_ms: the time expiry is judged against (ms since the Unix epoch).
        drop_expired: skip keys whose expiry time is before ``now_ms`` (a master loading a
            snapshot); else keep them (an AOF's base, a replica).

    Raises:
        RdbCorruptionError, RdbUnsupportedError: as ``RdbReader`` (a bad CRC, truncation,
            module values...), and a key twice in one db; nothing was returned.
    """
    contents = RdbContents([[] for _ in range(shards)])
    seen: set[tuple[int, bytes]] = set()
    reader = RdbReader(file, path)
    for item in reader:
        if isinstance(item, RdbKey):
            if (item.db, item.key) in seen:
                raise RdbCorruptionError(
                    'the key is in the RDB twice (Redis refuses to load it: "Duplicated key '
                    'found in RDB file")',
                    path=path,
                    offset=item.offset,
                    key=item.key,
                )
            seen.add((item.db, item.key))
            if item.type not in (STRING, STREAM) and not item.value:
                contents.empty_keys_skipped += 1
                continue
            expire = item.expire_at_ms
            if drop_expired and expire is not None and expire < now_ms:
                contents.keys_expired += 1
                continue
            contents.keys_loaded += 1
            shard = shard_of_key(item.key, shards)
            if shards_kept is None or shard in shards_kept:
                contents.keys[shard].append((item.db, item.key, entry_of_key(item, path)))
        elif isinstance(item, RdbFunction):
            contents.functions.append(item.code)
        elif isinstance(item, RdbAux):
            contents.aux[item.name] = item.value
    contents.version = reader.version or 0
    return contents


def entry_of_key(item: RdbKey, path: str) -> Entry:
    """The keyspace entry of an RDB key read from the file at ``path``: its value is already
    in moonish's form; a stream gets its counters and consumer groups
    (moonish.redis.rdb.streams), a Redis 7.4 hash its field TTLs (moonish.redis.rdb.keys).

    Raises:
        RdbCorruptionError: a stream's pending entry that no consumer owns.
    """
    if item.type == STREAM:
        return Entry(STREAM, complete_stream(item, path), item.expire_at_ms)
    if item.field_expire_at_ms:
        return hash_entry(item)  # kept as Redis 7.4 loads them
    return Entry(item.type, item.value, item.expire_at_ms)


def read_file_contents(path: str, shards: int, *, now_ms: int, drop_expired: bool) -> RdbContents:
    """:func:`read_contents` of the RDB file at ``path``; an unsupported item in a file whose
    CRC-64 does not match is reported as the damage it is (:func:`damage_or_unsupported`).

    Raises:
        RdbCorruptionError, RdbUnsupportedError: as :func:`read_contents`.
        OSError: the file cannot be read.
    """
    try:
        with open(path, "rb") as file:
            return read_contents(file, path, shards, now_ms=now_ms, drop_expired=drop_expired)
    except RdbUnsupportedError as error:
        raise damage_or_unsupported(path, error) from error
