"""Cursors: positions in one shard's log, as values that parse, print and order.

A cursor is the next LSN a reader wants. A read from cursor ``c`` returns records with LSNs in
the half-open range ``[c, next)`` and hands back ``next`` as the cursor to resume from, so
resuming from any emitted cursor yields exactly the rest of the log, each record once.

LSNs start at 1 in every shard; cursor 0 means "from the beginning" and reads exactly like 1.

A consumer that starts from a snapshot (``--snapshot``) is first inside the snapshot taken at
LSN ``L``: its cursor is ``snapshot:<L>:<rows delivered>`` (``lsn = L + 1``,
``snapshot_row``); once every row is delivered it becomes the plain LSN ``L + 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

from moonish.errors import InvalidArgumentError

MAX_LSN = 2**64 - 1


@dataclass(frozen=True, order=True, slots=True)
class Cursor:
    """The next LSN to read in one shard (an unsigned 64-bit integer), and, inside a
    snapshot, the next snapshot row (the snapshot is the one at ``lsn - 1``)."""

    lsn: int
    snapshot_row: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.lsn <= MAX_LSN:
            raise InvalidArgumentError(
                f"cursor LSN must be between 0 and {MAX_LSN}, got {self.lsn}"
            )
        if self.snapshot_row is not None and (self.snapshot_row < 0 or self.lsn < 1):
            raise InvalidArgumentError(f"bad snapshot cursor {self.lsn}/{self.snapshot_row}")

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """Parse the form printed by ``str(cursor)``: a decimal LSN or ``snapshot:<L>:<row>``.

        Raises:
            InvalidArgumentError: ``text`` is neither a decimal integer in ``[0, 2**64)`` nor
                a snapshot cursor.
        """
        stripped = text.strip()
        if stripped.startswith("snapshot:"):
            parts = stripped.split(":")
            if len(parts) != 3 or not all(_is_number(p) for p in parts[1:]):
                raise InvalidArgumentError(
                    f"snapshot cursor must be snapshot:<lsn>:<row>, got {_shown(text)}"
                )
            return cls(int(parts[1]) + 1, int(parts[2]))
        if not _is_number(stripped):
            raise InvalidArgumentError(
                f"cursor must be a non-negative integer LSN below 2**64, got {_shown(text)}"
            )
        return cls(int(stripped))

    def __str__(self) -> str:
        if self.snapshot_row is not None:
            return f"snapshot:{self.lsn - 1}:{self.snapshot_row}"
        return str(self.lsn)


MAX_DIGITS = len(str(MAX_LSN))


def _is_number(text: str) -> bool:
    """Decimal digits that can be a u64 (checked by length first: Python refuses to convert
    strings of more than 4,300 digits, and a huge one is no LSN anyway)."""
    return text.isascii() and text.isdigit() and len(text.lstrip("0") or "0") <= MAX_DIGITS


def _shown(text: str) -> str:
    """``text`` for an error message, cut short when it is long."""
    return repr(text) if len(text) <= 40 else f"{text[:20]!r}... ({len(text)} characters)"
