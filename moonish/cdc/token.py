"""Tokens: one position over every shard of a data directory, as text that sorts in stream order.

A token holds, per shard, the last LSN delivered (0: nothing yet). It is exclusive, like
CouchDB's ``since``: a read from a token returns the changes after it. Shards are numbered
by their directories (``shard-0``, ``shard-1``, …), and component ``k`` is shard ``k``.

Text form (version ``m``)::

    m4.d1234.b12.a0.e99999

``m`` and the shard count, then one component per shard: a letter giving the number of
decimal digits (``a`` = 1 … ``t`` = 20, enough for any u64 LSN) and the LSN without leading
zeros. Within one data directory every token has the same prefix, and a component with more
digits has a later letter, so comparing two tokens as text compares their positions shard by
shard. A merged stream only ever moves components forward, so a later token never sorts
before an earlier one (``sorted()`` on tokens as strings gives the order they were emitted).

``earliest`` and ``now`` are accepted wherever a token is; they are resolved against the log
(:func:`moonish.cdc.positions.resolve`).
"""

from __future__ import annotations

from dataclasses import dataclass

from moonish.cdc.cursor import MAX_LSN
from moonish.errors import InvalidArgumentError

VERSION = "m"
MAX_SHARDS = 65_536
_LETTERS = "abcdefghijklmnopqrst"  # digit counts 1..20
EARLIEST = "earliest"
NOW = "now"


@dataclass(frozen=True, slots=True)
class Token:
    """The last LSN delivered in each shard of a data directory (0: none), shard 0 first."""

    positions: tuple[int, ...]

    def __post_init__(self) -> None:
        if not 1 <= len(self.positions) <= MAX_SHARDS:
            raise InvalidArgumentError(
                f"a token has 1 to {MAX_SHARDS} shard positions, got {len(self.positions)}"
            )
        for lsn in self.positions:
            if not 0 <= lsn <= MAX_LSN:
                raise InvalidArgumentError(f"token positions are LSNs in [0, 2**64), got {lsn}")

    @classmethod
    def start(cls, shards: int) -> Token:
        """The token before every change of ``shards`` shards (all positions 0)."""
        return cls((0,) * shards)

    @classmethod
    def parse(cls, text: str, shards: int | None = None) -> Token:
        """Parse the form ``str(token)`` prints.

        Args:
            text: the token text (surrounding whitespace ignored).
            shards: the data directory's shard count; a token of another count is refused.

        Raises:
            InvalidArgumentError: not a token of this form, or of the wrong shard count.
        """
        stripped = text.strip()
        head, _, rest = stripped.partition(".")
        count = head[1:]
        if not (head[:1] == VERSION and count.isascii() and count.isdigit() and rest):
            raise InvalidArgumentError(
                f"a token looks like m<shards>.<position>..., got {_shown(text)}"
            )
        parts = rest.split(".")
        if len(count) > 6 or int(count) != len(parts):
            raise InvalidArgumentError(
                f"token {_shown(text)} says {count} shards but holds {len(parts)} positions"
            )
        if shards is not None and len(parts) != shards:
            raise InvalidArgumentError(
                f"token {_shown(text)} is for {len(parts)} shards; this data directory has {shards}"
            )
        return cls(tuple(_component(part, text) for part in parts))

    def __str__(self) -> str:
        return f"{VERSION}{len(self.positions)}." + ".".join(map(component, self.positions))


def component(lsn: int) -> str:
    """One position's text in a token: a letter for its digit count (a=1 … t=20), the digits."""
    digits = str(lsn)
    return _LETTERS[len(digits) - 1] + digits


def _component(part: str, text: str) -> int:
    digits = part[1:]
    letter = _LETTERS.find(part[:1]) if part else -1
    if (
        letter < 0
        or not (digits.isascii() and digits.isdigit())
        or len(digits) != letter + 1
        or (len(digits) > 1 and digits[0] == "0")
    ):
        raise InvalidArgumentError(
            f"bad token position {_shown(part)} in {_shown(text)}: a letter (a=1 … t=20 "
            "digits) and that many digits"
        )
    value = int(digits)
    if value > MAX_LSN:
        raise InvalidArgumentError(f"token position {value} is not below 2**64 in {_shown(text)}")
    return value


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else f"{text[:30]!r}... ({len(text)} characters)"
