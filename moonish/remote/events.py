"""What a remote read yields: events with their tokens, batches stored by column, and how
the server's rows are taken apart (docs/server.md, "Framing").

A row is ``{"seq":"<token after>","change":<envelope>}``; the envelope bytes are cut out of
the row as they came (not parsed and encoded again), so they are byte for byte what the
server's encoder wrote, and ``cdc read URL`` prints what ``cdc read DATA_DIR`` prints (up to
the envelope's processing time, its top-level ``ts_ms``/``ts_us``/``ts_ns``: when it was
encoded). Only :class:`RemoteEvent`'s ``shard``, ``lsn``, ``op`` and ``commit_us`` need the
envelope parsed, which is done when an event is built, never for output of envelopes.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, overload

import orjson

from moonish.cdc.merged import Resolved
from moonish.cdc.token import Token
from moonish.errors import InvalidArgumentError

ROW_START = b'{"seq":"'
ROW_MIDDLE = b'","change":'


class RemoteEvent(NamedTuple):
    """One change read from a server: :class:`moonish.ChangeEvent`'s fields that an
    envelope carries, and the token after it.

    Attributes:
        shard: ``source.shard``.
        lsn: ``source.lsn``.
        op: the Debezium op (``c``, ``u``, ``d``, ``r``, ``t``, ``m``).
        commit_us: commit time, µs since the Unix epoch (``source.ts_us``).
        envelope: the Debezium JSON envelope, UTF-8, no trailing newline, as the server sent it.
        token: the position after this change: a read from it gives exactly the rest.
    """

    shard: int
    lsn: int
    op: str
    commit_us: int
    envelope: bytes
    token: Token


def event_of(envelope: bytes, seq: str) -> RemoteEvent:
    """Build the event of one envelope and its token text."""
    document = orjson.loads(envelope)
    source = document["source"]
    return RemoteEvent(
        source["shard"],
        source["lsn"],
        document["op"],
        source["ts_us"],
        envelope,
        Token.parse(seq),
    )


class RemoteBatch(Sequence[RemoteEvent]):
    """Events in stream order, stored by column; :class:`RemoteEvent` objects are built only
    when indexed or iterated, so writing ``envelopes`` costs no per-event parse.

    Attributes:
        envelopes: the envelope bytes per event.
        seqs: the token after each event, as text (tokens sort as text in stream order).
        token: the position after the batch (after its last event, or further when the
            server's position moved past changes it did not send).
    """

    __slots__ = ("envelopes", "seqs", "token")

    def __init__(self, envelopes: list[bytes], seqs: list[str], token: Token) -> None:
        self.envelopes, self.seqs, self.token = envelopes, seqs, token

    def __len__(self) -> int:
        return len(self.envelopes)

    @overload
    def __getitem__(self, index: int) -> RemoteEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[RemoteEvent]: ...

    def __getitem__(self, index: int | slice) -> RemoteEvent | list[RemoteEvent]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return event_of(self.envelopes[index], self.seqs[index])

    def __iter__(self) -> Iterator[RemoteEvent]:
        for envelope, seq in zip(self.envelopes, self.seqs, strict=True):
            yield event_of(envelope, seq)

    def __repr__(self) -> str:
        return f"RemoteBatch({len(self)} events, token={self.token})"


@dataclass(frozen=True, slots=True)
class RemoteResult:
    """One batch of a remote read (the shape of :class:`moonish.MergedResult`).

    Attributes:
        token: where to resume: the position after the last event (the requested one when
            nothing was new).
        events: the events in stream order.
        pending: records the log held after ``token`` when the server answered (every shard).
    """

    token: Token
    events: RemoteBatch
    pending: int


def split_row(line: bytes) -> tuple[str, bytes] | None:
    """``(token text, envelope bytes)`` of a row line (no newline), or ``None`` when the line
    is not a row (a marker, a position, an error, a heartbeat)."""
    if not line.startswith(ROW_START):
        return None
    end = line.find(b'"', len(ROW_START))
    if end < 0 or not line.startswith(ROW_MIDDLE, end) or not line.endswith(b"}"):
        return None
    return line[len(ROW_START) : end].decode("ascii"), line[end + len(ROW_MIDDLE) : -1]


def resolved_of(document: dict[str, object]) -> Resolved:
    """The :class:`~moonish.cdc.merged.Resolved` marker of a ``{"resolved": {...}}`` line.

    Raises:
        KeyError, TypeError, InvalidArgumentError: not a marker's shape.
    """
    marker = document["resolved"]
    if not isinstance(marker, dict):
        raise TypeError("resolved is not an object")
    return Resolved(int(marker["ts_us"]), Token.parse(str(marker["token"])))


RESULTS_START = b'{"results":['
RESULTS_END = b'],"last_seq":"'


def parse_results(raw: bytes) -> tuple[RemoteBatch, int] | None:
    """The batch and ``pending`` of a ``normal`` read's body,
    ``{"results":[<row>,\\n<row>...],"last_seq":"<token>","pending":<n>}``, or ``None`` when
    the body is not of that form. Rows are separated by ``,\\n`` (envelopes hold no raw
    newline), so every envelope is cut out as sent."""
    end = raw.rfind(RESULTS_END)
    if not raw.startswith(RESULTS_START) or end < 0:
        return None
    try:
        tail = orjson.loads(b"{" + raw[end + 2 :])
        token = Token.parse(str(tail["last_seq"]))
        pending = int(tail["pending"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, InvalidArgumentError):
        return None
    inner = raw[len(RESULTS_START) : end]
    envelopes, seqs = [], []
    for line in inner.split(b",\n") if inner else []:
        row = split_row(line)
        if row is None:
            return None
        seqs.append(row[0])
        envelopes.append(row[1])
    return RemoteBatch(envelopes, seqs, token), pending
