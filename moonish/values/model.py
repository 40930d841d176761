"""Redis values as moonish keeps them, and their typed JSON images (docs/images.md).

Internal forms (``Entry.value``)::

    string  bytes
    hash    dict[bytes, bytes]            insertion order
    list    deque[bytes]                  head first (O(1) pushes and pops at both ends)
    set     set[bytes]
    zset    SortedSet                     member -> score, and Redis's order
    stream  Stream                        entries, counters, consumer groups (streams.py)

Image (UTF-8 JSON object, keys in this order)::

    {"db": 0, "key": <text>, "type": "string"|"hash"|"list"|"set"|"zset"|"stream",
     "value": <value>, "expire_at_ms": <ms since the Unix epoch>|null
     [, "field_expire_at_ms": [[field, <ms since the Unix epoch>], ...]]}

``<text>`` is a JSON string when the bytes are UTF-8, else ``{"_b64": "<base64>"}``. Values:
string ``<text>``; hash ``[[field, value], ...]`` (insertion order); list ``[elem, ...]``; set
``[member, ...]`` sorted by bytes; zset ``[[member, score], ...]`` by score then member (Redis's
order; ``"inf"``/``"-inf"`` for infinite scores); stream ``{"entries": [...], "last_id", ...,
"groups": [...]}`` (:mod:`moonish.values.streams`). A value whose JSON is larger than the image
limit is replaced by the marker ``{"_omitted_length": <Redis's length of it>}``
(:func:`full_image`).

``field_expire_at_ms`` is there only for a hash some of whose fields have an expiry time
(Redis 7.4's HEXPIRE family): those fields, in the hash's order, with their times. It is left
out with an omitted value, so a hash without field TTLs has the same image as before 7.4.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections import deque
from typing import Any, Final

import orjson
from sortedcontainers import SortedList  # type: ignore[import-untyped]

from moonish.values.jsontext import StreamId as StreamId
from moonish.values.jsontext import format_id as format_id
from moonish.values.jsontext import is_plain as is_plain
from moonish.values.jsontext import parse_id_text as parse_id_text
from moonish.values.jsontext import text as text
from moonish.values.jsontext import untext as untext
from moonish.values.plainjson import array as _array_c
from moonish.values.plainjson import image as _image_c
from moonish.values.plainjson import image_py
from moonish.values.plainjson import pairs as _pairs_c
from moonish.values.plainjson import quote as _quote_c
from moonish.values.plainjson import scored as _scored_c
from moonish.values.plainjson import sorted_array as _sorted_array_c
from moonish.values.plainjson import stream_bytes as _stream_bytes_c
from moonish.values.streams import Stream as Stream
from moonish.values.streams import stream_from_json, stream_json, stream_value

STRING: Final = "string"
HASH: Final = "hash"
LIST: Final = "list"
SET: Final = "set"
ZSET: Final = "zset"
STREAM: Final = "stream"
TYPES: Final = (STRING, HASH, LIST, SET, ZSET, STREAM)

# The JSON of plain data (moonish.values.plainjson: C where built), bound here as C statics.
_quote: Final = _quote_c
_array: Final = _array_c
_sorted_array: Final = _sorted_array_c
_pairs: Final = _pairs_c
_scored: Final = _scored_c
_stream_bytes: Final = _stream_bytes_c
_image: Final = _image_c


class SortedSet:
    """A Redis sorted set: member -> score, and the members in Redis's order (score, then
    member bytes) kept sorted, so pops and images do not sort.

    The order is a plain list kept with :mod:`bisect` (C) while the set has at most
    :data:`SMALL_ZSET` members, as Redis keeps a small sorted set in one listpack
    (``zset-max-listpack-entries``); a larger set moves to a ``sortedcontainers.SortedList``,
    whose inserts and removals stay O(log n) (a list's are O(n) moves)."""

    __slots__ = ("order", "scores")

    def __init__(self, scores: dict[bytes, float] | None = None) -> None:
        self.scores: dict[bytes, float] = dict(scores) if scores else {}
        order = sorted([(score, member) for member, score in self.scores.items()])
        self.order: Any = order if len(order) <= SMALL_ZSET else SortedList(order)

    def add(self, member: bytes, score: float) -> None:
        scores, order = self.scores, self.order
        old = scores.get(member)
        if old is not None and old == score:
            return
        scores[member] = score
        if type(order) is list:
            if old is not None:
                del order[bisect_left(order, (old, member))]
            insort(order, (score, member))
            if len(order) > SMALL_ZSET:
                self.order = SortedList(order)
            return
        if old is not None:
            order.remove((old, member))
        order.add((score, member))

    def remove(self, member: bytes) -> bool:
        old = self.scores.pop(member, None)
        if old is None:
            return False
        order = self.order
        if type(order) is list:
            del order[bisect_left(order, (old, member))]
        else:
            order.remove((old, member))
        return True

    def pop(self, count: int, highest: bool) -> list[tuple[bytes, float]]:
        """Remove and return up to ``count`` members with the lowest (or highest) scores."""
        order, scores = self.order, self.scores
        taken = []
        for _ in range(min(count, len(order))):
            score, member = order.pop(-1 if highest else 0)
            del scores[member]
            taken.append((member, score))
        return taken

    def items(self) -> list[tuple[bytes, float]]:
        """(member, score) pairs in Redis's order."""
        return [(member, score) for score, member in self.order]

    def __len__(self) -> int:
        return len(self.scores)

    def __copy__(self) -> SortedSet:
        return SortedSet(self.scores)

    def __reduce__(self) -> tuple[type[SortedSet], tuple[dict[bytes, float]]]:
        # Pickled when worker processes lend entries to each other (moonish.redis.routing.exchange).
        # Spelled out: a class compiled by mypyc (docs/build.md) has no default pickling.
        return SortedSet, (self.scores,)


SMALL_ZSET: Final = 1024
"""The most members a :class:`SortedSet` keeps in a plain list (an insert moves at most
8 KiB of pointers)."""


class Entry:
    """One key's value, type and expiry. ``json`` caches the value's JSON and ``image`` the
    key's full image (with the limit it was made for); whoever changes the entry calls
    :meth:`stale`.

    ``field_expire_at_ms``: a hash's field expiry times, field -> ms since the Unix epoch,
    only for fields that have one (Redis 7.4); ``None`` (never empty) when none has, so a
    hash without field TTLs costs nothing more (moonish.state.fieldttl keeps it)."""

    __slots__ = (
        "expire_at_ms",
        "field_expire_at_ms",
        "image",
        "image_limit",
        "json",
        "nbytes",
        "type",
        "value",
    )

    def __init__(
        self,
        type_: str,
        value: Any,
        expire_at_ms: int | None = None,
        field_expire_at_ms: dict[bytes, int] | None = None,
    ) -> None:
        self.type = type_
        self.value = value
        self.expire_at_ms = expire_at_ms
        self.field_expire_at_ms = field_expire_at_ms or None
        self.json: bytes | None = None
        self.image: bytes | None = None
        self.image_limit: int | None = None  # no tuple: one fewer GC-tracked object a write
        self.nbytes: int | None = None
        """A container's total element bytes (hash fields and values, zset members), kept
        by the handlers that know how much they added or removed; ``None``: count again."""

    def stale(self, value: bool = True) -> None:
        """Forget the cached image (and, with ``value``, the value's JSON)."""
        self.image = None
        if value:
            self.json = None

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Every attribute, the caches too: the workers of a parallel import or capture lend
        # entries to each other (moonish.redis.routing.exchange). Spelled out: a class compiled
        # by mypyc (docs/build.md) has no default pickling.
        return _entry, (
            self.type,
            self.value,
            self.expire_at_ms,
            self.field_expire_at_ms,
            self.json,
            self.image,
            self.image_limit,
            self.nbytes,
        )


def _entry(
    type_: str,
    value: Any,
    expire_at_ms: int | None,
    field_expire_at_ms: dict[bytes, int] | None,
    json: bytes | None,
    image: bytes | None,
    image_limit: int | None,
    nbytes: int | None,
) -> Entry:
    """An :class:`Entry` unpickled (see ``Entry.__reduce__``)."""
    entry = Entry(type_, value, expire_at_ms, field_expire_at_ms)
    entry.json, entry.image, entry.image_limit, entry.nbytes = json, image, image_limit, nbytes
    return entry


def format_score(score: float) -> float | str:
    """A zset score as JSON: a number, or ``"inf"``/``"-inf"`` (JSON has no infinity)."""
    if math.isinf(score):
        return "inf" if score > 0 else "-inf"
    return score


def _json_value(entry: Entry) -> Any:
    value = entry.value
    kind = entry.type
    if kind == STRING:
        return text(value)
    if kind == HASH:
        return [[text(f), text(v)] for f, v in value.items()]
    if kind == LIST:
        return [text(v) for v in value]
    if kind == SET:
        return [text(v) for v in sorted(value)]
    if kind == ZSET:
        return [[text(m), format_score(s)] for s, m in value.order]
    return stream_value(value)


def _bounded_json(entry: Entry, limit: int | None) -> bytes | None:
    """The value's JSON, or ``None`` when it is larger than ``limit`` bytes.

    Too large is decided first from a lower bound of the JSON's size that needs no JSON: the
    fewest quotes, commas, brackets and score digits per element (O(1)), then the elements'
    bytes (one C-level join). The JSON itself is built by moonish.values.plainjson when every
    byte string in it is plain (printable ASCII without ``"`` or ``\\``), else by orjson."""
    value, kind = entry.value, entry.type
    json: bytes | None = None
    if kind == STRING:
        if limit is not None and len(value) + 2 > limit:
            return None
        json = _quote(value)
    elif kind == STREAM:
        entries = value.entries
        bound = 25 * len(entries) + 1  # {"id":"1-0","fields":[]},
        if limit is not None and (bound > limit or bound + _stream_bytes(entries) > limit):
            return None
        json = stream_json(value)
    else:
        count = len(value)
        bound = _FEWEST_BYTES[kind] * count + 1
        if limit is not None:
            if bound > limit:
                return None
            nbytes = entry.nbytes
            if nbytes is None:
                nbytes = entry.nbytes = _element_bytes(kind, value)
            if bound + nbytes > limit:
                return None
        if not count:
            json = b"[]"
        elif kind == HASH:
            json = _pairs(value)
        elif kind == LIST:
            json = _array(value)
        elif kind == SET:
            json = _sorted_array(value)
        else:
            json = _scored(value.order)
    if json is None:
        json = orjson.dumps(_json_value(entry))
    entry.json = json
    return json if limit is None or len(json) <= limit else None


def _element_bytes(kind: str, value: Any) -> int:
    join = b"".join  # in C: much faster than sum(map(len, ...))
    if kind == HASH:
        return len(join(value)) + len(join(value.values()))
    return len(join(value.scores if kind == ZSET else value))


_FEWEST_BYTES: Final = {LIST: 3, SET: 3, HASH: 8, ZSET: 9}
"""The fewest JSON bytes an element adds besides its own: ``"",`` / ``["",""],`` /
``["",0.0],``."""


def value_json(entry: Entry) -> bytes:
    """The JSON of ``entry``'s value, cached on the entry until it changes."""
    cached = entry.json
    if cached is None:
        cached = _bounded_json(entry, None)
        assert cached is not None
    return cached


def _omitted(entry: Entry) -> bytes:
    return b'{"_omitted_length":%d}' % length(entry)


def key_json(key: bytes) -> bytes:
    """The JSON of a key: see :func:`text`."""
    if is_plain(key):
        return b'"' + key + b'"'
    return orjson.dumps(text(key))


def key_image(db: int, key: bytes) -> bytes:
    """The image of a key without its value (KEYS_ONLY, and the other side of one-image
    views): ``{"db": <db>, "key": <text>}``."""
    return b'{"db":%d,"key":%s}' % (db, key_json(key))


def length(entry: Entry) -> int:
    """Redis's length of a value: STRLEN, HLEN, LLEN, SCARD, ZCARD or XLEN."""
    value = entry.value
    return len(value.entries) if entry.type == STREAM else len(value)


def full_image(db: int, key: bytes, entry: Entry, max_value_bytes: int | None = None) -> bytes:
    """The image of a key with its value (see the module docstring).

    A value whose JSON would exceed ``max_value_bytes`` is replaced by ``{"_omitted_length":
    <Redis's length of it>}``. A value that is certainly too large (by a lower bound of its
    JSON size, see :func:`_bounded_json`) is left out without making its JSON, so the cost
    of an image is bounded by the limit, not by the size of the value."""
    image = entry.image
    if image is not None and entry.image_limit == max_value_bytes:
        return image
    value = entry.json
    if value is None:
        raw = entry.value
        # A plain string (the common case) is quoted and not kept in entry.json: quoting
        # again costs less than a second copy of the value per key. One certainly over the
        # limit is not copied (_bounded_json leaves it out).
        value = None
        if entry.type == STRING and (max_value_bytes is None or len(raw) + 2 <= max_value_bytes):
            value = _quote(raw)
        if value is None:
            value = _bounded_json(entry, max_value_bytes)
    if value is None or (max_value_bytes is not None and len(value) > max_value_bytes):
        value = _omitted(entry)
        end = b"}"
    else:
        ttls = entry.field_expire_at_ms
        end = b"}" if ttls is None else _field_ttls_json(entry.value, ttls)
    piece = _TYPE_PIECES[entry.type]
    made = _image(db, key, piece, value, entry.expire_at_ms, end)
    if made is None:  # a key that is not plain (its JSON by orjson), or a db beyond 64 bits
        made = image_py(db, key_json(key), piece, value, entry.expire_at_ms, end)
    entry.image, entry.image_limit = made, max_value_bytes
    return made


_TYPE_PIECES: Final = {kind: b',"type":"%s","value":' % kind.encode() for kind in TYPES}


def _field_ttls_json(fields: dict[bytes, bytes], ttls: dict[bytes, int]) -> bytes:
    """``,"field_expire_at_ms":[[field, ms], ...]}``: the fields with a time, in the hash's
    order."""
    pairs = [[text(field), ttls[field]] for field in fields if field in ttls]
    return b',"field_expire_at_ms":' + orjson.dumps(pairs) + b"}"


def entry_from_image(image: dict[str, Any]) -> tuple[int, bytes, Entry]:
    """``(db, key, entry)`` from a full image (the inverse of :func:`full_image` without
    omission); snapshots use it.

    Raises:
        ValueError, KeyError, TypeError: ``image`` is not a full image.
    """
    kind, raw = image["type"], image["value"]
    value: Any
    if kind == STRING:
        value = untext(raw)
    elif kind == HASH:
        value = {untext(f): untext(v) for f, v in raw}
    elif kind == LIST:
        value = deque([untext(v) for v in raw])
    elif kind == SET:
        value = {untext(v) for v in raw}
    elif kind == ZSET:
        value = SortedSet({untext(m): float(s) for m, s in raw})
    elif kind == STREAM:
        value = stream_from_json(raw, image.get("last_id"))
    else:
        raise ValueError(f"unknown value type {kind!r}")
    ttls = None
    if "field_expire_at_ms" in image:
        if kind != HASH:
            raise ValueError(f"field expiry times on a {kind}")
        ttls = {untext(field): int(at) for field, at in image["field_expire_at_ms"]}
        if not ttls or not ttls.keys() <= value.keys():
            raise ValueError("field expiry times for fields the hash does not hold")
    entry = Entry(kind, value, image["expire_at_ms"], ttls)
    return int(image["db"]), untext(image["key"]), entry


def state_image(db: int, key: bytes, entry: Entry) -> bytes:
    """A lossless full image (never omitted): a stream's value holds all of it (counters,
    groups, pending entries, consumers). Used for snapshots and for records replayed by
    value. (:func:`entry_from_image` also reads the older form of a stream's value, without
    counters and groups, whose last ID is an extra ``"last_id"`` key of the image.)"""
    return full_image(db, key, entry)
