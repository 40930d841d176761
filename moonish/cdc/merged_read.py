"""Merged reads of a data directory: one batch from a token (``read_merged``) and a stream
that can follow every shard and carry resolved watermarks (:class:`MergedTail`).

Ordering, tokens and the frontier are described in ``moonish.cdc.merged``; docs/reading.md
has the user's view.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass

from moonish.cdc.envelope import CONNECTOR
from moonish.cdc.events import ChangeEvent
from moonish.cdc.follow import ChangeSignal, Following
from moonish.cdc.merged import MergedBatch, Resolved, ShardFeed, first_damage, merge
from moonish.cdc.positions import data_shards, earliest, resolve
from moonish.cdc.shard_read import DEFAULT_LIMIT, MAX_LIMIT, TAIL_BATCH_RECORDS
from moonish.cdc.token import EARLIEST, Token
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.datadir import consumers
from moonish.datadir.consumers import Consumer
from moonish.errors import (
    ConsumerLostError,
    InvalidArgumentError,
    LsnNotRetainedError,
    MoonishError,
    PositionNotRetainedError,
)
from moonish.log.heartbeat import ClosedTime, load_closed_time


@dataclass(frozen=True, slots=True)
class MergedResult:
    """One batch of a merged read.

    Attributes:
        token: where to resume: the position after the last event (the requested one when
            nothing was new).
        events: the events in stream order (``events.envelopes`` lists the envelope bytes).
    """

    token: Token
    events: MergedBatch


def open_feeds(
    shards: list[str],
    token: Token,
    name: str,
    clock: Clock,
    transactions: bool,
    messages: bool = False,
) -> list[ShardFeed]:
    """One :class:`ShardFeed` per shard, positioned after ``token``'s component."""
    feeds: list[ShardFeed] = []
    try:
        for index, (shard, position) in enumerate(zip(shards, token.positions, strict=True)):
            feeds.append(ShardFeed(index, shard, position, name, clock, transactions, messages))
    except BaseException:
        for feed in feeds:
            feed.close()
        raise
    return feeds


def start_token(shards: list[str], position: Token | str) -> Token:
    """``position`` as a token for ``shards`` (text is resolved: ``earliest``, ``now``).

    Raises:
        InvalidArgumentError: malformed, or for another shard count.
    """
    if isinstance(position, Token):
        if len(position.positions) != len(shards):
            raise InvalidArgumentError(
                f"token {position} is for {len(position.positions)} shards; this data "
                f"directory has {len(shards)}"
            )
        return position
    return resolve(shards, position)


def not_retained(
    error: LsnNotRetainedError, shard: int, shards: list[str], token: Token
) -> PositionNotRetainedError:
    """``error`` (of shard ``shard``) restated for the whole position: the oldest available
    token and how many changes are gone."""
    oldest = earliest(shards)
    gone = sum(max(0, o - p) for o, p in zip(oldest.positions, token.positions, strict=True))
    return PositionNotRetainedError(
        f"position {token} is no longer retained: {error.message}; {gone} changes are gone; "
        f"the oldest available token is {oldest} (read from there to go on, accepting the gap)",
        shard=shard,
        oldest_lsn=error.oldest_lsn,
        lsn=error.lsn,
        path=error.path,
        token=str(token),
        oldest_token=str(oldest),
        gone=gone,
    )


def raise_damage(
    feeds: list[ShardFeed],
    shards: list[str],
    token: Token,
    consumer: tuple[str, Consumer] | None = None,
) -> None:
    """Raise the error that stops the stream, if one does now: once a shard's events before
    it are out. A position retention removed names the oldest available token, and the
    consumer read from (:class:`ConsumerLostError`) if any."""
    for feed in feeds:
        if feed.damage is None or feed.buffered:
            continue
        error = feed.damage
        if isinstance(error, LsnNotRetainedError) and not isinstance(
            error, PositionNotRetainedError | ConsumerLostError
        ):
            if consumer is not None:
                oldest = str(earliest(shards))
                root, owner = consumer
                raise consumers.lost_error(
                    root, owner, feed.index, error.oldest_lsn, oldest
                ) from error
            raise not_retained(error, feed.index, shards, token) from error
        raise error


def consumer_start(root: str, shards: list[str], name: str) -> tuple[Consumer, Token]:
    """A named consumer of the data directory ``root`` (of ``shards``; a shard directory is
    a data directory of one shard, with its own consumers) and the token of its position.

    Raises:
        ConsumerNotFoundError: no such consumer.
        ConsumerLostError: it is marked ``lost`` (every read fails until ``seek``).
        InvalidArgumentError: its shard count differs from the data directory's.
    """
    consumer = consumers.load(root, name)
    if consumer.shards != len(shards):
        raise InvalidArgumentError(
            f"consumer {name!r} has positions for {consumer.shards} shards; the data directory "
            f"has {len(shards)}",
            path=root,
        )
    if consumer.lost:
        shard = consumer.lost_shard or 0
        oldest = earliest(shards)
        raise consumers.lost_error(root, consumer, shard, oldest.positions[shard] + 1, str(oldest))
    return consumer, Token(consumer.positions)


def read_merged(
    data_dir: str | os.PathLike[str],
    position: Token | str | None,
    limit: int = DEFAULT_LIMIT,
    *,
    consumer: str | None = None,
    name: str = CONNECTOR,
    clock: Clock = SYSTEM_CLOCK,
    transactions: bool = False,
    messages: bool = False,
) -> MergedResult:
    """Up to ``limit`` records after ``position`` from every shard of ``data_dir``, merged in
    commit-time order (``moonish.cdc.merged``), and the token to resume from.

    Output depends only on the log and the position (and the processing time stamped into
    each envelope's top-level ``ts_*``).

    Args:
        data_dir: a data directory (``shard-<k>`` directories) or one shard's directory.
        position: a token, its text, ``earliest`` or ``now``; ``None`` with ``consumer``.
        consumer: read from this named consumer's confirmed position (it is not moved:
            acknowledge with ``moonish.datadir.consumers.ack`` once the events are processed).
        limit: most records returned, 1..10,000 (an atomic batch is never cut: the last one
            may take the count past it; BEGIN/END records are not counted).
        name, clock, transactions, messages: as :func:`moonish.cdc.shard_read.read`
            (messages left out still move the token).

    Raises:
        InvalidArgumentError: bad limit or token, not a data directory, a position beyond a
            shard's end.
        PositionNotRetainedError: a shard no longer holds the changes after the position
            (names the oldest available token and how many changes are gone).
        ConsumerLostError: reading a consumer that is ``lost`` or whose changes are gone.
        ConsumerNotFoundError: no such consumer.
        CorruptionError: damage in a shard (file, offset, LSN), once the events that come
            before it in stream order are returned (a read that would return none raises).
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    shards = data_shards(data_dir)
    owner, token = _position(data_dir, shards, position, consumer)
    feeds = open_feeds(shards, token, name, clock, transactions, messages)
    try:
        events, remaining = MergedBatch.empty(token), limit
        while remaining > 0:
            polled = False
            for feed in feeds:
                if not feed.buffered and not feed.at_end and feed.damage is None:
                    feed.poll(min(remaining, TAIL_BATCH_RECORDS))  # what a page emits
                    polled = True
            batch = merge(feeds, events.token, remaining)
            events.extend(batch)
            if batch:
                remaining -= batch.records
            elif not polled:
                break  # every shard is at its end, or waits behind damage
        if not events:
            raise_damage(feeds, shards, token, owner)
        return MergedResult(events.token, events)
    finally:
        for feed in feeds:
            feed.close()


class MergedTail(Following):
    """Iterate every shard of a data directory after ``position``, merged in commit-time
    order (``moonish.cdc.merged``).

    Without ``follow`` the iteration ends at the current end of every shard; with ``follow``
    it waits for new records (watchdog events on every shard directory, a polling fallback),
    and ``close()`` (from any thread) ends it promptly.

    With ``resolved_ms``, the iteration also yields :class:`Resolved` markers, at most one per
    ``resolved_ms`` and only when the watermark advanced: no change after a marker has a
    commit time before ``marker.ts_us``. Idle shards do not hold it back as long as their
    writer closes time (``moonish.log.heartbeat``: every second by default, and at close).

    Args:
        data_dir: a data directory or one shard's directory.
        position: a token, its text, ``earliest`` (the default) or ``now``.
        consumer: start from this named consumer's confirmed position instead (it is not
            moved: acknowledge the tokens processed with ``moonish.datadir.consumers.ack``).
        follow, name, clock, fallback_poll_ms, watch, transactions, messages: as
            :class:`moonish.cdc.shard_read.Tail`.
        resolved_ms: emit resolved markers this often (ms); ``None``: none.

    Raises:
        InvalidArgumentError: at creation, a malformed token, one of another shard count,
            or an unknown consumer; a position past a shard's end when iteration starts.
        PositionNotRetainedError, CorruptionError: while iterating, once the events before
            them in stream order are out; iterating again retries (a follower never stalls
            silently on a removed position: it raises).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        position: Token | str | None = None,
        *,
        consumer: str | None = None,
        follow: bool = False,
        name: str = CONNECTOR,
        clock: Clock = SYSTEM_CLOCK,
        fallback_poll_ms: int = 1000,
        watch: bool = True,
        transactions: bool = False,
        resolved_ms: int | None = None,
        messages: bool = False,
    ) -> None:
        if resolved_ms is not None and resolved_ms <= 0:
            raise InvalidArgumentError(f"resolved_ms must be > 0, got {resolved_ms}")
        self._shards = data_shards(data_dir)
        self._consumer, self._token = _position(data_dir, self._shards, position, consumer)
        self._feeds = open_feeds(self._shards, self._token, name, clock, transactions, messages)
        self._resolved_ms = resolved_ms
        self._resolved_us = -1  # the last watermark emitted
        self._resolved_at = 0.0  # time.monotonic() of the last marker
        # events (with their batch and index) and markers (batch None) not yet returned
        self._pending: deque[tuple[ChangeEvent | Resolved, MergedBatch | None, int]] = deque()
        self._moving: list[int] | None = None  # the position inside a batch being returned
        super().__init__(ChangeSignal(self._shards, fallback_poll_ms, watch) if follow else None)

    @property
    def token(self) -> Token:
        """Where to resume: the position after the last event (or marker) returned."""
        if self._moving is not None:  # built when asked, not per event
            return Token(tuple(self._moving))
        return self._token

    def __iter__(self) -> Iterator[ChangeEvent | Resolved]:
        return self

    def _round(self) -> tuple[MergedBatch, Resolved | None]:
        """Poll every shard with nothing buffered, merge, and work out the watermark."""
        now = time.monotonic()
        due = (now - self._resolved_at) * 1000 >= (self._resolved_ms or 0)
        resolving = self._resolved_ms is not None and due  # (closed times only when due)
        closed: list[ClosedTime | None] = []
        for feed in self._feeds:
            # closed time is read before the poll: what it promises about was written first
            closed.append(_closed_time(feed) if resolving and not feed.buffered else None)
            if not feed.buffered:
                feed.poll(TAIL_BATCH_RECORDS)
        batch = merge(self._feeds, self._token, None)
        marker = None
        if resolving and first_damage(self._feeds) is None:
            watermark = min(
                feed.bound_us(_covering(promise, feed))
                for feed, promise in zip(self._feeds, closed, strict=True)
            )
            if watermark > self._resolved_us:
                self._resolved_us, self._resolved_at = watermark, now
                marker = Resolved(watermark, batch.token)
        return batch, marker

    def _next(self) -> tuple[MergedBatch, Resolved | None] | None:
        """The next non-empty batch (or marker); None when done (end of the logs, closed)."""
        while True:
            with self._lock:
                if self._closed:
                    return None
                if self._signal is not None:
                    self._signal.clear()
                batch, marker = self._round()
                if not batch and marker is None:
                    raise_damage(self._feeds, self._shards, self._token, self._consumer)
                if batch or marker is not None or batch.token != self._token:
                    return batch, marker  # (an empty batch: records of a disabled stream)
                if not all(feed.at_end and not feed.buffered for feed in self._feeds):
                    continue  # a shard holds the frontier back: poll it again now
            if self._signal is None:
                return None
            self._signal.wait(self._resolved_ms)  # not under the lock: close() needs it

    def __next__(self) -> ChangeEvent | Resolved:
        while not self._pending:
            got = self._next()
            if got is None:
                raise StopIteration
            batch, marker = got
            self._pending.extend((event, batch, i) for i, event in enumerate(batch))
            if not batch:
                self._token = batch.token  # only records a disabled stream skips: past them
            if marker is not None:
                self._pending.append((marker, None, -1))
        item, source, i = self._pending.popleft()
        if source is None or i == len(source) - 1:  # a marker, or a batch's last event
            self._moving = None  # (its token also covers skipped records after the event)
            self._token = source.token if source is not None else _marker_token(item)
        else:
            if self._moving is None:
                self._moving = list(self._token.positions)
            index, lsn = source.position_after(i)
            self._moving[index] = max(self._moving[index], lsn)
        return item

    def batches(self) -> Iterator[MergedBatch | Resolved]:
        """Events a round at a time (each shard polled up to 1024 records), for callers that
        write in bulk; markers come after the batch they follow. A batch may be empty: it
        moves the token past records of a disabled stream (write the position, ack it).
        The token moves past each item as it is yielded. Do not mix with ``next()``."""
        while (got := self._next()) is not None:
            batch, marker = got
            moved = batch.token != self._token
            self._token = batch.token
            if batch or moved:  # an empty batch moves past records of a disabled stream
                yield batch
            if marker is not None:
                yield marker

    def _release_files(self) -> None:
        for feed in self._feeds:
            feed.close()


def _position(
    data_dir: str | os.PathLike[str],
    shards: list[str],
    position: Token | str | None,
    consumer: str | None,
) -> tuple[tuple[str, Consumer] | None, Token]:
    """The start token, and the consumer read from (with its data directory), if any."""
    if consumer is None:
        return None, start_token(shards, EARLIEST if position is None else position)
    if position is not None:
        raise InvalidArgumentError("give a position or a consumer, not both")
    root = os.fspath(data_dir)
    owner, token = consumer_start(root, shards, consumer)
    return (root, owner), token


def _marker_token(item: ChangeEvent | Resolved) -> Token:
    assert isinstance(item, Resolved)
    return item.token


def _closed_time(feed: ShardFeed) -> ClosedTime | None:
    try:
        return load_closed_time(feed.reader.shard_dir)
    except MoonishError:
        return None  # a damaged promise is no promise: the watermark waits for records


def _covering(promise: ClosedTime | None, feed: ShardFeed) -> int | None:
    """The promised closed time, if it covers the feed's next LSN."""
    if promise is None or promise.next_lsn > feed.reader.next_lsn:
        return None
    return promise.closed_us
