"""The JSON of plain values and of images: moonish.values._cjson (C) where it is built, else the
Python here, which gives the same bytes (tests/values/test_c_json.py compares them).

*Plain* bytes are printable ASCII other than ``"`` and ``\\``
(:data:`moonish.values.jsontext.PLAIN`): their JSON string is themselves between quotes. Each
function returns ``None`` for data that is not plain; the caller then builds the JSON with orjson
(:mod:`moonish.values.model`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import orjson

from moonish.values.jsontext import PLAIN

try:  # the C extension (setup.py NATIVE), absent in a pure build
    from moonish.values import _cjson
except ImportError:
    _cjson = None  # type: ignore[assignment]

_PLAIN_OR_QUOTE: Final = PLAIN + b'"'


def quote_py(value: bytes) -> bytes | None:
    """``"value"``, or ``None`` unless ``value`` is plain."""
    return None if value.translate(None, PLAIN) else b'"' + value + b'"'


def array_py(items: Sequence[bytes]) -> bytes | None:
    """``["a","b"]``: ``items`` in order (``[]`` when empty), or ``None`` unless all are
    plain."""
    if not items:
        return b"[]"
    # The items joined with the plain form's separators are the JSON's middle when they are
    # plain, i.e. when its only quotes are the separators' own.
    body = b'","'.join(items)
    if body.translate(None, _PLAIN_OR_QUOTE) or body.count(b'"') != 2 * len(items) - 2:
        return None
    return b'["' + body + b'"]'


def sorted_array_py(items: Iterable[bytes]) -> bytes | None:
    """:func:`array_py` of ``items`` in byte order (a set's members)."""
    return array_py(sorted(items))


def pairs_py(fields: dict[bytes, bytes]) -> bytes | None:
    """``[["f","v"],...]``: a hash's fields and values in its order (``[]`` when empty), or
    ``None`` unless all are plain."""
    if not fields:
        return b"[]"
    body = b'"],["'.join(map(b'","'.join, fields.items()))
    if body.translate(None, _PLAIN_OR_QUOTE) or body.count(b'"') != 4 * len(fields) - 2:
        return None
    return b'[["' + body + b'"]]'


def scored_py(order: Sequence[tuple[float, bytes]]) -> bytes | None:
    """``[["m",1.5],...]``: a sorted set's ``(score, member)`` pairs in Redis's order (``[]``
    when empty), the scores as orjson writes them; ``None`` unless every member is plain and
    every score finite."""
    if not order:
        return b"[]"
    members = b"".join([member for _, member in order])
    if members.translate(None, PLAIN) or math.isinf(order[0][0]) or math.isinf(order[-1][0]):
        return None
    return orjson.dumps([[member.decode(), score] for score, member in order])


def stream_entries_py(entries: dict[tuple[int, int], list[bytes]]) -> bytes | None:
    """``[{"id":"1-0","fields":[["f","v"],...]},...]``: a stream's entries in order (``[]``
    when empty), or ``None`` unless every entry has fields (an even count of them) and all
    are plain."""
    if not entries:
        return b"[]"
    for fields in entries.values():
        if not fields or len(fields) % 2 or b"".join(fields).translate(None, PLAIN):
            return None
    return (
        b"["
        + b",".join(
            [
                b'{"id":"%d-%d","fields":[["' % stream_id
                + b'"],["'.join(
                    [f + b'","' + v for f, v in zip(fields[::2], fields[1::2], strict=True)]
                )
                + b'"]]}'
                for stream_id, fields in entries.items()
            ]
        )
        + b"]"
    )


def stream_bytes_py(entries: dict[tuple[int, int], list[bytes]]) -> int:
    """The bytes of all fields and values of a stream's entries."""
    return len(b"".join(map(b"".join, entries.values())))


def image_py(
    db: int,
    key_json: bytes,
    type_piece: bytes,
    value_json: bytes,
    expire_at_ms: int | None,
    end: bytes,
) -> bytes:
    """``{"db":<db>,"key":<key_json><type_piece><value_json>,"expire_at_ms":<ms|null><end>``:
    a full image from its JSON pieces (docs/images.md)."""
    expire = b"null" if expire_at_ms is None else b"%d" % expire_at_ms
    return b'{"db":%d,"key":%s%s%s,"expire_at_ms":%s%s' % (
        db,
        key_json,
        type_piece,
        value_json,
        expire,
        end,
    )


def plain_image_py(
    db: int,
    key: bytes,
    type_piece: bytes,
    value_json: bytes,
    expire_at_ms: int | None,
    end: bytes,
) -> bytes | None:
    """:func:`image_py` with ``key`` quoted, or ``None`` unless ``key`` is plain."""
    quoted = quote_py(key)
    if quoted is None:
        return None
    return image_py(db, quoted, type_piece, value_json, expire_at_ms, end)


def _orjson_writes_repr() -> bool:
    """Whether the installed orjson writes floats as Python's ``repr`` does outside [1e-10,
    1e-4), the form ``_cjson.scored`` writes (so its bytes are orjson's); checked once, so an
    orjson that wrote them otherwise would only make sorted sets' images slower."""
    samples = (0.0, -0.0, 1.0, -7.25, 0.1, 1e15, 1e16, -1.5e300, 1e-10, 2.5e-300, 123456.789)
    return all(orjson.dumps(x) == repr(x).encode() for x in samples)


# What the state modules call: the C functions where built, else the Python above.
quote: Final[Callable[[bytes], bytes | None]] = quote_py if _cjson is None else _cjson.quote
array: Final[Callable[[Sequence[bytes]], bytes | None]] = (
    array_py if _cjson is None else _cjson.array
)
sorted_array: Final[Callable[[Iterable[bytes]], bytes | None]] = (
    sorted_array_py if _cjson is None else _cjson.sorted_array
)
pairs: Final[Callable[[dict[bytes, bytes]], bytes | None]] = (
    pairs_py if _cjson is None else _cjson.pairs
)
scored: Final[Callable[[Sequence[tuple[float, bytes]]], bytes | None]] = (
    _cjson.scored if _cjson is not None and _orjson_writes_repr() else scored_py
)
stream_entries: Final[Callable[[dict[tuple[int, int], list[bytes]]], bytes | None]] = (
    stream_entries_py if _cjson is None else _cjson.stream_entries
)
stream_bytes: Final[Callable[[dict[tuple[int, int], list[bytes]]], int]] = (
    stream_bytes_py if _cjson is None else _cjson.stream_bytes
)
image: Final[Callable[[int, bytes, bytes, bytes, int | None, bytes], bytes | None]] = (
    plain_image_py if _cjson is None else _cjson.image
)
