"""The in-process API: ``read`` (one batch, like ``moonish cdc read``), ``tail`` (an iterator,
optionally following the log forever) and ``info``.

Ordering and resumption: events come in LSN order, each once. ``read(wal_dir, c)`` returns the
events with LSNs in ``[c, result.cursor)``; calling again with ``result.cursor`` continues
exactly after them. Output depends only on ``(wal_dir, cursor)`` (and the processing time
stamped into the envelope's top-level ``ts_*``, which comes from the injectable clock).

Example::

    import moonish

    result = moonish.read("data/shard-0", 0, limit=100)
    for event in result.events:
        print(event.lsn, event.op, event.envelope.decode())
    more = moonish.read("data/shard-0", result.cursor)

    with moonish.tail("data/shard-0", from_lsn=result.cursor.lsn, follow=True) as stream:
        for event in stream:          # blocks for new records; stream.close() ends it
            handle(event)
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from moonish.cdc.cursor import Cursor
from moonish.cdc.envelope import CONNECTOR, EnvelopeEncoder
from moonish.cdc.events import ChangeEvent, EventBatch
from moonish.cdc.follow import ChangeSignal, Following
from moonish.cdc.snapshot_rows import cursor_after, snapshot_frames, start_cursor
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError, MoonishError
from moonish.gcpolicy import paused_gc
from moonish.log.control import load_control
from moonish.log.frames import Frame
from moonish.log.heartbeat import heard_after, published
from moonish.log.reader import ShardReader
from moonish.log.segment import (
    list_segments,
    require_shard_dir,
    segment_path,
    shard_id_from_headers,
)
from moonish.log.used import named_past_end
from moonish.state.config import load_config
from moonish.state.snapshot import list_snapshots

DEFAULT_LIMIT = 256
MAX_LIMIT = 10_000
TAIL_BATCH_RECORDS = 1024


@dataclass(frozen=True, slots=True)
class ReadResult:
    """One batch of a read.

    Attributes:
        cursor: where to resume: the LSN after the last event, or the requested cursor when
            there was nothing new.
        events: the events, in LSN order (at most ``limit``); a sequence of
            :class:`ChangeEvent` whose ``envelopes`` attribute lists the envelope bytes.
    """

    cursor: Cursor
    events: EventBatch


def _start(path: str, position: int | Cursor, snapshot: bool) -> Cursor:
    cursor = position if isinstance(position, Cursor) else Cursor(position)
    if not snapshot:
        return cursor
    if cursor.lsn > 1 or cursor.snapshot_row is not None:
        raise InvalidArgumentError(
            "snapshot=True starts a new consumer at the newest snapshot: give cursor 0 "
            f"(not {cursor}); to resume, pass the cursor a read returned, without snapshot"
        )
    return start_cursor(path)


def _encoder_for(
    reader: ShardReader,
    name: str,
    clock: Clock,
    transactions: bool,
    messages: bool,
    merged: bool = False,
) -> EnvelopeEncoder:
    return EnvelopeEncoder(
        _shard_id(reader),
        name,
        clock,
        reader.shard_dir,
        transactions=transactions,
        messages=messages,
        merged=merged,
    )


def _shard_id(reader: ShardReader) -> int:
    """The shard's id: from the segment the reader has open, else control.json, else any
    segment header (a consumer can be given snapshot rows before the log is positioned)."""
    if reader.shard_id is not None:
        return reader.shard_id
    try:
        control = load_control(reader.shard_dir)
    except MoonishError:
        control = None
    if control is not None:
        return control.shard
    found = shard_id_from_headers(reader.shard_dir)
    return found if found is not None else 0


def _event_cursor(frame: Frame, op: str) -> Cursor:
    """Where to resume after an event (a BEGIN is before its batch's first record)."""
    return Cursor(frame.lsn) if op == "BEGIN" else cursor_after(frame)


def read(
    wal_dir: str | os.PathLike[str],
    from_lsn: int | Cursor,
    limit: int = DEFAULT_LIMIT,
    *,
    name: str = CONNECTOR,
    clock: Clock = SYSTEM_CLOCK,
    snapshot: bool = False,
    transactions: bool = False,
    messages: bool = False,
) -> ReadResult:
    """Up to ``limit`` events with LSN >= ``from_lsn`` from one shard, and the next cursor.

    Args:
        wal_dir: a shard directory.
        from_lsn: the first LSN wanted (0 and 1 both mean the start of the shard), or a
            cursor a previous read returned (which may be inside a snapshot).
        limit: most records (log records and snapshot rows) returned, 1..10,000.
        name: ``source.name`` in the envelopes.
        clock: processing time for the envelopes' top-level ``ts_*``.
        snapshot: start a new consumer (``from_lsn`` 0) with the newest snapshot's keys as
            ``op: "r"`` rows, then the changes after it (moonish.cdc.snapshot_rows).
        transactions: add Debezium's BEGIN/END records around atomic batches (not counted
            in ``limit``).
        messages: include checkpoints and message records (``op: "m"``, counted in
            ``limit``); without it they are passed over, and the cursor moves past them.

    Raises:
        InvalidArgumentError: bad ``limit``, missing or non-shard directory, ``from_lsn``
            beyond the end of the log.
        LsnNotRetainedError: ``from_lsn`` is older than the oldest retained LSN.
        CorruptionError: damage in the log or the snapshot (file, offset and LSN).
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgumentError(f"limit must be between 1 and {MAX_LIMIT}, got {limit}")
    path = require_shard_dir(wal_dir)
    cursor = _start(path, from_lsn, snapshot)
    frames: list[Frame] = []
    if cursor.snapshot_row is not None:
        frames, cursor = snapshot_frames(path, cursor, limit)
    reader = ShardReader(path)
    try:
        try:
            reader.seek(cursor.lsn)  # also where the log continues after a snapshot
            if cursor.snapshot_row is None and len(frames) < limit:
                with paused_gc():
                    records = reader.poll(limit - len(frames))
                if records:
                    frames += records
                    cursor = Cursor(reader.next_lsn)
        except MoonishError:
            if not frames:
                raise
            # snapshot rows first: the next read, from the cursor after them, meets it again
        with paused_gc():
            encoder = _encoder_for(reader, name, clock, transactions, messages)
            events, kept, damage = encoder.encode_until_damage(frames)
        if damage is not None:
            if not kept:
                raise damage
            cursor = Cursor(frames[kept].lsn)  # the next read starts at the damaged batch
        return ReadResult(cursor, events)
    finally:
        reader.close()


class Tail(Following):
    """Iterate a shard's events from ``from_lsn`` in LSN order.

    Without ``follow`` the iterator ends at the current end of the log. With ``follow`` it
    blocks for new records, woken by file-system events (watchdog) and, as a fallback, every
    ``fallback_poll_ms``; ``close()`` ends it promptly.

    Use as a context manager or call :meth:`close`; ``close`` may be called from another
    thread and ends a blocked ``follow`` iteration promptly.

    Args:
        wal_dir: a shard directory.
        from_lsn: the first LSN wanted (0: the start of the shard).
        follow: keep waiting for new records instead of ending at the end of the log.
        name: ``source.name`` in the envelopes.
        clock: processing time for the envelopes' top-level ``ts_*``.
        fallback_poll_ms: with ``follow``, longest wait without a file-system event.
        watch: with ``follow``, use file-system events (watchdog); ``False`` polls only.
        snapshot, transactions, messages: as :func:`read`.

    Raises:
        InvalidArgumentError, LsnNotRetainedError: as :func:`read`, at creation (starting
            from a snapshot: after its rows, while iterating).
        CorruptionError: at creation when the segment that holds ``from_lsn`` is damaged
            before it; while iterating when damage is reached, after every valid event of
            every whole batch before it has been returned. Iterating again continues from
            there (after a repair, with the next record).
    """

    def __init__(
        self,
        wal_dir: str | os.PathLike[str],
        from_lsn: int | Cursor = 0,
        *,
        follow: bool = False,
        name: str = CONNECTOR,
        clock: Clock = SYSTEM_CLOCK,
        fallback_poll_ms: int = 1000,
        watch: bool = True,
        snapshot: bool = False,
        transactions: bool = False,
        messages: bool = False,
    ) -> None:
        path = require_shard_dir(wal_dir)
        self._cursor = _start(path, from_lsn, snapshot)
        self._snapshot = self._cursor if self._cursor.snapshot_row is not None else None
        self._reader = ShardReader(path)
        self._resume_lsn: int | None = None  # where to position before the next poll
        if self._snapshot is None:
            self._reader.seek(self._cursor.lsn)
        else:
            self._resume_lsn = self._cursor.lsn  # after the rows: damage there costs none
        self._name, self._clock, self._transactions = name, clock, transactions
        self._messages = messages
        self._batch_end = self._cursor  # the cursor after the last batch's frames
        self._encoder: EnvelopeEncoder | None = None
        self._damage: MoonishError | None = None  # raised after the events before it
        self._pending: deque[tuple[ChangeEvent, Cursor]] = deque()
        signal = ChangeSignal(self._reader.shard_dir, fallback_poll_ms, watch) if follow else None
        super().__init__(signal)

    @property
    def cursor(self) -> Cursor:
        """Where to resume: the LSN after the last event this iterator returned, and after
        the records passed over behind it (a disabled stream's, messages not asked for)."""
        return self._cursor

    def __iter__(self) -> Iterator[ChangeEvent]:
        return self

    def _next_batch(self) -> EventBatch | None:
        """The next non-empty batch of events; None when done (end of log, or closed)."""
        while True:
            with self._lock:
                if self._closed:
                    return None
                if self._damage is not None:
                    damage, self._damage = self._damage, None
                    raise damage  # iterating again retries from the damaged record
                if self._resume_lsn is not None and self._snapshot is None:
                    self._reader.seek(self._resume_lsn)  # after snapshot rows or damage
                    self._resume_lsn = None
                if self._signal is not None:
                    self._signal.clear()
                with paused_gc():
                    from_log = self._snapshot is None
                    if self._snapshot is not None:
                        frames, after = snapshot_frames(
                            self._reader.shard_dir, self._snapshot, TAIL_BATCH_RECORDS
                        )
                        self._snapshot = after if after.snapshot_row is not None else None
                    else:
                        frames = self._reader.poll(TAIL_BATCH_RECORDS, whole_batches=True)
                    if frames:
                        if self._encoder is None:
                            self._encoder = _encoder_for(
                                self._reader,
                                self._name,
                                self._clock,
                                self._transactions,
                                self._messages,
                            )
                        batch, kept, damaged = self._encoder.encode_until_damage(frames)
                        if damaged is not None:
                            if from_log:
                                self._resume_lsn = frames[kept].lsn
                            self._damage = damaged
                        if kept:  # past the records passed over too
                            self._batch_end = cursor_after(frames[kept - 1])
                        if batch:
                            return batch
                        self._cursor = self._batch_end  # only records passed over
                        continue  # (records of a disabled stream, messages, or damage)
                    if self._snapshot is not None:
                        continue
            if self._signal is None:
                return None
            self._signal.wait()  # not under the lock: close() must get it meanwhile

    def __next__(self) -> ChangeEvent:
        if not self._pending:
            batch = self._next_batch()
            if batch is None:
                raise StopIteration
            cursors = list(map(_event_cursor, batch.frames, batch.ops))
            cursors[-1] = self._batch_end  # the last event's also passes what was skipped
            self._pending.extend(zip(batch, cursors, strict=True))
        event, self._cursor = self._pending.popleft()
        return event

    def batches(self) -> Iterator[EventBatch]:
        """Events a poll at a time (up to 1024 per batch), for callers that write in bulk.

        Yields non-empty :class:`EventBatch` es in LSN order (``batch.envelopes`` is the list
        of envelope bytes); the cursor moves past each batch as it is yielded. Do not mix with
        ``next()`` on the same iterator.
        """
        while batch := self._next_batch():
            self._cursor = self._batch_end
            yield batch

    def _release_files(self) -> None:
        self._reader.close()


tail = Tail
"""``moonish.tail(wal_dir, from_lsn=0, *, follow=False, ...)``: see :class:`Tail`."""


def existing_shard_dirs(path: str | os.PathLike[str]) -> list[str]:
    """:func:`shard_dirs`, each required to hold a log already (commands that change a shard,
    such as ``wal checkpoint``, must not create one in a mistyped directory).

    Raises:
        InvalidArgumentError: ``path`` is not an existing directory, or a shard has no log.
    """
    found = shard_dirs(path)
    for shard in found:
        if not list_segments(shard):
            raise InvalidArgumentError("not a shard directory: it holds no WAL segment", path=shard)
    return found


def shard_dirs(path: str | os.PathLike[str]) -> list[str]:
    """The shard directories under a data directory, or ``[path]`` for a shard directory.

    Raises:
        InvalidArgumentError: ``path`` is not an existing directory.
    """
    root = os.fspath(path)
    if not os.path.isdir(root):
        raise InvalidArgumentError("directory does not exist or is not a directory", path=root)
    shards = sorted(
        (entry for entry in os.listdir(root) if entry.startswith("shard-")),
        key=lambda entry: int(entry[6:]) if entry[6:].isdigit() else -1,
    )
    return [os.path.join(root, entry) for entry in shards] or [root]


def info(wal_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Facts about one shard's log as a JSON-ready dict.

    Keys: ``wal_dir``, ``shard``, ``oldest_lsn`` and ``latest_lsn`` (``None`` when empty),
    ``next_lsn`` (the LSN the next append gets: after LSNs a repair discarded, after those
    ``torn_tail_lsns`` names, and kept by control.json when every segment was removed),
    ``segments``, ``bytes`` (all segment files), ``active_segment``, ``torn_tail_bytes``
    (bytes after the last committed record of the active segment), ``torn_tail_lsns``
    (``[first, last]``: the LSNs past the last committed record that the torn tail's frame
    headers, the index or the last heartbeat show were used, which the next writer records as
    discarded before it appends, docs/wal-format.md "LSNs are never reused"; ``None``: none),
    ``discarded`` (LSN ranges cut out: by ``moonish wal repair``, or named by a torn tail a
    writer cut), ``torn`` (the ranges among them a writer cut as a torn tail),
    ``stream`` (``{"enabled", "view_type", "max_value_bytes"}``, or ``None`` for a shard
    written without keyspace tracking), ``retention`` (the policy stored with it,
    moonish.datadir.retention, or ``None``), ``snapshot_lsns`` (oldest first) and ``checked``:
    what was read to find the end, ``{"segment", "from_offset", "from_lsn", "to_offset"}``
    (the newest segment from its last verified index entry to its end) or ``None``; the rest
    of the log was not read (``moonish wal verify`` reads every byte).

    Reading cost: one directory listing plus a scan from the newest segment's last index entry.

    Raises:
        InvalidArgumentError: not an existing shard directory.
        CorruptionError: the checked part of the newest segment is damaged, or control.json.
    """
    path = require_shard_dir(wal_dir)
    bases = list_segments(path)
    config = load_config(path)
    control = load_control(path)
    heartbeat = published(path)  # before the scan: the records it names are written by then
    reader = ShardReader(path)
    try:
        torn = reader.seek_end()
        next_lsn = reader.next_lsn
        checked_from = reader.checked_from
    finally:
        reader.close()
    named = heard_after(heartbeat, control, next_lsn)
    if checked_from is not None:
        named = max(named, named_past_end(path, bases[-1], checked_from[0], next_lsn))
    torn_lsns = (next_lsn, named) if named >= next_lsn else None
    next_append = max(  # after a range control.json discards: a writer killed before its cut
        named + 1 if torn_lsns is not None else next_lsn,
        control.end_after(next_lsn) if control is not None else next_lsn,
    )
    last = next_lsn - 1
    if control is not None:
        while (span := control.discarded_range(last)) is not None:
            last = span[0] - 1  # the latest LSN a record holds
    has_records = bool(bases) and last >= bases[0]
    checked = None
    if checked_from is not None:
        newest = segment_path(path, bases[-1])
        checked = {
            "segment": os.path.basename(newest),
            "from_offset": checked_from[0],
            "from_lsn": checked_from[1],
            "to_offset": os.path.getsize(newest),
        }
    return {
        "wal_dir": path,
        "shard": reader.shard_id
        if reader.shard_id is not None
        else (control.shard if control is not None else None),
        "oldest_lsn": bases[0] if has_records else None,
        "latest_lsn": last if has_records else None,
        "next_lsn": next_append,
        "segments": len(bases),
        "bytes": sum(os.path.getsize(segment_path(path, base)) for base in bases),
        "active_segment": os.path.basename(segment_path(path, bases[-1])) if bases else None,
        "torn_tail_bytes": torn,
        "torn_tail_lsns": list(torn_lsns) if torn_lsns is not None else None,
        "discarded": [list(span) for span in control.discarded] if control is not None else [],
        "torn": [list(span) for span in control.torn] if control is not None else [],
        "stream": None if config is None else config.to_json(),
        "retention": None if config is None else config.retention.to_json(),
        "snapshot_lsns": list_snapshots(path),
        "checked": checked,
    }
