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
            if len(parts) != 3 or not all(p.isdigit() and p.isascii() for p in parts[1:]):
                raise InvalidArgumentError(
                    f"snapshot cursor must be snapshot:<lsn>:<row>, got {text!r}"
                )
            return cls(int(parts[1]) + 1, int(parts[2]))
        if not stripped.isdigit() or not stripped.isascii():
            raise InvalidArgumentError(f"cursor must be a non-negative integer LSN, got {text!r}")
        return cls(int(stripped))

    def __str__(self) -> str:
        if self.snapshot_row is not None:
            return f"snapshot:{self.lsn - 1}:{self.snapshot_row}"
        return str(self.lsn)
