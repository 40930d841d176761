"""One stream over every shard of a data directory, in commit-time order, positioned by a token.

Order: events come in order of ``(commit time, shard)``; each shard's events stay in LSN order
and an atomic batch stays together (its records share one commit time). The commit time used
is the shard's running maximum of ``commit_us``, which is ``commit_us`` itself for every log
this version writes (the writer never lets it decrease, ``moonish.log.heartbeat``).

How shards are merged: each shard is polled up to a batch of records (whole atomic batches).
A shard that returned a full batch may have more, so nothing later than its last polled commit
time is emitted before it is polled again (the *frontier*); a shard found at its end does not
hold the others back. So the order is exact for everything already in the log; at the live
edge, a record committed in one shard just before a read may come after records of other
shards committed a little later. Resolved markers (:class:`Resolved`) are the guarantee: after
a marker with time ``T`` no change with an earlier commit time comes.

Positions: a :class:`~moonish.cdc.token.Token` holds each shard's last delivered LSN; the
token after an event covers everything emitted up to it, so resuming from any emitted token
yields exactly the rest, each change once, and emitted tokens never decrease (as text too).
"""

from __future__ import annotations

import bisect
import operator
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

from moonish.cdc.envelope import EnvelopeEncoder
from moonish.cdc.events import ChangeEvent
from moonish.cdc.shard_read import _encoder_for
from moonish.cdc.token import Token
from moonish.clock import Clock
from moonish.errors import MoonishError
from moonish.gcpolicy import paused_gc
from moonish.log.frames import Frame
from moonish.log.reader import ShardReader

_COMMIT_US = operator.attrgetter("commit_us")
_HEAD_ORDER = operator.itemgetter(0, 1)  # a span's next event: (commit time, shard index)
_EVENTS_PER_RUN = 32
"""Below this many events per run of one shard, :func:`merge` sorts all events instead."""


@dataclass(frozen=True, slots=True)
class Resolved:
    """A resolved watermark (CockroachDB's resolved timestamp): every change with a commit
    time before ``ts_us`` (µs since the Unix epoch) has been emitted before this marker, in
    every shard; ``token`` is the position at the marker."""

    ts_us: int
    token: Token

    def to_json(self) -> bytes:
        """The marker as one NDJSON line's bytes (no newline):
        ``{"resolved":{"ts_us":…,"ts_ms":…,"token":"m4.…"}}``."""
        return (
            f'{{"resolved":{{"ts_us":{self.ts_us},"ts_ms":{self.ts_us // 1000},'
            f'"token":"{self.token}"}}}}'
        ).encode()


class MergedBatch(Sequence[ChangeEvent]):
    """Events of several shards in stream order, stored by column (``envelopes`` is what
    NDJSON output needs; :class:`ChangeEvent` objects are built only when indexed).

    Attributes:
        envelopes: the envelope bytes per event.
        shards: the shard id of each event (``source.shard``).
        indexes: the shard's number in the data directory (its token component) per event.
        frames, ops: per event, as in :class:`~moonish.cdc.events.EventBatch`.
        token: the position after the last event.

    The merge puts only ``envelopes`` in stream order at once; the other columns follow on
    first use (output that needs only envelope bytes never pays for them).
    """

    __slots__ = ("_columns", "_perm", "_runs", "_settled", "envelopes", "token")

    def __init__(
        self,
        shards: list[int],
        indexes: list[int],
        frames: list[Frame],
        ops: list[str],
        envelopes: list[bytes],
        token: Token,
        perm: list[int] | None = None,
        runs: list[Run] | None = None,
    ) -> None:
        """How the other columns get to stream order, which ``envelopes`` already has:
        ``perm``, the permutation of the columns given; or ``runs``, the slices of the
        shards' buffers they are made of (the columns given are then empty and unused)."""
        self._columns: list[list[Any]] = [shards, indexes, frames, ops]
        self.envelopes, self.token, self._perm, self._runs = envelopes, token, perm, runs
        self._settled = 0 if perm is not None or runs is not None else 0b1111  # a bit per
        # column in stream order

    @classmethod
    def empty(cls, token: Token) -> MergedBatch:
        return cls([], [], [], [], [], token)

    def _settle(self, column: int) -> None:
        """Put one column in stream order (each on first use: a reader that needs only
        tokens never pays for ops)."""
        if self._settled >> column & 1:
            return
        self._settled |= 1 << column
        if self._runs is not None:
            gathered: list[Any] = []
            for run in self._runs:
                if column == 0:
                    gathered += [run.shard] * (run.stop - run.start)
                elif column == 1:
                    gathered += [run.feed_index] * (run.stop - run.start)
                else:
                    gathered += (run.frames if column == 2 else run.ops)[run.start : run.stop]
            self._columns[column] = gathered
        elif self._perm is not None:
            values = self._columns[column]
            self._columns[column] = [values[i] for i in self._perm]

    @property
    def shards(self) -> list[int]:
        self._settle(0)
        return self._columns[0]

    @property
    def indexes(self) -> list[int]:
        self._settle(1)
        return self._columns[1]

    @property
    def frames(self) -> list[Frame]:
        self._settle(2)
        return self._columns[2]

    @property
    def ops(self) -> list[str]:
        self._settle(3)
        return self._columns[3]

    def extend(self, other: MergedBatch) -> None:
        """Append ``other``'s events (which come after these) and take its token."""
        self.shards.extend(other.shards)
        self.indexes.extend(other.indexes)
        self.frames.extend(other.frames)
        self.ops.extend(other.ops)
        self.envelopes += other.envelopes
        self.token = other.token

    def truncate(self, count: int) -> None:
        """Keep the first ``count`` events."""
        for column in (self.shards, self.indexes, self.frames, self.ops, self.envelopes):
            del column[count:]

    def position_after(self, i: int) -> tuple[int, int]:
        """``(shard index, last LSN delivered)`` once event ``i`` is consumed (a BEGIN is
        before its batch's first record)."""
        if self._runs is not None:
            index, frame, op = self.indexes[i], self.frames[i], self.ops[i]
            return index, frame.lsn - 1 if op == "BEGIN" else frame.lsn
        perm, settled, (_, indexes, frames, ops) = self._perm, self._settled, self._columns
        j = i if perm is None else perm[i]  # where event i is in a column not yet settled
        index = indexes[i if settled >> 1 & 1 else j]
        frame = frames[i if settled >> 2 & 1 else j]
        return index, frame.lsn - 1 if ops[i if settled >> 3 & 1 else j] == "BEGIN" else frame.lsn

    def __len__(self) -> int:
        return len(self.envelopes)

    @overload
    def __getitem__(self, index: int) -> ChangeEvent: ...

    @overload
    def __getitem__(self, index: slice) -> list[ChangeEvent]: ...

    def __getitem__(self, index: int | slice) -> ChangeEvent | list[ChangeEvent]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        frame = self.frames[index]
        return ChangeEvent(
            self.shards[index],
            frame.lsn,
            self.ops[index],
            frame.commit_us,
            self.envelopes[index],
            frame.record_type,
            frame.payload,
        )

    @property
    def records(self) -> int:
        """Events that are records (not BEGIN/END)."""
        return sum(1 for op in self.ops if op != "BEGIN" and op != "END")


class ShardFeed:
    """One shard of a merged stream: its reader, its polled but not yet emitted events (with
    their commit-time keys), and its position.

    ``position`` is the last LSN delivered; ``at_end`` says the last poll found the shard's
    current end; ``damage`` is an error met while polling, raised once the events before it
    are out.
    """

    def __init__(
        self,
        index: int,
        shard_dir: str,
        position: int,
        name: str,
        clock: Clock,
        transactions: bool,
        messages: bool = False,
    ) -> None:
        self.index = index
        self.reader = ShardReader(shard_dir)
        self.position = position
        self._settings = (name, clock, transactions, messages)
        self.encoder: EnvelopeEncoder | None = None
        self.frames: list[Frame] = []
        self.ops: list[str] = []
        self.envelopes: list[bytes] = []
        self.keys: list[int] = []  # effective commit time per buffered event, ascending
        self.start = 0  # first buffered event not yet emitted
        self.chunk_end = position  # last LSN of the polled frames (skipped ones too)
        self.running_us = 0  # running maximum of commit_us
        self.at_end = False
        self.damage: MoonishError | None = None
        self._resume: int | None = position + 1  # where to position before the next poll

    @property
    def buffered(self) -> int:
        return len(self.keys) - self.start

    def poll(self, max_records: int) -> None:
        """Poll up to ``max_records`` records (whole batches) into the buffer, which must be
        empty. Errors are kept in ``damage`` (the buffer keeps what came before them)."""
        self.frames, self.ops, self.envelopes, self.keys, self.start = [], [], [], [], 0
        self.damage = None
        try:
            if self._resume is not None:
                self.reader.seek(self._resume)
                self._resume = None
            with paused_gc():
                frames = self.reader.poll(max_records, whole_batches=True)
        except MoonishError as error:
            self._resume = self.position + 1
            self.damage, self.at_end = error, False
            return
        self.at_end = len(frames) < max_records and self.reader.held_back is None
        if self.reader.held_back is not None:  # the frames before damage: not the log's end
            self.damage = self.reader.held_back
        if not frames:
            return
        if self.encoder is None:
            name, clock, transactions, messages = self._settings
            self.encoder = _encoder_for(
                self.reader, name, clock, transactions, messages, merged=True
            )
        with paused_gc():
            batch, kept, damage = self.encoder.encode_until_damage(frames)
        if damage is not None:
            self.damage, self.at_end = damage, False
            self._resume = frames[kept].lsn  # the next poll starts at the damaged batch
            frames = frames[:kept]
        if frames:
            self.chunk_end = frames[-1].lsn
        keys = list(map(_COMMIT_US, batch.frames))
        running = self.running_us
        if keys and (keys[0] < running or keys != sorted(keys)):  # commit times that decrease:
            for i, commit_us in enumerate(keys):  # the running maximum stands for them
                running = running if running >= commit_us else commit_us
                keys[i] = running
        elif keys:
            running = keys[-1]
        if len(frames) != len(keys) and frames:  # records a disabled stream skipped move time
            running = max(running, max(map(_COMMIT_US, frames)))
        self.running_us = running
        self.frames, self.ops, self.envelopes = batch.frames, batch.ops, batch.envelopes
        self.keys = keys
        if not keys:
            self.position = max(self.position, self.chunk_end)

    def bound_us(self, closed: int | None) -> int:
        """The least commit time this shard's next event can have: its next buffered event's,
        else its running commit time, raised to the writer's closed time ``closed`` when the
        shard is at its end."""
        if self.buffered:
            return self.keys[self.start]
        if self.at_end and closed is not None:
            return max(self.running_us, closed)
        return self.running_us

    def close(self) -> None:
        self.reader.close()


def merge(feeds: list[ShardFeed], token: Token, limit: int | None) -> MergedBatch:
    """Emit, in ``(commit time, shard)`` order, the buffered events that no shard which may
    have more can precede (the frontier), up to ``limit`` records (never part of an atomic
    batch); consumed events leave the buffers and move the feeds' positions. ``token`` is the
    position before; the batch carries the one after.

    Cost: where shards take turns in runs of many events (a shard's events of one moment,
    an import's chunks), a bisect per run and list slices; where they interleave finely, per
    event a key, one sort of presorted runs and a few list copies, all in C loops.
    """
    frontier: tuple[int, int] | None = None
    for feed in feeds:
        if not feed.at_end:  # may have more (or is stopped by damage) after what it holds
            edge = (feed.keys[-1] if feed.buffered else feed.running_us, feed.index)
            frontier = edge if frontier is None or edge < frontier else frontier
    spans: list[tuple[ShardFeed, int]] = []
    for feed in feeds:
        if not feed.buffered:
            continue
        if frontier is None:
            stop = len(feed.keys)
        else:
            threshold = frontier[0] if feed.index <= frontier[1] else frontier[0] - 1
            stop = bisect.bisect_right(feed.keys, threshold, feed.start)
        if stop > feed.start:
            spans.append((feed, stop))
    runs = _runs(spans)
    if runs is not None:  # few runs: the columns are slices of the buffers
        envelopes: list[bytes] = []
        for run in runs:
            envelopes += run.envelopes[run.start : run.stop]
        batch = MergedBatch([], [], [], [], envelopes, token, runs=runs)
    else:  # shards interleave finely: one stable sort of all the events
        shards: list[int] = []
        indexes: list[int] = []
        frames: list[Frame] = []
        ops: list[str] = []
        envelopes = []
        order: list[int] = []
        width = len(feeds)
        for feed, stop in spans:
            taken = slice(feed.start, stop)
            shards += [_shard_id(feed)] * (stop - feed.start)
            indexes += [feed.index] * (stop - feed.start)
            frames += feed.frames[taken]
            ops += feed.ops[taken]
            envelopes += feed.envelopes[taken]
            order += [key * width + feed.index for key in feed.keys[taken]]
        perm = sorted(range(len(order)), key=order.__getitem__)
        envelopes = [envelopes[i] for i in perm]
        batch = MergedBatch(shards, indexes, frames, ops, envelopes, token, perm)
    if limit is not None:
        _cut(batch, limit)
    taken_per_feed = Counter(batch.indexes) if limit is not None else None
    for feed, stop in spans:
        feed.start = stop if taken_per_feed is None else feed.start + taken_per_feed[feed.index]
    last: dict[int, int] = {}
    if limit is None and runs is not None:
        for run in reversed(runs):  # positions of feeds left part-way: their last runs' ends
            if run.feed_index not in last:
                frame = run.frames[run.stop - 1]
                last[run.feed_index] = frame.lsn - (run.ops[run.stop - 1] == "BEGIN")
    elif len(batch) and any(feed.buffered for feed, _ in spans):
        for i in range(len(batch) - 1, -1, -1):  # positions of feeds left part-way
            index, lsn = batch.position_after(i)
            last.setdefault(index, lsn)
            if len(last) == len(spans):
                break
    for feed in feeds:
        if not feed.buffered:
            feed.position = max(feed.position, feed.chunk_end)  # skipped records after too
        elif feed.index in last:
            feed.position = max(feed.position, last[feed.index])
    batch.token = Token(
        tuple(max(p, f.position) for p, f in zip(token.positions, feeds, strict=True))
    )
    return batch


class Run(NamedTuple):
    """Events ``start`` to ``stop`` (exclusive) of one shard's buffer, consecutive in stream
    order; the columns are the buffer's lists (a poll replaces them, never changes them)."""

    shard: int
    feed_index: int  # the shard's number in the data directory
    frames: list[Frame]
    ops: list[str]
    envelopes: list[bytes]
    start: int
    stop: int


def _shard_id(feed: ShardFeed) -> int:
    return feed.encoder.shard if feed.encoder is not None else feed.index


def _run(feed: ShardFeed, start: int, stop: int) -> Run:
    return Run(_shard_id(feed), feed.index, feed.frames, feed.ops, feed.envelopes, start, stop)


def _runs(spans: list[tuple[ShardFeed, int]]) -> list[Run] | None:
    """The events of ``spans`` in stream order as runs of one shard's buffer each, found by
    bisecting the commit-time keys; None when the shards interleave so finely (fewer than
    :data:`_EVENTS_PER_RUN` events a run) that one sort of all the events costs less."""
    if len(spans) <= 1:
        return [_run(feed, feed.start, stop) for feed, stop in spans]
    total = sum(stop - feed.start for feed, stop in spans)
    budget = max(len(spans), total // _EVENTS_PER_RUN)
    heads = [(feed.keys[feed.start], feed.index, feed.start, stop, feed) for feed, stop in spans]
    runs: list[Run] = []
    while len(heads) > 1:
        heads.sort(key=_HEAD_ORDER)
        (_, index, start, stop, feed), (key, other, *_) = heads[0], heads[1]
        keys = feed.keys  # what comes before (key, other) in stream order: at an equal
        if index < other:  # commit time, the shard with the lower index first
            end = bisect.bisect_right(keys, key, start, stop)
        else:
            end = bisect.bisect_left(keys, key, start, stop)
        runs.append(_run(feed, start, end))
        if len(runs) > budget:
            return None
        if end == stop:
            del heads[0]
        else:
            heads[0] = (keys[end], index, end, stop, feed)
    _, _, start, stop, feed = heads[0]
    runs.append(_run(feed, start, stop))
    return runs


def _cut(batch: MergedBatch, limit: int) -> None:
    """Keep the first ``limit`` records of ``batch`` and the rest of the atomic batch (and
    its END) that the last of them is in; BEGIN/END records do not count."""
    frames, ops = batch.frames, batch.ops
    records, cut = 0, len(frames)
    for i, (frame, op) in enumerate(zip(frames, ops, strict=True)):
        if records >= limit and op != "END" and frame.batch_index == 0:
            cut = i  # a record outside a batch, or a batch's first record (or its BEGIN)
            break
        if op != "BEGIN" and op != "END":
            records += 1
    if cut < len(frames):
        batch.truncate(cut)


def first_damage(feeds: list[ShardFeed]) -> MoonishError | None:
    """The error of the first shard (in token order) whose damage stops the stream, once the
    events it buffered before the damage are all out."""
    for feed in feeds:
        if feed.damage is not None and not feed.buffered:
            return feed.damage
    return None
