"""Redis values as moonish keeps them, and their typed JSON images (docs/images.md).

Internal forms (``Entry.value``)::

    string  bytes
    hash    dict[bytes, bytes]            insertion order
    list    list[bytes]                   head first
    set     set[bytes]
    zset    dict[bytes, float]            member -> score
    stream  Stream                        entries by ID, plus the last ID ever added

Image (UTF-8 JSON object, keys in this order)::

    {"db": 0, "key": <text>, "type": "string"|"hash"|"list"|"set"|"zset"|"stream",
     "value": <value>, "expire_at_ms": <ms since the Unix epoch>|null}

``<text>`` is a JSON string when the bytes are UTF-8, else ``{"_b64": "<base64>"}``. Values:
string ``<text>``; hash ``[[field, value], ...]`` (insertion order); list ``[elem, ...]``; set
``[member, ...]`` sorted by bytes; zset ``[[member, score], ...]`` by score then member (Redis's
order; ``"inf"``/``"-inf"`` for infinite scores); stream ``[{"id": "<ms>-<seq>", "fields":
[[field, value], ...]}, ...]`` by ID. A value whose JSON is larger than the image limit is
replaced by the marker ``{"_omitted_bytes": <size of its JSON>}``.
"""

from __future__ import annotations

import base64
import math
from typing import Any

import orjson

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


class Entry:
    """One key's value, type and expiry; ``json`` caches the value's JSON (``None``: stale)."""

    __slots__ = ("expire_at_ms", "json", "type", "value")

    def __init__(self, type_: str, value: Any, expire_at_ms: int | None = None) -> None:
        self.type = type_
        self.value = value
        self.expire_at_ms = expire_at_ms
        self.json: bytes | None = None


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
        ordered = sorted(value.items(), key=lambda item: (item[1], item[0]))
        return [[text(m), format_score(s)] for m, s in ordered]
    return [
        {"id": format_id(i), "fields": [[text(f), text(v)] for f, v in _pairs(e)]}
        for i, e in value.entries.items()
    ]


def _pairs(fields: list[bytes]) -> zip[tuple[bytes, bytes]]:
    return zip(fields[::2], fields[1::2], strict=True)


def value_json(entry: Entry) -> bytes:
    """The JSON of ``entry``'s value, cached on the entry until it changes."""
    cached = entry.json
    if cached is None:
        value = entry.value
        if entry.type == STRING and is_plain(value):
            cached = b'"' + value + b'"'  # the common case, no escaping possible
        else:
            cached = orjson.dumps(_json_value(entry))
        entry.json = cached
    return cached


_PLAIN = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
"""Bytes that stand for themselves inside a JSON string."""


def is_plain(value: bytes) -> bool:
    """Whether ``value`` is printable ASCII without ``"`` or ``\\`` (its JSON is itself, quoted)."""
    return not value.translate(None, _PLAIN)


def key_json(key: bytes) -> bytes:
    """The JSON of a key: see :func:`text`."""
    if is_plain(key):
        return b'"' + key + b'"'
    return orjson.dumps(text(key))


def key_image(db: int, key: bytes) -> bytes:
    """The image of a key without its value (KEYS_ONLY, and the other side of one-image
    views): ``{"db": <db>, "key": <text>}``."""
    return b'{"db":%d,"key":%s}' % (db, key_json(key))


def full_image(db: int, key: bytes, entry: Entry, max_value_bytes: int | None = None) -> bytes:
    """The image of a key with its value (see the module docstring). A value whose JSON
    exceeds ``max_value_bytes`` is replaced by ``{"_omitted_bytes": n}``."""
    value = value_json(entry)
    if max_value_bytes is not None and len(value) > max_value_bytes:
        value = b'{"_omitted_bytes":%d}' % len(value)
    expire = b"null" if entry.expire_at_ms is None else b"%d" % entry.expire_at_ms
    return b'{"db":%d,"key":%s,"type":"%s,"value":%s,"expire_at_ms":%s}' % (
        db, key_json(key), entry.type.encode() + b'"', value, expire,
    )  # fmt: skip


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
        value = {untext(m): float(s) for m, s in raw}
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
