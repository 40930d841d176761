"""Decoding one RDB value (the bytes after a key's type byte and key) into moonish's form.

The value is returned as a :class:`Decoded` ``(type, value, stream, field_expire_at_ms)``,
``value`` in the representation of :mod:`moonish.values.model` (string ``bytes``, list
``deque[bytes]``, set ``set[bytes]``, zset :class:`~moonish.values.model.SortedSet`, hash
``dict[bytes, bytes]``, stream :class:`~moonish.values.model.Stream`), ready to become an
:class:`~moonish.values.model.Entry` of a shard's keyspace; what moonish's forms do not hold
(a stream's consumer groups, a 7.4 hash's field TTLs) comes beside it.

Value encodings by RDB type byte (Redis ``rdb.h``; ``rdbLoadObject`` in ``rdb.c``)::

     0 string           <string>
     1 list             <len> <string>*                     (Redis < 3.2)
     2 set              <len> <string>*
     3 zset             <len> (<string> <text double>)*     (RDB < 8)
     4 hash             <len> (<string> <string>)*
     5 zset 2           <len> (<string> <binary double>)*
     9 hash zipmap      <string: zipmap>
    10 list ziplist     <string: ziplist>
    11 set intset       <string: intset>
    12 zset ziplist     <string: ziplist of member, score pairs>
    13 hash ziplist     <string: ziplist of field, value pairs>
    14 list quicklist   <len> <string: ziplist>*
    16 hash listpack    <string: listpack of field, value pairs>
    17 zset listpack    <string: listpack of member, score pairs>
    18 list quicklist 2 <len> (<container len: 1 plain, 2 packed> <string>)*
    20 set listpack     <string: listpack>

    15 stream 1, 19 stream 2, 21 stream 3 (t_stream.c):
        <len nodes> (<string: master ID, 16 bytes> <string: stream listpack>)*
        <len length> <len last ms> <len last seq>
        [type >= 19: <len first ms> <len first seq> <len max deleted ms> <len max deleted seq>
                     <len entries added>]
        <len groups> (<string name> <len last ms> <len last seq> [type >= 19: <len entries read>]
            <len pending> (<16 bytes ID> <i64 delivery ms> <len delivery count>)*
            <len consumers> (<string name> <i64 seen ms> [type 21: <i64 active ms>]
                <len pending> <16 bytes ID>*)*)*

A stream listpack holds the master entry, ``count deleted num-fields field* 0``, then per entry
``flags ms-diff seq-diff`` and either (SAMEFIELDS flag 2) the values of the master fields, or
``num-fields (field value)*``, then ``lp-count``; flag 1 marks a deleted entry. IDs are the
node's master ID plus the diffs; a raw (16 bytes) ID is ms and seq as big-endian u64.

Hashes with field TTLs (Redis 7.4; t_hash.c)::

    22 hash metadata (pre-GA)  <len n> (<len absolute expiry ms, 0 none> <string> <string>)*
    23 hash listpack ex (pre-GA) <string: listpack of field, value, absolute expiry (0 none)>
    24 hash metadata           <i64 min expiry ms> <len n> (<len ttl> <string> <string>)*
                               ttl 0: none, else expiry = ttl + min expiry - 1
    25 hash listpack ex        <i64 min expiry ms> <string: listpack as 23>

Refused (:class:`UnsupportedValue`): 6, 7 module values.

A binary double is 8 bytes, IEEE 754 little endian. A text double is one length byte (253 NaN,
254 +inf, 255 -inf) followed by that many bytes of ``%.17g`` text.
"""

from __future__ import annotations

import math
import struct
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from moonish.redis.rdb.listpack import (
    EncodingError,
    intset_members,
    listpack_entries,
    ziplist_entries,
    zipmap_pairs,
)
from moonish.values.model import HASH, LIST, SET, STREAM, STRING, ZSET, SortedSet, Stream, StreamId

_DOUBLE = struct.Struct("<d")
_ID = struct.Struct(">QQ")  # a stream ID as stored raw: ms, seq, big endian
_MS = struct.Struct("<q")  # a time in ms (PEL delivery, consumer seen/active)
STREAM_DELETED, STREAM_SAMEFIELDS = 1, 2
FIELD_EXPIRE_MAX_MS = 0x0000FFFFFFFFFFFF  # EB_EXPIRE_TIME_MAX, ebuckets.h
UNKNOWN_ENTRIES_READ = 2**64 - 1  # Redis's SCG_INVALID_ENTRIES_READ (-1) stored as a length


@dataclass(frozen=True, slots=True)
class RdbPending:
    """One entry of a consumer group's pending entries list (PEL)."""

    id: StreamId
    delivery_time_ms: int
    delivery_count: int
    consumer: bytes | None  # None: no consumer claims it (Redis tolerates this)


@dataclass(frozen=True, slots=True)
class RdbConsumer:
    """A consumer of a group; ``active_time_ms`` is ``None`` before RDB type 21 (7.2)."""

    name: bytes
    seen_time_ms: int
    active_time_ms: int | None
    pending: tuple[StreamId, ...]


@dataclass(frozen=True, slots=True)
class RdbGroup:
    """A consumer group; ``entries_read`` is ``None`` when unknown: Redis's -1 (XINFO shows
    nil), or before RDB type 19 (7.0)."""

    name: bytes
    last_id: StreamId
    entries_read: int | None
    pending: tuple[RdbPending, ...]
    consumers: tuple[RdbConsumer, ...]


@dataclass(frozen=True, slots=True)
class RdbStreamMeta:
    """What a stream holds beyond its entries and last ID (moonish's :class:`Stream`):
    ``first_id``, ``max_deleted_id`` and ``entries_added`` are ``None`` before RDB type 19."""

    length: int
    first_id: StreamId | None
    max_deleted_id: StreamId | None
    entries_added: int | None
    groups: tuple[RdbGroup, ...]


QUICKLIST_PLAIN, QUICKLIST_PACKED = 1, 2

TYPE_NAMES = {
    0: "string", 1: "list", 2: "set", 3: "zset", 4: "hash", 5: "zset 2",
    6: "module (pre-GA)", 7: "module", 9: "hash zipmap", 10: "list ziplist",
    11: "set intset", 12: "zset ziplist", 13: "hash ziplist", 14: "list quicklist",
    15: "stream listpacks", 16: "hash listpack", 17: "zset listpack", 18: "list quicklist 2",
    19: "stream listpacks 2", 20: "set listpack", 21: "stream listpacks 3",
    22: "hash with field TTLs (pre-GA)", 23: "hash listpack with field TTLs (pre-GA)",
    24: "hash with field TTLs", 25: "hash listpack with field TTLs",
}  # fmt: skip


class ValueCorrupt(Exception):
    """The value's bytes do not follow its encoding; ``position`` is the file offset of what
    failed, or ``None`` for the last string read (the element or blob that failed)."""

    def __init__(self, message: str, position: int | None = None) -> None:
        self.message, self.position = message, position
        super().__init__(message)


class UnsupportedValue(Exception):
    """A value type this reader does not decode (module, stream, hash with field TTLs)."""


class ValueSource(Protocol):
    """What a value decoder reads from (:class:`moonish.redis.rdb.reader.RdbReader`'s source)."""

    @property
    def offset(self) -> int:
        """File offset of the next byte."""

    @property
    def string_offset(self) -> int:
        """File offset of the last string read."""

    def length(self) -> int:
        """An RDB length (not a string encoding)."""

    def string(self) -> bytes:
        """An RDB string: raw, integer-encoded (as decimal text) or LZF-compressed."""

    def read(self, size_bytes: int) -> bytes:
        """Exactly ``size_bytes`` bytes."""


_MODULE_CHARSET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


class Decoded(NamedTuple):
    """A decoded value: moonish's type and value, plus what a stream holds beyond its
    entries and last ID (``stream``), and a 7.4 hash's field expiry times
    (``field_expire_at_ms``, ms since the epoch, only fields that have one)."""

    type: str
    value: Any
    stream: RdbStreamMeta | None = None
    field_expire_at_ms: dict[bytes, int] | None = None


def module_type_name(module_id: int) -> str:
    """A module type's name from its 64-bit id: nine 6-bit characters above 10 bits of
    encoding version (``moduleTypeNameByID`` in Redis ``module.c``)."""
    return "".join(_MODULE_CHARSET[(module_id >> (10 + 6 * (8 - j))) & 63] for j in range(9))


def _blob(src: ValueSource, decode: Callable[[bytes], list[bytes]], what: str) -> list[bytes]:
    blob = src.string()
    try:
        return decode(blob)
    except EncodingError as exc:
        raise ValueCorrupt(f"bad {what}: {exc}", src.string_offset) from None


def _score(text: bytes) -> float:
    try:
        score = float(text)
    except ValueError:
        raise ValueCorrupt(f"zset score {text!r} is not a number") from None
    if math.isnan(score):
        raise ValueCorrupt("zset score is NaN")
    return score


def _text_double(src: ValueSource) -> float:
    at = src.offset
    size = src.read(1)[0]
    if size == 253:
        raise ValueCorrupt("zset score is NaN", at)
    if size in (254, 255):
        return math.inf if size == 254 else -math.inf
    try:
        return _score(src.read(size))
    except ValueCorrupt as exc:
        raise ValueCorrupt(exc.message, at) from None


def _binary_double(src: ValueSource) -> float:
    score: float = _DOUBLE.unpack(src.read(8))[0]
    if math.isnan(score):
        raise ValueCorrupt("zset score is NaN", src.offset - 8)
    return score


def _hash(pairs: list[bytes], what: str) -> dict[bytes, bytes]:
    if len(pairs) % 2:
        raise ValueCorrupt(f"{what} holds an odd number of elements")
    value = dict(zip(pairs[::2], pairs[1::2], strict=True))
    if len(value) * 2 != len(pairs):
        raise ValueCorrupt(f"{what} holds a field twice")
    return value


def _zset(pairs: list[bytes], what: str) -> SortedSet:
    if len(pairs) % 2:
        raise ValueCorrupt(f"{what} holds an odd number of elements")
    zset = SortedSet()
    for member, score in zip(pairs[::2], pairs[1::2], strict=True):
        if member in zset.scores:
            raise ValueCorrupt(f"{what} holds member {member!r} twice")
        zset.add(member, _score(score))
    return zset


def _set(members: list[bytes], what: str) -> set[bytes]:
    value = set(members)
    if len(value) != len(members):
        raise ValueCorrupt(f"{what} holds a member twice")
    return value


def _quicklist(src: ValueSource, version: int) -> deque[bytes]:
    out: deque[bytes] = deque()
    for _ in range(src.length()):
        at = src.offset
        container = src.length() if version == 2 else QUICKLIST_PACKED
        if container == QUICKLIST_PLAIN:
            out.append(src.string())
        elif container == QUICKLIST_PACKED:
            decode = listpack_entries if version == 2 else ziplist_entries
            out.extend(_blob(src, decode, "quicklist node"))
        else:
            raise ValueCorrupt(f"quicklist node container {container} (1 or 2 expected)", at)
    return out


def _hash_ttls(src: ValueSource, rdb_type: int) -> tuple[dict[bytes, bytes], dict[bytes, int]]:
    """A Redis 7.4 hash with field TTLs: its fields and values, and each field's expiry time
    (ms since the epoch; fields without one are left out)."""
    min_expire = int(_MS.unpack(src.read(8))[0]) if rdb_type in (24, 25) else 0
    value: dict[bytes, bytes] = {}
    ttls: dict[bytes, int] = {}
    if rdb_type in (23, 25):  # a listpack of field, value, absolute expiry (0: none)
        triples = _blob(src, listpack_entries, "listpack")
        if len(triples) % 3:
            raise ValueCorrupt("hash listpack with TTLs holds a partial triple")
        for field, item, at in zip(triples[::3], triples[1::3], triples[2::3], strict=True):
            if field in value:
                raise ValueCorrupt(f"hash holds field {field!r} twice")
            value[field] = item
            if at != b"0":
                ttls[field] = _field_expiry(_int(at, "field expiry"), src.string_offset)
        return value, ttls
    for _ in range(src.length()):
        ttl_at = src.offset
        ttl = src.length()  # 24: relative to min_expire, plus 1; 22: absolute; 0: none
        expire = (ttl + min_expire - 1 if ttl else 0) if rdb_type == 24 else ttl
        field, item = src.string(), src.string()
        if field in value:
            raise ValueCorrupt(f"hash holds field {field!r} twice")
        value[field] = item
        if expire:
            ttls[field] = _field_expiry(expire, ttl_at)
    return value, ttls


def _field_expiry(expire_at_ms: int, position: int) -> int:
    if not 0 < expire_at_ms <= FIELD_EXPIRE_MAX_MS:
        raise ValueCorrupt(f"hash field expiry {expire_at_ms} out of range", position)
    return expire_at_ms


def _int(element: bytes, what: str) -> int:
    try:
        return int(element)
    except ValueError:
        raise ValueCorrupt(f"stream listpack: {what} {element!r} is not an integer") from None


def _stream_node(
    master: StreamId, elements: list[bytes], into: dict[StreamId, list[bytes]]
) -> None:
    """Add a stream listpack's live entries to ``into`` (module docstring)."""
    it = iter(elements)
    try:
        count, deleted = _int(next(it), "count"), _int(next(it), "deleted")
        master_fields = [next(it) for _ in range(_int(next(it), "num-fields"))]
        if _int(next(it), "master terminator") != 0:
            raise ValueCorrupt("stream listpack: master entry not terminated by 0")
        for _ in range(count + deleted):
            flags = _int(next(it), "flags")
            stream_id = (
                master[0] + _int(next(it), "ms-diff"),
                master[1] + _int(next(it), "seq-diff"),
            )
            fields: list[bytes] = []
            if flags & STREAM_SAMEFIELDS:
                for field in master_fields:
                    fields += (field, next(it))
            else:
                fields = [next(it) for _ in range(2 * _int(next(it), "num-fields"))]
            next(it)  # lp-count
            if not flags & STREAM_DELETED:
                if stream_id in into:
                    raise ValueCorrupt(f"stream entry {stream_id} stored twice")
                into[stream_id] = fields
    except StopIteration:
        raise ValueCorrupt("stream listpack ends inside an entry") from None
    if next(it, None) is not None:
        raise ValueCorrupt("stream listpack holds bytes after its last entry")


def _raw_id(src: ValueSource) -> StreamId:
    ms, seq = _ID.unpack(src.read(_ID.size))
    return int(ms), int(seq)


def _id(src: ValueSource) -> StreamId:
    return src.length(), src.length()


def _group(src: ValueSource, rdb_type: int) -> RdbGroup:
    name = src.string()
    last_id = _id(src)
    entries_read: int | None = src.length() if rdb_type >= 19 else None
    if entries_read == UNKNOWN_ENTRIES_READ:
        entries_read = None
    pel: dict[StreamId, tuple[int, int]] = {}
    for _ in range(src.length()):
        pending_id = _raw_id(src)
        pel[pending_id] = (int(_MS.unpack(src.read(8))[0]), src.length())
    owner: dict[StreamId, bytes] = {}
    consumers = []
    for _ in range(src.length()):
        consumer = src.string()
        seen = int(_MS.unpack(src.read(8))[0])
        active = int(_MS.unpack(src.read(8))[0]) if rdb_type >= 21 else None
        ids = tuple(_raw_id(src) for _ in range(src.length()))
        for pending_id in ids:
            if pending_id not in pel or pending_id in owner:
                raise ValueCorrupt(
                    f"consumer {consumer!r} owns {pending_id}, not pending or owned twice"
                )
            owner[pending_id] = consumer
        consumers.append(RdbConsumer(consumer, seen, active, ids))
    pending = tuple(RdbPending(i, t, n, owner.get(i)) for i, (t, n) in pel.items())
    return RdbGroup(name, last_id, entries_read, pending, tuple(consumers))


def _stream(src: ValueSource, rdb_type: int) -> tuple[Stream, RdbStreamMeta]:
    stream = Stream()
    for _ in range(src.length()):
        master = src.string()
        if len(master) != _ID.size:
            raise ValueCorrupt(f"stream node key of {len(master)} bytes (16 expected)")
        ms, seq = _ID.unpack(master)
        elements = _blob(src, listpack_entries, "stream listpack")
        try:
            _stream_node((int(ms), int(seq)), elements, stream.entries)
        except ValueCorrupt as exc:
            raise ValueCorrupt(exc.message, src.string_offset) from None
    length_at = src.offset
    length = src.length()
    stream.last_id = _id(src)
    first_id = max_deleted_id = entries_added = None
    if rdb_type >= 19:
        first_id, max_deleted_id, entries_added = _id(src), _id(src), src.length()
    if length != len(stream.entries):
        raise ValueCorrupt(
            f"stream says {length} entries but holds {len(stream.entries)}", length_at
        )
    groups = tuple(_group(src, rdb_type) for _ in range(src.length()))
    if len({g.name for g in groups}) != len(groups):
        raise ValueCorrupt("stream holds a consumer group twice")
    stream.entries = OrderedDict(sorted(stream.entries.items()))
    return stream, RdbStreamMeta(length, first_id, max_deleted_id, entries_added, groups)


def read_value(src: ValueSource, rdb_type: int) -> Decoded:
    """Decode the value of RDB type ``rdb_type`` from ``src``.

    Returns:
        moonish's type name and value (module docstring), and what a stream or a hash with
        field TTLs holds beyond that. Containers may be empty (Redis skips such keys when it
        loads them).

    Raises:
        ValueCorrupt: bytes that do not follow the encoding (also a duplicate member or field,
            a NaN score, a field TTL out of range).
        UnsupportedValue: a module value.
        KeyError: an RDB type byte that is no value type (the caller reports it).
    """
    decoded = _read(src, rdb_type)
    return decoded if isinstance(decoded, Decoded) else Decoded(*decoded)


def _read(src: ValueSource, rdb_type: int) -> Decoded | tuple[str, Any]:
    if rdb_type == 0:
        return STRING, src.string()
    if rdb_type in (1, 2, 3, 4, 5):
        count = src.length()
        if rdb_type == 1:
            return LIST, deque([src.string() for _ in range(count)])
        if rdb_type == 2:
            return SET, _set([src.string() for _ in range(count)], "set")
        if rdb_type == 4:
            pairs = []
            for _ in range(count):
                pairs.append(src.string())
                pairs.append(src.string())
            return HASH, _hash(pairs, "hash")
        double = _binary_double if rdb_type == 5 else _text_double
        zset = SortedSet()
        for _ in range(count):
            member = src.string()
            if member in zset.scores:
                raise ValueCorrupt(f"zset holds member {member!r} twice")
            zset.add(member, double(src))
        return ZSET, zset
    if rdb_type == 9:
        return HASH, _hash(_blob(src, zipmap_pairs, "zipmap"), "zipmap")
    if rdb_type == 10:
        return LIST, deque(_blob(src, ziplist_entries, "ziplist"))
    if rdb_type == 11:
        return SET, _set(_blob(src, intset_members, "intset"), "intset")
    if rdb_type == 12:
        return ZSET, _zset(_blob(src, ziplist_entries, "ziplist"), "zset ziplist")
    if rdb_type == 13:
        return HASH, _hash(_blob(src, ziplist_entries, "ziplist"), "hash ziplist")
    if rdb_type in (14, 18):
        return LIST, _quicklist(src, 2 if rdb_type == 18 else 1)
    if rdb_type == 16:
        return HASH, _hash(_blob(src, listpack_entries, "listpack"), "hash listpack")
    if rdb_type == 17:
        return ZSET, _zset(_blob(src, listpack_entries, "listpack"), "zset listpack")
    if rdb_type == 20:
        return SET, _set(_blob(src, listpack_entries, "listpack"), "set listpack")
    if rdb_type in (15, 19, 21):
        stream, meta = _stream(src, rdb_type)
        return Decoded(STREAM, stream, stream=meta)
    if rdb_type in (22, 23, 24, 25):
        value, ttls = _hash_ttls(src, rdb_type)
        return Decoded(HASH, value, field_expire_at_ms=ttls)
    if rdb_type == 7:
        name = module_type_name(src.length())
        raise UnsupportedValue(f"module values are not supported (module type {name!r})")
    name = TYPE_NAMES[rdb_type]  # KeyError: not a value type
    raise UnsupportedValue(f"{name} values (RDB type {rdb_type}) are not supported")
