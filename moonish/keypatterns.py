"""Redis glob patterns over keys, as ``SCAN ... MATCH`` and ``KEYS`` read them.

The grammar is ``stringmatchlen`` in Redis's ``util.c`` (case-sensitive, over bytes): ``*``
any run of bytes, ``?`` one byte, ``[abc]`` one of a set, ``[^a]`` one byte not in it,
``[a-z]`` a range (a reversed range is swapped), ``\\x`` the byte ``x`` itself (also inside
brackets); ``[]`` matches nothing and ``[^]`` any byte. A pattern moonish would read otherwise
than Redis (an unclosed ``[``, a trailing ``\\``) is refused rather than guessed at. Each
pattern is compiled once into a regular expression.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from moonish.errors import InvalidArgumentError


def pattern_bytes(pattern: str | bytes) -> bytes:
    """``pattern`` as bytes (text as UTF-8, ``surrogateescape`` for bytes that are not),
    checked.

    Raises:
        InvalidArgumentError: as :func:`glob_regex`.
    """
    raw = pattern if isinstance(pattern, bytes) else pattern.encode("utf-8", "surrogateescape")
    glob_regex(raw)
    return raw


def pattern_text(pattern: bytes) -> str:
    """The inverse of :func:`pattern_bytes`."""
    return pattern.decode("utf-8", "surrogateescape")


def glob_regex(pattern: bytes) -> re.Pattern[bytes]:
    """``pattern`` compiled, for ``fullmatch``.

    Raises:
        InvalidArgumentError: an unclosed ``[`` or a trailing ``\\``.
    """
    out: list[bytes] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i : i + 1]
        if c == b"*":
            out.append(b".*")
        elif c == b"?":
            out.append(b".")
        elif c == b"\\":
            if i + 1 >= n:
                raise _bad(pattern, "ends with a lone backslash")
            i += 1
            out.append(re.escape(pattern[i : i + 1]))
        elif c == b"[":
            i, part = _bracket(pattern, i + 1)
            out.append(part)
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile(b"".join(out), re.DOTALL)


class KeyPatterns:
    """Several patterns, tried in order.

    Args:
        patterns: the patterns (bytes or text, see :func:`pattern_bytes`).

    Raises:
        InvalidArgumentError: a pattern :func:`glob_regex` refuses.
    """

    def __init__(self, patterns: Iterable[str | bytes]) -> None:
        self.patterns = tuple(pattern_bytes(p) for p in patterns)
        self._regexes = [glob_regex(p) for p in self.patterns]

    def __bool__(self) -> bool:
        return bool(self.patterns)

    def first(self, key: bytes) -> int | None:
        """The index of the first pattern ``key`` matches, or ``None``."""
        for index, regex in enumerate(self._regexes):
            if regex.fullmatch(key):
                return index
        return None

    def any(self, key: bytes) -> bool:
        """Whether ``key`` matches one of the patterns."""
        return any(regex.fullmatch(key) for regex in self._regexes)


def _bracket(pattern: bytes, i: int) -> tuple[int, bytes]:
    """The class starting after ``[`` at ``i``: (index of its ``]``, regex class)."""
    n = len(pattern)
    negate = i < n and pattern[i : i + 1] == b"^"
    i += negate
    members: list[bytes] = []
    while True:
        if i >= n:
            raise _bad(pattern, "has an unclosed [")
        c = pattern[i : i + 1]
        if c == b"]":
            break
        if c == b"\\" and i + 1 < n:
            i += 1
            members.append(re.escape(pattern[i : i + 1]))
        elif i + 2 < n and pattern[i + 1 : i + 2] == b"-" and pattern[i + 2 : i + 3] != b"]":
            low, high = sorted((pattern[i], pattern[i + 2]))
            members.append(b"\\x%02x-\\x%02x" % (low, high))
            i += 2
        else:
            members.append(re.escape(c))
        i += 1
    if not members:
        return i, b"." if negate else b"(?!)"
    return i, b"[" + (b"^" if negate else b"") + b"".join(members) + b"]"


def _bad(pattern: bytes, why: str) -> InvalidArgumentError:
    return InvalidArgumentError(f"key pattern {pattern_text(pattern)!r} {why}")
