"""Runs of envelopes with the token after each, framed once for every reader that wants them.

A :class:`Chunk` is what one round of a merged reader returned (moonish.cdc.merged_read): the
envelope bytes in stream order, the token after each event (``seqs``, text), the token
before and after the run, and the frames (for filters). Framing is built once per chunk
and format and cached: every subscriber positioned exactly on the chunk writes the same
bytes object (``Chunk.blob``), so an envelope is encoded and framed once however many
subscribers receive it.

Framing (docs/server.md, "Framing"):

- rows (NDJSON: ``continuous``, ``longpoll``/``normal`` results, WebSocket binary frames):
  ``{"seq":"<token after>","change":<envelope>}\\n`` per change;
  ``{"resolved":{"ts_us","ts_ms","token"}}\\n`` per marker; ``{"last_seq":"<token>"}\\n``
  for a position without a change (a filtered feed's heartbeat, the end of a feed).
- SSE (``eventsource``): ``id: <token after>\\ndata: <envelope>\\n\\n`` per change;
  ``event: resolved`` with ``id:`` and the marker as data; ``event: heartbeat`` with ``id:``
  (the position) and empty data.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter

from moonish.cdc.merged import MergedBatch, Resolved
from moonish.cdc.token import VERSION, Token
from moonish.errors import InvalidArgumentError
from moonish.keypatterns import KeyPatterns
from moonish.log.format import RecordType
from moonish.log.frames import Frame
from moonish.log.payloads import change_key, decode_payload
from moonish.log.records import KvCommand, PayloadError

RECORD_TYPES = {kind.name.lower(): int(kind) for kind in RecordType}
OPS = frozenset({"c", "u", "d", "r", "t", "m"})


class Framing:
    """How changes, markers and positions are written for one kind of feed."""

    name = "rows"
    LINE = b'{"seq":"%b","change":%b}\n'
    """One change: its token after, its envelope."""

    def line(self, seq: bytes, envelope: bytes) -> bytes:
        return self.LINE % (seq, envelope)

    def marker(self, marker: Resolved) -> bytes:
        return marker.to_json() + b"\n"

    def position(self, token: Token) -> bytes:
        """A position without a change (a filtered feed's heartbeat, the end of a feed)."""
        return b'{"last_seq":"%b"}\n' % str(token).encode()

    def heartbeat(self, token: Token, moved: bool) -> bytes:
        """What keeps an idle feed open; carries the position if it moved unseen."""
        return self.position(token) if moved else b"\n"


class SseFraming(Framing):
    """Server-sent events (WHATWG HTML, "Server-sent events"): the token is the event id."""

    name = "sse"
    LINE = b"id: %b\ndata: %b\n\n"

    def marker(self, marker: Resolved) -> bytes:
        return b"event: resolved\nid: %b\ndata: %b\n\n" % (
            str(marker.token).encode(),
            marker.to_json(),
        )

    def position(self, token: Token) -> bytes:
        text = str(token).encode()
        return b'event: last_seq\nid: %b\ndata: {"last_seq":"%b"}\n\n' % (text, text)

    def heartbeat(self, token: Token, moved: bool) -> bytes:
        return b"event: heartbeat\nid: %b\ndata: \n\n" % str(token).encode()


ROWS = Framing()
SSE = SseFraming()


@dataclass(frozen=True, slots=True)
class KeyRule:
    """Which keys a feed delivers the changes of: a key passes when it matches one pattern
    of every set in ``include`` and no pattern of any set in ``exclude`` (Redis glob
    patterns, moonish.keypatterns). Sets from the server (``serve --include-keys``) and from
    the request (``include_keys=``) are ANDed: :meth:`both`.

    Changes without a key (a FLUSHDB's ``t``, messages, checkpoints) are not judged by key
    patterns, as the Kafka sink's ``include_keys``/``exclude_keys`` do not judge them.
    """

    include: tuple[KeyPatterns, ...] = ()
    exclude: tuple[KeyPatterns, ...] = ()

    @classmethod
    def of(cls, include_keys: Iterable[str], exclude_keys: Iterable[str]) -> KeyRule | None:
        """The rule of these patterns (text as UTF-8), ``None`` when there are none.

        Raises:
            InvalidArgumentError: a pattern moonish.keypatterns refuses (an unclosed ``[``,
                a trailing backslash).
        """
        include, exclude = KeyPatterns(include_keys), KeyPatterns(exclude_keys)
        if not (include or exclude):
            return None
        return cls((include,) if include else (), (exclude,) if exclude else ())

    def both(self, other: KeyRule | None) -> KeyRule:
        """The rule that passes a key when this one and ``other`` both do."""
        if other is None:
            return self
        return KeyRule(self.include + other.include, self.exclude + other.exclude)

    def keeps(self, key: bytes) -> bool:
        """Whether the changes of ``key`` are delivered."""
        return all(p.any(key) for p in self.include) and not any(p.any(key) for p in self.exclude)


@dataclass(frozen=True, slots=True)
class Filter:
    """Which changes a feed delivers; the others still move its token.

    Attributes:
        dbs: Redis database numbers (``None``: any).
        key_prefix: keys starting with these bytes (``None``: any; records without a key,
            such as checkpoints, never match a prefix).
        ops: Debezium ops (``c``, ``u``, ``d``, ``r``, ``t``, ``m``).
        types: record types (``RecordType`` values).
        keys: key patterns (:class:`KeyRule`; ``None``: any key).
    """

    dbs: frozenset[int] | None = None
    key_prefix: bytes | None = None
    ops: frozenset[str] | None = None
    types: frozenset[int] | None = None
    keys: KeyRule | None = None

    @property
    def everything(self) -> bool:
        return (
            self.dbs is None
            and self.key_prefix is None
            and self.ops is None
            and self.types is None
            and self.keys is None
        )

    @classmethod
    def parse(
        cls,
        db: str | None,
        key_prefix: str | None,
        op: str | None,
        record_type: str | None,
        include_keys: Sequence[str] = (),
        exclude_keys: Sequence[str] = (),
        server_keys: KeyRule | None = None,
    ) -> Filter:
        """The filter of a request's ``db``, ``key_prefix``, ``op`` and ``type`` parameters
        (comma-separated lists; the key prefix as UTF-8) and its ``include_keys`` and
        ``exclude_keys`` (one pattern each, repeatable), ANDed with the server's own key
        patterns ``server_keys``.

        Raises:
            InvalidArgumentError: a value that is not a db number, op or record type name;
                a key pattern moonish.keypatterns refuses.
        """
        dbs = None
        if db is not None:
            try:
                dbs = frozenset(int(part) for part in db.split(","))
            except ValueError:
                raise InvalidArgumentError(
                    f"db is a comma-separated list of numbers: {db!r}"
                ) from None
        ops = None if op is None else frozenset(op.split(","))
        if ops is not None and not ops <= OPS:
            raise InvalidArgumentError(f"op takes {','.join(sorted(OPS))}; got {op!r}")
        types = None
        if record_type is not None:
            names = record_type.split(",")
            unknown = [name for name in names if name not in RECORD_TYPES]
            if unknown:
                raise InvalidArgumentError(
                    f"type takes {','.join(RECORD_TYPES)}; got {','.join(unknown)!r}"
                )
            types = frozenset(RECORD_TYPES[name] for name in names)
        prefix = None if key_prefix is None else key_prefix.encode()
        keys = KeyRule.of(include_keys, exclude_keys)
        keys = server_keys if keys is None else keys.both(server_keys)
        return cls(dbs, prefix, ops, types, keys)

    def select(self, frames: Sequence[Frame], ops: Sequence[str], lo: int, hi: int) -> list[int]:
        """The indexes in ``[lo, hi)`` of the events this filter passes, ascending."""
        keep = []
        rule = self.keys
        for i in range(lo, hi):
            frame = frames[i]
            if self.ops is not None and ops[i] not in self.ops:
                continue
            if self.types is not None and frame.record_type not in self.types:
                continue
            if self.dbs is not None or self.key_prefix is not None or rule is not None:
                db, key = db_and_key(frame)
                if self.dbs is not None and db not in self.dbs:
                    continue
                if self.key_prefix is not None and (
                    key is None or not key.startswith(self.key_prefix)
                ):
                    continue
                if rule is not None and key is not None and not rule.keeps(key):
                    continue
            keep.append(i)
        return keep


def db_and_key(frame: Frame) -> tuple[int | None, bytes | None]:
    """A record's Redis db and key: kv_change and kv records have both, a message its db,
    other records neither."""
    try:
        if frame.record_type == RecordType.KV_CHANGE:
            return change_key(frame.payload)
        record = decode_payload(frame.record_type, frame.payload)
    except PayloadError:
        return None, None  # the encoder already accepted it; a filter does not judge it
    return getattr(record, "db", None), record.key if isinstance(record, KvCommand) else None


class Chunk:
    """Events in stream order with the token after each (see the module docstring).

    Attributes:
        index: the ring position of the first event (set by the ring; 0 otherwise).
        before, after: the tokens before the first and after the last event.
        envelopes: envelope bytes per event.
        indexes: each event's shard number (token component).
        frames, ops: per event, as in :class:`~moonish.cdc.merged.MergedBatch`.
        resolved: a marker that comes after the events, or ``None``.
        nbytes: memory it may hold (envelopes, tokens, payloads and both framings).
        next, evicted: the ring's link to the next chunk, and whether this one left the ring.
    """

    __slots__ = (
        "_blobs",
        "_ends",
        "_ops",
        "_seqs",
        "_source",
        "after",
        "before",
        "envelopes",
        "evicted",
        "frames",
        "index",
        "indexes",
        "nbytes",
        "next",
        "resolved",
    )

    def __init__(
        self,
        before: Token,
        after: Token,
        envelopes: list[bytes],
        indexes: list[int],
        frames: list[Frame],
        source: MergedBatch | None = None,
    ) -> None:
        """``source``: the batch the events come from (its ``ops`` are taken on first use)."""
        self.index = 0
        self.before, self.after = before, after
        self.envelopes, self.indexes, self.frames = envelopes, indexes, frames
        self._source = source
        self._ops: list[str] | None = None if source is not None else []
        self.resolved: Resolved | None = None
        self.next: Chunk | None = None  # the ring's next chunk (cut when this one leaves)
        self.evicted = False
        self._seqs: list[bytes] | None = None
        self._blobs: dict[str, bytes] = {}
        self._ends: dict[str, list[int]] = {}
        # envelopes, payloads, tokens, and both framings (built on first use) with offsets
        size = 3 * sum(map(len, envelopes)) + sum(map(len, map(_PAYLOAD, frames)))
        self.nbytes = 200 + size + len(envelopes) * (3 * len(str(after)) + 200)

    def __len__(self) -> int:
        return len(self.envelopes)

    @property
    def end(self) -> int:
        return self.index + len(self.envelopes)

    @property
    def ops(self) -> list[str]:
        """Each event's Debezium op (taken from the source batch on first use)."""
        if self._ops is None:
            assert self._source is not None
            self._ops, self._source = self._source.ops, None
        return self._ops

    @property
    def seqs(self) -> list[bytes]:
        """The token after each event, as ASCII bytes (built on first use)."""
        if self._seqs is None:
            self._seqs = self._tokens(_TOKEN_ONLY)
        return self._seqs

    def _tokens(self, line: bytes) -> list[bytes]:
        """Per event ``line % (token after it, envelope)`` (:data:`_TOKEN_ONLY`: the token).

        Cost: one C call (:func:`token_lines`; in a pure build, per event a join of the
        components). The last token is ``after``: it also covers records after the event
        that the stream skips."""
        envelopes = self.envelopes
        if not envelopes:
            return []
        head, mid, tail, with_envelopes = _line_pieces(line)
        positions = list(self.before.positions)
        head += f"{VERSION}{len(positions)}.".encode()
        out = token_lines(
            head, mid, tail, with_envelopes, positions, self.indexes, self.frames, envelopes
        )
        out[-1] = line % (str(self.after).encode(), envelopes[-1])
        return out

    def blob(self, framing: Framing) -> bytes:
        """Every event framed, as one bytes object (built once per framing)."""
        built = self._blobs.get(framing.name)
        if built is None:
            built = self._blobs[framing.name] = b"".join(self._tokens(framing.LINE))
        return built

    def _ends_of(self, framing: Framing) -> list[int]:
        """The offset in :meth:`blob` after each event (built on first use)."""
        ends = self._ends.get(framing.name)
        if ends is None:
            fixed = len(framing.LINE) - 4  # (the line less its two %b)
            sizes = [
                fixed + len(seq) + len(envelope)
                for seq, envelope in zip(self.seqs, self.envelopes, strict=True)
            ]
            ends = self._ends[framing.name] = list(accumulate(sizes))
        return ends

    def framed(self, framing: Framing, lo: int, hi: int) -> bytes:
        """Events ``[lo, hi)`` framed with their own tokens (one slice of the blob)."""
        blob = self.blob(framing)
        if lo == 0 and hi == len(self.envelopes):
            return blob
        ends = self._ends_of(framing)
        return blob[ends[lo - 1] if lo else 0 : ends[hi - 1]]

    def framed_each(self, framing: Framing, keep: list[int]) -> list[bytes]:
        """Events ``keep`` framed with their own tokens, one bytes object each."""
        blob, ends = self.blob(framing), self._ends_of(framing)
        return [blob[ends[i - 1] if i else 0 : ends[i]] for i in keep]

    def token_at(self, offset: int) -> Token:
        """The token before event ``offset`` of this chunk (``len(self)``: ``after``)."""
        if offset == 0:
            return self.before
        if offset == len(self.envelopes):
            return self.after
        return Token.parse(self.seqs[offset - 1].decode())

    def batch_end(self, offset: int) -> int:
        """The offset after the atomic batch that event ``offset - 1`` belongs to."""
        frames = self.frames
        while offset < len(frames) and frames[offset].batch_index > 0:
            offset += 1
        return offset


_PAYLOAD = attrgetter("payload")
_LSN = attrgetter("lsn")
_LETTERS = [b""] + [bytes([c]) for c in b"abcdefghijklmnopqrst"]
_TOKEN_ONLY = b"%b%.0b"
"""A "line" of the token alone (the envelope formatted with precision 0: nothing)."""


def _line_pieces(line: bytes) -> tuple[bytes, bytes, bytes, bool]:
    """``line`` (two ``%b``: the token, the envelope) as what comes before, between and after
    them, and whether the envelope is written (not for :data:`_TOKEN_ONLY`)."""
    if line == _TOKEN_ONLY:
        return b"", b"", b"", False
    head, mid, tail = line.split(b"%b")
    return head, mid, tail, True


def token_lines_py(
    head: bytes,
    mid: bytes,
    tail: bytes,
    with_envelopes: bool,
    positions: list[int],
    indexes: list[int],
    frames: list[Frame],
    envelopes: list[bytes],
) -> list[bytes]:
    """Per event ``head + token after it + mid + envelope (if with_envelopes) + tail``: the
    token's components joined by ``.``, starting from ``positions`` (the token's LSNs before
    the first event, not changed); event ``i`` moves component ``indexes[i]`` to
    ``frames[i].lsn`` when that is larger. ``moonish.cdc._cenvelope.token_lines`` does the
    same in C (tests/serve/test_token_lines.py compares them).

    Raises:
        IndexError: a shard index outside ``positions``.
    """
    positions = list(positions)
    parts = list(map(_component, positions))
    line = head + b"%b" + mid + (b"%b" if with_envelopes else b"%.0b") + tail
    out: list[bytes] = []
    append, join, letters = out.append, b".".join, _LETTERS
    for k, lsn, envelope in zip(indexes, map(_LSN, frames), envelopes, strict=True):
        if k < 0:
            raise IndexError(f"shard index {k} of {len(positions)}")
        if lsn > positions[k]:
            positions[k] = lsn
            digits = b"%d" % lsn
            parts[k] = letters[len(digits)] + digits
        append(line % (join(parts), envelope))
    return out


try:  # the same in C (moonish/cdc/_cenvelope.c), absent in a pure build
    from moonish.cdc import _cenvelope

    token_lines: Callable[..., list[bytes]] = _cenvelope.token_lines
except ImportError:
    token_lines = token_lines_py


def _component(lsn: int) -> bytes:
    """moonish.cdc.token.component, as bytes."""
    digits = b"%d" % lsn
    return _LETTERS[len(digits)] + digits


def marker_chunk(token: Token, marker: Resolved) -> Chunk:
    """An empty chunk at ``token`` that carries ``marker``."""
    chunk = Chunk(token, token, [], [], [])
    chunk.resolved = marker
    return chunk


def chunk_of(batch: MergedBatch, before: Token) -> Chunk:
    """``batch`` (read after ``before``) as a chunk. Tokens are made when framed."""
    return Chunk(before, batch.token, batch.envelopes, batch.indexes, batch.frames, batch)
