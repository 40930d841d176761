"""Cursors: positions in one shard's log, as values that parse, print and order.

A cursor is the next LSN a reader wants. A read from cursor ``c`` returns records with LSNs in
the half-open range ``[c, next)`` and hands back ``next`` as the cursor to resume from, so
resuming from any emitted cursor yields exactly the rest of the log, each record once.

LSNs start at 1 in every shard; cursor 0 means "from the beginning" and reads exactly like 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from moonish.errors import InvalidArgumentError

MAX_LSN = 2**64 - 1


@dataclass(frozen=True, order=True, slots=True)
class Cursor:
    """The next LSN to read in one shard (an unsigned 64-bit integer)."""

    lsn: int

    def __post_init__(self) -> None:
        if not 0 <= self.lsn <= MAX_LSN:
            raise InvalidArgumentError(
                f"cursor LSN must be between 0 and {MAX_LSN}, got {self.lsn}"
            )

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """Parse the decimal form printed by ``str(cursor)``.

        Raises:
            InvalidArgumentError: ``text`` is not a decimal integer in ``[0, 2**64)``.
        """
        stripped = text.strip()
        if not stripped.isdigit() or not stripped.isascii():
            raise InvalidArgumentError(f"cursor must be a non-negative integer LSN, got {text!r}")
        return cls(int(stripped))

    def __str__(self) -> str:
        return str(self.lsn)
