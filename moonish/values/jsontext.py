"""Byte strings and stream IDs as image JSON text (docs/images.md, "Images").

A byte string is a JSON string when it is UTF-8, else ``{"_b64": "<standard padded base64>"}``;
a stream ID is the text ``"<ms>-<seq>"``. :mod:`moonish.values.model` and
:mod:`moonish.values.streams` build images from these.
"""

from __future__ import annotations

import base64
from typing import Any, Final

StreamId = tuple[int, int]
"""A stream entry ID: (milliseconds, sequence number), both unsigned 64-bit."""


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


PLAIN: Final = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')
"""Bytes that stand for themselves inside a JSON string."""


def is_plain(value: bytes) -> bool:
    """Whether ``value`` is printable ASCII without ``"`` or ``\\`` (its JSON is itself, quoted)."""
    return not value.translate(None, PLAIN)


def format_id(stream_id: StreamId) -> str:
    """``"<ms>-<seq>"``."""
    return f"{stream_id[0]}-{stream_id[1]}"


def parse_id_text(text_id: str) -> StreamId:
    """The inverse of :func:`format_id`.

    Raises:
        ValueError: not ``"<ms>-<seq>"`` with two unsigned 64-bit numbers.
    """
    ms, dash, seq = text_id.partition("-")
    if not (dash and ms.isascii() and ms.isdigit() and seq.isascii() and seq.isdigit()):
        raise ValueError(f"not a stream ID: {text_id!r}")
    parsed = int(ms), int(seq)
    if parsed[0] >= 2**64 or parsed[1] >= 2**64:
        raise ValueError(f"not a stream ID: {text_id!r}")
    return parsed
