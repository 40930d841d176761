"""Redis values as moonish keeps them, and their typed JSON images (docs/images.md).

Internal forms (``Entry.value``)::

    string  bytes
    hash    dict[bytes, bytes]            insertion order
    list    list[bytes]                   head first
    set     set[bytes]
    zset    SortedSet                     member -> score, and Redis's order
    stream  Stream                        entries by ID, plus the last ID ever added

Image (UTF-8 JSON object, keys in this order)::

    {"db": 0, "key": <text>, "type": "string"|"hash"|"list"|"set"|"zset"|"stream",
     "value": <value>, "expire_at_ms": <ms since the Unix epoch>|null}

``<text>`` is a JSON string when the bytes are UTF-8, else ``{"_b64": "<base64>"}``. Values:
string ``<text>``; hash ``[[field, value], ...]`` (insertion order); list ``[elem, ...]``; set
``[member, ...]`` sorted by bytes; zset ``[[member, score], ...]`` by score then member (Redis's
order; ``"inf"``/``"-inf"`` for infinite scores); stream ``[{"id": "<ms>-<seq>", "fields":
[[field, value], ...]}, ...]`` by ID. A value whose JSON is larger than the image limit is
replaced by the marker ``{"_omitted_length": <Redis's length of it>}`` (:func:`full_image`).
"""

from __future__ import annotations

import base64
import math
from typing import Any

import orjson
from sortedcontainers import SortedList  # type: ignore[import-untyped]

STRING, HASH, LIST, SET, ZSET, STREAM = "string", "hash", "list", "set", "zset", "stream"
TYPES = (STRING, HASH, LIST, SET, ZSET, STREAM)

StreamId = tuple[int, int]


class Stream:
    """A Redis stream: entries in ID order and the largest ID ever added (XADD refuses
    IDs at or below it even after the entry was deleted)."""

    __slots__ = ("entries", "last_id")

    def __init__(self) -> None:
        self.entries: dict[StreamId, list[bytes]] = {}
        self.last_id: StreamId = (0, 0)


class SortedSet:
    """A Redis sorted set: member -> score, and the members in Redis's order (score, then
    member bytes) kept sorted by ``sortedcontainers.SortedList``, so pops and images do not
    sort."""

    __slots__ = ("order", "scores")

    def __init__(self, scores: dict[bytes, float] | None = None) -> None:
        self.scores: dict[bytes, float] = {}
        self.order: SortedList = SortedList()
        for member, score in (scores or {}).items():
            self.add(member, score)

    def add(self, member: bytes, score: float) -> None:
        old = self.scores.get(member)
        if old is not None:
            self.order.remove((old, member))
        self.scores[member] = score
        self.order.add((score, member))

    def remove(self, member: bytes) -> bool:
        old = self.scores.pop(member, None)
        if old is None:
            return False
        self.order.remove((old, member))
        return True

    def pop(self, count: int, highest: bool) -> list[tuple[bytes, float]]:
        """Remove and return up to ``count`` members with the lowest (or highest) scores."""
        taken = []
        for _ in range(min(count, len(self.order))):
            score, member = self.order.pop(-1 if highest else 0)
            del self.scores[member]
            taken.append((member, score))
        return taken

    def items(self) -> list[tuple[bytes, float]]:
        """(member, score) pairs in Redis's order."""
        return [(member, score) for score, member in self.order]

    def __len__(self) -> int:
        return len(self.scores)

    def __copy__(self) -> SortedSet:
        return SortedSet(self.scores)


class Entry:
    """One key's value, type and expiry. ``json`` caches the value's JSON and ``image`` the
    key's full image (with the limit it was made for); whoever changes the entry calls
    :meth:`stale`."""

    __slots__ = ("expire_at_ms", "image", "json", "type", "value")

    def __init__(self, type_: str, value: Any, expire_at_ms: int | None = None) -> None:
        self.type = type_
        self.value = value
        self.expire_at_ms = expire_at_ms
        self.json: bytes | None = None
        self.image: tuple[int | None, bytes] | None = None

    def stale(self, value: bool = True) -> None:
        """Forget the cached image (and, with ``value``, the value's JSON)."""
        self.image = None
        if value:
            self.json = None


def text(value: bytes) -> str | dict[str, str]:
    """``value`` as text if UTF-8, else ``{"_b64": <standard padded base64>}``."""
    try:
        return value.decode()
    except UnicodeDecodeError:
        return {"_b64": base64.b64encode(value).decode("ascii")}


def untext(value: Any) -> bytes:
    """The inverse of :func:`text`.

    Raises:
        ValueError: ``value`` is neither a string nor a ``{"_b64": ...}`` object.
    """
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, dict) and set(value) == {"_b64"}:
        return base64.b64decode(value["_b64"], validate=True)
    raise ValueError(f"not a text or _b64 value: {value!r}")


def format_score(score: float) -> float | str:
    """A zset score as JSON: a number, or ``"inf"``/``"-inf"`` (JSON has no infinity)."""
    if math.isinf(score):
        return "inf" if score > 0 else "-inf"
    return score


def format_id(stream_id: StreamId) -> str:
    return f"{stream_id[0]}-{stream_id[1]}"


def parse_id_text(text_id: str) -> StreamId:
    ms, _, seq = text_id.partition("-")
    return int(ms), int(seq)


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
    return [
        {"id": format_id(i), "fields": [[text(f), text(v)] for f, v in _pairs(e)]}
        for i, e in value.entries.items()
    ]


def _pairs(fields: list[bytes]) -> zip[tuple[bytes, bytes]]:
    return zip(fields[::2], fields[1::2], strict=True)


def _plain_json(entry: Entry) -> bytes | None:
    """The value's JSON built by joining bytes, when every byte string in it is plain
    (printable ASCII without ``"`` or ``\\``: the common case); else ``None``."""
    value, kind = entry.value, entry.type
    if kind == STRING:
        return b'"' + value + b'"' if is_plain(value) else None
    if kind in (LIST, SET):
        items = value if kind == LIST else sorted(value)
        if not items:
            return b"[]"
        return b'["' + b'","'.join(items) + b'"]' if is_plain(b"".join(items)) else None
    if kind == HASH:
        if not value:
            return b"[]"
        if not (is_plain(b"".join(value)) and is_plain(b"".join(value.values()))):
            return None
        return b'[["' + b'"],["'.join([f + b'","' + v for f, v in value.items()]) + b'"]]'
    if kind == ZSET:
        order = value.order
        if order and (math.isinf(order[0][0]) or math.isinf(order[-1][0])):
            return None  # orjson would write null for an infinite score
        if not is_plain(b"".join(value.scores)):
            return None
        return orjson.dumps([[m.decode(), s] for s, m in order])
    entries = value.entries
    if not entries:
        return b"[]"
    if not all(entries.values()) or not all(map(is_plain, map(b"".join, entries.values()))):
        return None
    return b"[" + b",".join([
        b'{"id":"%d-%d","fields":[["' % stream_id + b'"],["'.join(
            [f + b'","' + v for f, v in _pairs(fields)]
        ) + b'"]]}'
        for stream_id, fields in entries.items()
    ]) + b"]"  # fmt: skip


def value_json(entry: Entry) -> bytes:
    """The JSON of ``entry``'s value, cached on the entry until it changes."""
    cached = entry.json
    if cached is None:
        cached = _plain_json(entry) or orjson.dumps(_json_value(entry))
        entry.json = cached
    return cached


_PLAIN = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
"""Bytes that stand for themselves inside a JSON string."""


def is_plain(value: bytes) -> bool:
    """Whether ``value`` is printable ASCII without ``"`` or ``\\`` (its JSON is itself, quoted)."""
    return not value.translate(None, _PLAIN)


def _json_at_least(entry: Entry, limit: int) -> int:
    """A lower bound of the value's JSON size in bytes, exact enough to tell whether it
    exceeds ``limit``: the fewest quotes, commas, brackets and score digits its elements need
    (O(1)), plus, only when that alone stays within ``limit``, the elements' bytes (C-speed
    sums). No JSON is made."""
    value, kind = entry.value, entry.type
    if kind == STRING:
        return len(value) + 2
    if kind == STREAM:  # {"id":"1-0","fields":[]} per entry
        return 25 * len(value.entries) + 1
    count = len(value)
    per_element = {LIST: 3, SET: 3, HASH: 8, ZSET: 9}[kind]
    bound = per_element * count + 1
    if bound > limit:
        return bound
    join = b"".join  # in C; much faster than sum(map(len, ...)) per element
    if kind == HASH:
        return bound + len(join(value)) + len(join(value.values()))
    return bound + len(join(value.scores if kind == ZSET else value))


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
    JSON size, see :func:`_json_at_least`) is left out without making its JSON, so the cost
    of an image is bounded by the limit, not by the size of the value."""
    image = entry.image
    if image is not None and image[0] == max_value_bytes:
        return image[1]
    cached = entry.json
    if max_value_bytes is None:
        value = value_json(entry)
    elif cached is not None:
        value = cached if len(cached) <= max_value_bytes else _omitted(entry)
    else:
        if _json_at_least(entry, max_value_bytes) > max_value_bytes:
            value = _omitted(entry)
        else:
            value = value_json(entry)
            if len(value) > max_value_bytes:
                value = _omitted(entry)
    expire = b"null" if entry.expire_at_ms is None else b"%d" % entry.expire_at_ms
    made = b'{"db":%d,"key":%s,"type":"%s,"value":%s,"expire_at_ms":%s}' % (
        db, key_json(key), entry.type.encode() + b'"', value, expire,
    )  # fmt: skip
    entry.image = (max_value_bytes, made)
    return made


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
        value = [untext(v) for v in raw]
    elif kind == SET:
        value = {untext(v) for v in raw}
    elif kind == ZSET:
        value = SortedSet({untext(m): float(s) for m, s in raw})
    elif kind == STREAM:
        value = Stream()
        for item in raw:
            fields: list[bytes] = []
            for f, v in item["fields"]:
                fields += (untext(f), untext(v))
            value.entries[parse_id_text(item["id"])] = fields
        value.last_id = parse_id_text(image.get("last_id") or "0-0")
    else:
        raise ValueError(f"unknown value type {kind!r}")
    return int(image["db"]), untext(image["key"]), Entry(kind, value, image["expire_at_ms"])


def state_image(db: int, key: bytes, entry: Entry) -> bytes:
    """A lossless full image (never omitted); streams also carry ``last_id``. Used for
    snapshots and for records replayed by value."""
    image = full_image(db, key, entry)
    if entry.type == STREAM:
        return image[:-1] + b',"last_id":"%s"}' % format_id(entry.value.last_id).encode()
    return image
