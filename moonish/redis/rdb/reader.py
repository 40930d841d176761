"""A streaming reader of RDB files: Redis's versions 9 to 12 (Redis 6.2 to 7.4, Valkey 8) and
Valkey's version 80 (Valkey 9; moonish.redis.rdb.valkey).

Wire grammar (docs/rdb-format.md; Redis ``rdb.h``, ``rdbLoadRioWithLoadingCtx`` in ``rdb.c``)::

    file    = ("REDIS" version(4 ASCII digits) | "VALKEY" version(3 ASCII digits))
              item* 0xFF crc64(8 bytes, little endian)
    item    = 0xFA AUX        <string name> <string value>
            | 0xFE SELECTDB   <len db>
            | 0xFB RESIZEDB   <len keys> <len expiring keys>
            | 0xF4 SLOT_INFO  <len slot> <len keys> <len expiring keys>
            | 0xF5 FUNCTION2  <string library code>
            | 0xF7 MODULE_AUX (refused)
            | 0xF3 SLOT_IMPORT (Valkey 9, refused)
            | [0xFC <i64 ms> | 0xFD <i32 s>] [0xF8 <len idle s>] [0xF9 <u8 freq>]
              <type byte> <string key> <value>       (values.py)
    len     = 00xxxxxx | 01xxxxxx yyyyyyyy (14 bits, big endian) | 0x80 <u32 big endian>
            | 0x81 <u64 big endian>
    string  = <len n> <n bytes> | 0xC0 <i8> | 0xC1 <i16 le> | 0xC2 <i32 le>
            | 0xC3 <len compressed> <len uncompressed> <LZF data>

The value types depend on the version (``value_dialect``): 22 is Redis 7.4's pre-GA hash with
field TTLs in versions 9 to 12, Valkey's hash 2 in version 80.

The CRC covers every byte from the magic's first byte through the ``0xFF`` EOF opcode; it is Redis's
CRC-64 "Jones" (``crc64.c``: reflected, polynomial 0xad93d23594c935a9, initial value 0,
no final xor). A stored CRC of 0 means the file was written with ``rdbchecksum no``: not
checked, as Redis does.

The reader consumes exactly the RDB's bytes: after the last item the file object stands right
after the CRC (an AOF's RDB preamble is followed by RESP commands).
"""

from __future__ import annotations

import io
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any, NoReturn

import anycrc  # type: ignore[import-untyped]
import lzf  # type: ignore[import-not-found]

from moonish.errors import CorruptionError, UnsupportedFormatError
from moonish.redis.rdb.valkey import HEADER as VALKEY_HEADER
from moonish.redis.rdb.valkey import (
    OP_SLOT_IMPORT,
    VALKEY_MAGIC,
    VALKEY_VERSIONS,
    ValueReader,
    value_dialect,
)
from moonish.redis.rdb.values import (
    RdbStreamMeta,
    UnsupportedValue,
    ValueCorrupt,
)

MAGIC = b"REDIS"
READ_CHUNK_BYTES = 1 << 24
"""Reads above this size go chunk by chunk, so a damaged length meets the end of the file
before it allocates its size."""
CRC_BATCH_BYTES = 1 << 16
"""Bytes read are added to the CRC this many at a time (one call per small read costs more
than the CRC itself)."""
LZF_MAX_RATIO = 100
"""An LZF back reference of 3 bytes expands to at most 264: a larger ratio is damage."""
MIN_VERSION, MAX_VERSION = 9, 12
HEADER = struct.Struct(
    "5s"  # magic "REDIS"
    "4s"  # version, 4 ASCII digits ("0010")
)
_I32 = struct.Struct("<i")  # EXPIRETIME: seconds since the epoch
_I64 = struct.Struct("<q")  # EXPIRETIME_MS: ms since the epoch
_U64 = struct.Struct("<Q")  # the CRC-64
_BE32 = struct.Struct(">I")  # a 32-bit length
_BE64 = struct.Struct(">Q")  # a 64-bit length

OP_SLOT_INFO, OP_FUNCTION2, OP_FUNCTION_PRE_GA, OP_MODULE_AUX = 0xF4, 0xF5, 0xF6, 0xF7
OP_IDLE, OP_FREQ, OP_AUX, OP_RESIZEDB = 0xF8, 0xF9, 0xFA, 0xFB
OP_EXPIRETIME_MS, OP_EXPIRETIME, OP_SELECTDB, OP_EOF = 0xFC, 0xFD, 0xFE, 0xFF


_CRC64 = anycrc.Model("CRC64-REDIS")


def crc64(crc: int, data: bytes | memoryview) -> int:
    """Redis's CRC-64 of ``data`` continued from ``crc`` (0 to start; Redis ``crc64.c``),
    computed by anycrc's ``CRC64-REDIS`` model."""
    return int(_CRC64.calc(data, crc))


class _KeyContext:
    """An error inside an RDB file: ``path``, ``offset`` and the ``key`` being read (or
    ``None`` outside a key), named at the end of the message."""

    key: bytes | None

    def __init__(self, message: str, *, path: str, offset: int, key: bytes | None) -> None:
        self.key = key
        where = f" in key {key!r}" if key is not None else ""
        super().__init__(message + where, path=path, offset=offset)  # type: ignore[call-arg]


class RdbCorruptionError(_KeyContext, CorruptionError):
    """An RDB file's bytes are damaged: a bad CRC, a truncated file, a bad encoding.

    Attributes:
        path, offset: the file and the byte offset of what failed.
        key: the key being read, or ``None`` outside a key.
    """


class RdbUnsupportedError(_KeyContext, UnsupportedFormatError):
    """An RDB file holds what this reader does not read: another version, a module value or
    module data, an unknown opcode or type.

    Attributes:
        path, offset, key: as :class:`RdbCorruptionError`.
    """


@dataclass(frozen=True, slots=True)
class RdbAux:
    """An AUX field (``redis-ver``, ``ctime``, ``used-mem``, ``repl-id``, ...)."""

    name: bytes
    value: bytes


@dataclass(frozen=True, slots=True)
class RdbFunction:
    """A function library (FUNCTION2): its code, as ``FUNCTION LOAD`` takes it."""

    code: bytes


@dataclass(frozen=True, slots=True)
class RdbResizeDb:
    """A RESIZEDB hint: how many keys (and keys with an expiry) the current db holds."""

    db: int
    keys: int
    expiring_keys: int


@dataclass(frozen=True, slots=True)
class RdbSlotInfo:
    """A SLOT_INFO hint (cluster mode): how many keys a hash slot holds."""

    slot: int
    keys: int
    expiring_keys: int


@dataclass(frozen=True, slots=True)
class RdbKey:
    """One key. ``value`` is in moonish's form for ``type`` (:mod:`moonish.values.model`):
    ``bytes``, ``list[bytes]``, ``set[bytes]``, ``SortedSet``, ``dict[bytes, bytes]``,
    ``Stream`` (entries and last ID; the rest of the stream, its consumer groups included,
    is in ``stream``). A Redis 7.4 hash's field expiry times (ms since the epoch) are in
    ``field_expire_at_ms`` (fields without one left out; ``None`` for other types). An
    empty container is yielded as it is (Redis drops such keys on load). ``expire_at_ms`` is
    ms since the Unix epoch (possibly in the past); ``idle_s``/``lfu_freq`` are the IDLE and
    FREQ hints. ``offset`` is where the key's record starts in the file."""

    db: int
    key: bytes
    type: str
    value: Any
    expire_at_ms: int | None
    offset: int
    idle_s: int | None = None
    lfu_freq: int | None = None
    stream: RdbStreamMeta | None = None
    field_expire_at_ms: dict[bytes, int] | None = None


RdbItem = RdbAux | RdbFunction | RdbResizeDb | RdbSlotInfo | RdbKey


class _Source:
    """Exact reads from a file object, counting the offset and the CRC-64 of what was read."""

    __slots__ = (
        "_crc",
        "_unsummed",
        "_unsummed_bytes",
        "file",
        "key",
        "offset",
        "path",
        "string_offset",
    )

    def __init__(self, file: IO[bytes], path: str) -> None:
        self.file, self.path = file, path
        self.offset = 0
        self._crc = 0
        self._unsummed: list[bytes] = []  # read, not yet in the CRC: summed in batches
        self._unsummed_bytes = 0
        self.string_offset = 0
        self.key: bytes | None = None

    def corrupt(self, message: str, offset: int | None = None) -> NoReturn:
        raise RdbCorruptionError(
            message, path=self.path, offset=self.offset if offset is None else offset, key=self.key
        )

    def unsupported(self, message: str, offset: int) -> NoReturn:
        raise RdbUnsupportedError(message, path=self.path, offset=offset, key=self.key)

    def read(self, size_bytes: int) -> bytes:
        data = self.file.read(size_bytes) if size_bytes <= READ_CHUNK_BYTES else b""
        if len(data) != size_bytes:  # a large or short read: chunk by chunk, to the end
            chunks, have = [data], len(data)
            while have < size_bytes:
                chunk = self.file.read(min(size_bytes - have, READ_CHUNK_BYTES))
                if not chunk:
                    self.corrupt(
                        f"truncated RDB file: {size_bytes} bytes needed, {have} left",
                        self.offset + have,
                    )
                chunks.append(chunk)
                have += len(chunk)
            data = b"".join(chunks)
        self._unsummed.append(data)
        self._unsummed_bytes += size_bytes
        if self._unsummed_bytes >= CRC_BATCH_BYTES:
            self.crc()
        self.offset += size_bytes
        return data

    def crc(self) -> int:
        """The CRC-64 of every byte read so far."""
        if self._unsummed:
            self._crc = crc64(self._crc, b"".join(self._unsummed))
            self._unsummed.clear()
            self._unsummed_bytes = 0
        return self._crc

    def byte(self) -> int:
        return self.read(1)[0]

    def _length_or_encoding(self) -> tuple[int, bool]:
        first = self.byte()
        kind = first >> 6
        if kind == 0:
            return first & 0x3F, False
        if kind == 1:
            return ((first & 0x3F) << 8) | self.byte(), False
        if kind == 3:
            return first & 0x3F, True
        if first == 0x80:
            return int(_BE32.unpack(self.read(4))[0]), False
        if first == 0x81:
            return int(_BE64.unpack(self.read(8))[0]), False
        self.corrupt(f"unknown length encoding 0x{first:02x}", self.offset - 1)

    def length(self) -> int:
        at = self.offset
        value, encoded = self._length_or_encoding()
        if encoded:
            self.corrupt("a string encoding where a length is expected", at)
        return value

    def string(self) -> bytes:
        self.string_offset = at = self.offset
        value, encoded = self._length_or_encoding()
        if not encoded:
            return self.read(value)
        if value == 0:
            return b"%d" % int.from_bytes(self.read(1), "little", signed=True)
        if value == 1:
            return b"%d" % int.from_bytes(self.read(2), "little", signed=True)
        if value == 2:
            return b"%d" % int.from_bytes(self.read(4), "little", signed=True)
        if value == 3:
            compressed_len = self.length()
            plain_len = self.length()
            if plain_len > LZF_MAX_RATIO * compressed_len:
                self.corrupt(f"LZF string of {compressed_len} bytes claims {plain_len}", at)
            data = self.read(compressed_len)
            try:
                plain = lzf.decompress(data, plain_len) if plain_len else b""
            except ValueError:
                plain = None
            if plain is None or len(plain) != plain_len:
                self.corrupt(f"LZF string does not decompress to {plain_len} bytes", at)
            return bytes(plain)
        self.corrupt(f"unknown string encoding 0x{0xC0 | value:02x}", at)


class RdbReader:
    """Reads an RDB file's items in file order, one value in memory at a time.

    Iterate it once. ``version`` is set once the header has been read (by the first
    ``next``), ``checksum`` once the iteration ended::

        with open("dump.rdb", "rb") as file:
            for item in RdbReader(file, "dump.rdb"):
                if isinstance(item, RdbKey):
                    print(item.db, item.key, item.type, item.expire_at_ms)

    Source: Redis ``rdb.c`` (``rdbLoadRioWithLoadingCtx``, ``rdbLoadObject``).
    """

    def __init__(self, file: IO[bytes], path: str | os.PathLike[str]) -> None:
        self._src = _Source(file, os.fspath(path))
        self.version: int | None = None
        """The RDB version (80: Valkey's ``VALKEY080``) once the header was read."""
        self.checksum: int | None = None
        """The stored CRC-64 once the EOF opcode was read (0: written without one)."""

    def __iter__(self) -> Iterator[RdbItem]:
        """Yield :class:`RdbAux`, :class:`RdbFunction`, :class:`RdbResizeDb`,
        :class:`RdbSlotInfo` and :class:`RdbKey` items in file order; stop after the CRC.

        Raises:
            RdbCorruptionError: a bad CRC, a truncated file, bytes that do not follow their
                encoding, a duplicate member in a set, hash or zset, a NaN score.
            RdbUnsupportedError: not an RDB file, a version outside 9..12 (``REDIS``) or 80
                (``VALKEY``), module data or a module value, Valkey's slot import state, an
                unknown opcode or type.
        """
        src = self._src
        version = self.version = self._header()
        type_names, read_value = value_dialect(version)
        db = 0
        expire_at_ms: int | None = None
        idle_s: int | None = None
        lfu_freq: int | None = None
        record_offset: int | None = None
        while True:
            at = src.offset
            if record_offset is None:
                record_offset = at
            op = src.byte()
            if op == OP_EOF:
                break
            if op == OP_EXPIRETIME_MS:
                expire_at_ms = int(_I64.unpack(src.read(8))[0])
            elif op == OP_EXPIRETIME:
                expire_at_ms = int(_I32.unpack(src.read(4))[0]) * 1000
            elif op == OP_IDLE:
                idle_s = src.length()
            elif op == OP_FREQ:
                lfu_freq = src.byte()
            else:
                pending = expire_at_ms is not None or idle_s is not None or lfu_freq is not None
                if pending and op not in type_names:
                    src.corrupt(f"opcode 0x{op:02x} between a key's attributes and the key", at)
                if op in type_names:
                    yield self._key(
                        read_value, op, db, expire_at_ms, record_offset, idle_s, lfu_freq
                    )
                elif op == OP_SELECTDB:
                    db = src.length()
                elif op == OP_RESIZEDB:
                    yield RdbResizeDb(db, src.length(), src.length())
                elif op == OP_SLOT_INFO:
                    yield RdbSlotInfo(src.length(), src.length(), src.length())
                elif op == OP_AUX:
                    yield RdbAux(src.string(), src.string())
                elif op == OP_FUNCTION2:
                    yield RdbFunction(src.string())
                elif op == OP_MODULE_AUX:
                    src.unsupported("module data (MODULE_AUX) is not supported", at)
                elif op == OP_FUNCTION_PRE_GA:
                    src.unsupported("pre-release (7.0 RC) functions are not supported", at)
                elif op == OP_SLOT_IMPORT and version in VALKEY_VERSIONS:
                    src.unsupported(
                        "Valkey's atomic slot migration state (SLOT_IMPORT) is not supported", at
                    )
                else:
                    src.unsupported(
                        f"unknown opcode or value type 0x{op:02x} in RDB version {version}", at
                    )
                expire_at_ms = idle_s = lfu_freq = None
                record_offset = None
        expected = src.crc()
        (stored,) = _U64.unpack(src.read(8))
        self.checksum = stored
        if stored != 0 and stored != expected:
            src.corrupt(
                f"RDB CRC-64 mismatch: stored {stored:016x}, computed {expected:016x}",
                src.offset - 8,
            )

    def _header(self) -> int:
        """The version of the ``REDIS`` or ``VALKEY`` header, checked (``rdbLoadRioWithLoadingCtx``;
        Valkey 9 ``rdb.c``, the same function)."""
        src = self._src
        head = src.read(HEADER.size)  # both headers are 9 bytes
        magic, digits = HEADER.unpack(head)
        supported = f"REDIS versions {MIN_VERSION} to {MAX_VERSION} and VALKEY 080 are"
        if magic == MAGIC and digits.isdigit():
            version = int(digits)
            if not MIN_VERSION <= version <= MAX_VERSION:
                src.unsupported(f"RDB version {version} is not supported ({supported})", 5)
            return version
        magic, digits = VALKEY_HEADER.unpack(head)
        if magic != VALKEY_MAGIC or not digits.isdigit():
            src.unsupported(f"not a Redis or Valkey RDB file (starts with {head!r})", 0)
        version = int(digits)
        if version not in VALKEY_VERSIONS:
            src.unsupported(f"Valkey RDB version {version} is not supported ({supported})", 6)
        return version

    def _key(
        self,
        read_value: ValueReader,
        rdb_type: int,
        db: int,
        expire_at_ms: int | None,
        offset: int,
        idle_s: int | None,
        lfu_freq: int | None,
    ) -> RdbKey:
        src = self._src
        key = src.string()
        src.key = key
        try:
            decoded = read_value(src, rdb_type)
        except ValueCorrupt as exc:
            src.corrupt(exc.message, src.string_offset if exc.position is None else exc.position)
        except UnsupportedValue as exc:
            src.unsupported(str(exc), offset)
        src.key = None
        return RdbKey(
            db,
            key,
            decoded.type,
            decoded.value,
            expire_at_ms,
            offset,
            idle_s,
            lfu_freq,
            decoded.stream,
            decoded.field_expire_at_ms,
        )


def read_rdb(path: str | os.PathLike[str]) -> Iterator[RdbItem]:
    """Open ``path`` and yield its items (:meth:`RdbReader.__iter__`); the file is closed when
    the iteration ends or the generator is closed.

    Raises:
        OSError: the file cannot be opened.
        RdbCorruptionError, RdbUnsupportedError: as :meth:`RdbReader.__iter__`.
    """
    with open(path, "rb") as file:
        yield from RdbReader(file, path)


def bytes_source(data: bytes, name: str) -> _Source:
    """A reader of RDB lengths, strings and values (:func:`read_value`) over ``data``, such
    as a DUMP payload; offsets count from ``data``'s first byte and errors
    (:class:`RdbCorruptionError`) name ``name`` as their path."""
    return _Source(io.BytesIO(data), name)
