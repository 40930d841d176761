"""Live capture: following a Redis master as its replica, every change into sharded logs.

``capture(url, data_dir, shards)`` connects as a replica (moonish.redis.replication) and runs
until ``stop`` is set (docs/redis-source.md, "Live capture"):

1. **First start** (no shard holds a position): ``PSYNC ? -1``. The full resync's RDB is read
   whole (CRC-64 checked, moonish.redis.rdb_load; expired keys kept: a replica waits for the
   master's ``DEL``) and every key becomes an ``r`` row of its shard, the position
   ``{"replid", "offset": <the RDB's offset>, "db": 0}`` on the last; every shard then holds
   that position (a position marker where no key landed).
2. **The command stream**: each command through moonish.redis.router with the position
   ``{"replid", "offset": <its end offset>, "db": <the db selected after it>}`` on its last
   record; ``MULTI``/``EXEC`` as one atomic batch per shard (buffered until ``EXEC``);
   ``SELECT`` tracked; ``PING``, ``PUBLISH``, ``SPUBLISH`` and ``REPLCONF`` change no key and
   are not applied. Keys never expire on their own (no sweep, commands run as Redis loads
   them): the master sends a ``DEL`` for each key it expires. The records' commit time is
   when moonish applied the command: Redis sends no times.
3. **Durability and ACK**: after a batch is appended the written shards are synced (at most
   every ``sync_interval_ms``), and only then is the offset acknowledged (``REPLCONF ACK``),
   so ``INFO replication`` and ``WAIT`` count only changes that are in the logs. Shards no
   command touched get a position marker every ``mark_interval_ms``.
4. **Restart**: each shard's stored position (``ShardWriter.source``). When all name the same
   replid the capture sends ``PSYNC <replid> <min offset + 1>`` and shards whose position is
   past a command skip it (each command applied exactly once). ``+CONTINUE`` continues (with a
   new replid after a failover, stored from then on); ``+FULLRESYNC`` (backlog overrun, new
   replid) is applied as a *diff* against each shard's keyspace (moonish.state.load): ``d``
   for keys that are gone, ``c``/``u`` for keys whose type, value or expiry differ, nothing
   for the rest. Shards without a position, or with different replids (a capture stopped
   while storing a new one), resynchronise the same way with ``PSYNC ? -1``.
5. **Network errors** (the master's address in the error): reconnect after a backoff
   (``backoff_min_ms`` doubling to ``backoff_max_ms``) and ``PSYNC`` from the applied offset.
   An unfinished ``MULTI`` is dropped and received again.

Example::

    stop = threading.Event()
    report = capture("redis://127.0.0.1:6379", "data", 4, stop=stop)   # until stop.set()
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import (
    UnavailableError,
    UnsupportedFormatError,
)
from moonish.hotloop import settle_gc
from moonish.log.writer import DEFAULT_SEGMENT_BYTES, FsyncPolicy, WriterOptions
from moonish.redis.capture_status import CaptureOptions, CaptureReport, write_status
from moonish.redis.import_checks import check_target
from moonish.redis.import_shards import source_shards
from moonish.redis.rdb_load import read_contents
from moonish.redis.replication import Continue, FullResync, ReplicaConnection, parse_redis_url
from moonish.redis.resp import ReplCommand
from moonish.redis.router import Entry, Router, selected_db
from moonish.redis.source import (
    decode_position,
    describe,
    encode_position,
)
from moonish.state.config import StreamConfig
from moonish.state.load import load_entries, loader_for, remove_missing, set_libraries
from moonish.state.shard import ShardWriter

IGNORED = frozenset({b"PING", b"PUBLISH", b"SPUBLISH", b"REPLCONF"})
"""Commands of the replication stream that change no key."""

Progress = Callable[[CaptureReport], None]


def capture(
    url: str,
    data_dir: str | os.PathLike[str],
    shards: int,
    *,
    stop: threading.Event | None = None,
    progress: Progress | None = None,
    options: CaptureOptions | None = None,
    clock: Clock = SYSTEM_CLOCK,
    stream: StreamConfig | None = None,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
) -> CaptureReport:
    """Follow the Redis master at ``url`` into ``shards`` shards under ``data_dir`` until
    ``stop`` is set (see the module docstring); then sync, acknowledge and return.

    Args:
        url: ``redis[s]://[[user]:password@]host[:port]``.
        data_dir: the moonish data directory (created if missing); it remembers the master
            (``source.json``: kind ``replica``, location ``host:port``).
        shards: number of shards, 1..16384; must match an existing data directory.
        stop: set it (from another thread or a signal handler) to stop; ``None``: run until
            an error.
        progress: called with the report about every ``status_interval_ms``.
        options: sync, mark, status and reconnect periods (:class:`CaptureOptions`).
        clock: the records' commit time and every period.
        stream: the stream configuration of shards the capture creates.
        segment_bytes: the writers' segment size.

    Returns:
        A :class:`CaptureReport`.

    Raises:
        InvalidArgumentError: a bad URL, shard count or data directory (as ``wal import-aof``).
        SourceMismatchError: the data directory follows another source.
        ReplicationAuthError, ReplicationRefusedError: Redis refuses the credentials or
            replication (never retried).
        UnavailableError: the master stayed unreachable ``max_reconnects`` times in a row,
            or a shard's log failed (path in the error).
        RdbCorruptionError, RdbUnsupportedError: a full resync's RDB that moonish cannot read.
        UnsupportedFormatError: a command moonish does not implement, or function libraries
            in the RDB (the master's address and the replication offset in the error).
        CommandError: a command Redis would have refused.
        ResumeError: a command across shards stored in some of them only.
        WriterLockedError: another process writes one of the shards.
    """
    out_dir = os.fspath(data_dir)
    address = parse_redis_url(url)
    check_target(out_dir, shards, source=None)
    location = f"{address.host}:{address.port}"
    log = WriterOptions(segment_bytes=segment_bytes, fsync=FsyncPolicy.NEVER)
    with source_shards(out_dir, shards, "replica", location, log, stream or StreamConfig(),
                       clock) as opened:  # fmt: skip
        session = _Capture(url, out_dir, opened.writers, options or CaptureOptions(), clock)
        session.report.master = address.path
        session.run(stop or threading.Event(), progress)
    return session.report


class _Capture:
    """One capture's state: the shards, what has been applied and made durable."""

    def __init__(
        self, url: str, data_dir: str, writers: list[ShardWriter], options: CaptureOptions,
        clock: Clock,
    ) -> None:  # fmt: skip
        self.url, self.data_dir, self.writers = url, data_dir, writers
        self.options, self.clock = options, clock
        self.router = Router(writers, clock)
        self.report = CaptureReport(per_shard=[0] * len(writers))
        self.replid = ""
        self.applied = 0  # the offset every shard has applied up to (in memory)
        self.db = 0  # the stream's selected db after `applied`
        self.done = [0] * len(writers)  # per shard, the stored offset at the last (re)start
        self.skip_below = 0  # commands ending at or before this may be stored in some shards
        self.synced_lsn = [writer.next_lsn for writer in writers]
        self.link: ReplicaConnection | None = None
        now = clock.now_us()
        self.last_sync_us = self.last_mark_us = self.last_status_us = now
        self.last_commands = 0
        self.stream_db = 0
        self.transaction: list[Entry] | None = None
        self.transaction_start = 0

    # -- connections ------------------------------------------------------------------

    def run(self, stop: threading.Event, progress: Progress | None) -> None:
        """Connect, sync and apply until ``stop``; reconnect after network errors."""
        self.report.resumed_from = [
            describe(decode_position(writer.source, writer.shard_dir)) for writer in self.writers
        ]
        self._restore()
        options = self.options
        backoff_ms, failures = options.backoff_min_ms, 0
        while not stop.is_set():
            link = self.link = ReplicaConnection(self.url, options.replica, self.clock)
            try:
                self._sync(link)
                if options.settle_gc:
                    settle_gc()  # (the loaded keyspace lives on; moonish.hotloop)
                backoff_ms, failures = options.backoff_min_ms, 0
                while not stop.is_set():
                    self._apply_batch(link, link.read_batch(options.batch_wait_ms))
                    self._housekeeping(link, progress)
                self._finish(link)
                return
            except UnavailableError as exc:
                if exc.path != link.path:
                    raise  # a shard's log failed, not the network
                failures += 1
                self.report.reconnects += 1
                self.report.last_error = str(exc)
                if options.max_reconnects is not None and failures > options.max_reconnects:
                    raise
                self._disconnected()
            finally:
                link.close()
                self.link = None
            if stop.wait(backoff_ms / 1000):
                break
            backoff_ms = min(backoff_ms * 2, options.backoff_max_ms)
        self._finish(None)

    def _restore(self) -> None:
        """Where the shards' stored positions say the stream stands: all with one replid,
        resume at the smallest offset (``done`` keeps each shard's, for skipping); else none
        (``replid`` empty: ask for everything)."""
        positions = [decode_position(w.source, w.shard_dir) for w in self.writers]
        replids = {position.get("replid") for position in positions}
        if len(replids) != 1 or None in replids:
            self.replid = ""
            return
        self.replid = str(replids.pop())
        self.done = [int(position["offset"]) for position in positions]
        lowest = min(range(len(positions)), key=lambda shard: self.done[shard])
        self.applied = self.done[lowest]
        self.db = int(positions[lowest].get("db", 0))
        self.skip_below = max(self.done)

    def _sync(self, link: ReplicaConnection) -> None:
        """``PSYNC`` from the applied offset (or ``? -1``) and apply the answer."""
        answer = link.psync(self.replid, self.applied) if self.replid else link.psync()
        if isinstance(answer, FullResync):
            self._full_resync(link, answer)
        else:
            self._continue(answer)
        self.stream_db = self.db
        self.transaction = None

    def _continue(self, answer: Continue) -> None:
        self.report.continues += 1
        if answer.previous_replid is not None:  # a failover: the stream goes on, renamed
            self.replid = answer.replid
            for shard, writer in enumerate(self.writers):
                stored = decode_position(writer.source, writer.shard_dir)
                self.router.mark(shard, encode_position({
                    "replid": answer.replid, "offset": stored["offset"],
                    "db": stored.get("db", 0),
                }))  # fmt: skip
        self.report.replid = self.replid

    def _full_resync(self, link: ReplicaConnection, answer: FullResync) -> None:
        """Load the RDB into every shard: ``r`` rows for a shard that never finished a load,
        else the differences (``d`` first, so the position rides on the last record); then
        a position marker where no record carried it."""
        self.report.full_resyncs += 1
        now_ms = self.clock.now_us() // 1000
        contents = read_contents(answer.payload, link.path, len(self.writers), now_ms=now_ms,
                                 drop_expired=False)  # fmt: skip
        position = encode_position({"replid": answer.replid, "offset": answer.offset, "db": 0})
        for shard, writer in enumerate(self.writers):
            rows = not writer.source  # its first load (or one cut short)
            set_libraries(writer, contents.functions)  # before the keys: the position goes last
            loader = loader_for(writer, b"PSYNC")
            keys = contents.keys[shard]
            present = {(db, key) for db, key, _ in keys}
            append = self.router.appender(shard)
            self.report.removed_keys += remove_missing(loader, _member(present), append)
            self.report.rdb_keys += load_entries(loader, keys, append, rows=rows,
                                                 source=position)  # fmt: skip
            self.router.mark(shard, position)
        self.replid, self.applied, self.db = answer.replid, answer.offset, 0
        self.done = [answer.offset] * len(self.writers)
        self.skip_below = answer.offset
        self.report.replid = answer.replid
        self._make_durable(link)

    def _disconnected(self) -> None:
        """After a lost connection: an unfinished MULTI comes again; sync what is applied."""
        self.transaction = None
        self.stream_db = self.db
        for writer in self.writers:
            writer.sync()
        self.synced_lsn = [writer.next_lsn for writer in self.writers]

    def _finish(self, link: ReplicaConnection | None) -> None:
        """Stopping: every shard stores the applied position, all synced and acknowledged."""
        if self.replid:
            for shard in range(len(self.writers)):
                self._mark_behind(shard)
        for writer in self.writers:
            writer.sync()
        self.synced_lsn = [writer.next_lsn for writer in self.writers]
        if link is not None and self.replid:
            link.ack(self.applied)
            with contextlib.suppress(UnavailableError):  # the next PSYNC tells the master
                link.send_ack()
        self.report.durable_offset = self.applied
        self._count()
        write_status(self.data_dir, self.report, self.clock.now_us(), running=False)

    # -- the command stream -----------------------------------------------------------

    def _apply_batch(self, link: ReplicaConnection, batch: list[ReplCommand]) -> None:
        """Apply ``batch`` in order (see the module docstring, 2)."""
        for start, end, argv in batch:
            name = argv[0].upper()
            if name == b"SELECT":
                self.stream_db = _select(argv, link.path, start)
            elif name == b"MULTI":
                if self.transaction is not None:
                    raise UnsupportedFormatError("MULTI inside MULTI", path=link.path, offset=start)
                self.transaction, self.transaction_start = [], start
            elif name == b"EXEC":
                if self.transaction is None:
                    raise UnsupportedFormatError("EXEC without MULTI", path=link.path, offset=start)
                entries, self.transaction = self.transaction, None
                self._apply(entries, True, end, link.path, self.transaction_start)
                self.report.transactions += 1
            elif name in IGNORED:
                pass
            elif self.transaction is not None:
                self.transaction.append((self.stream_db, argv, start))
                continue
            else:
                self._apply([(self.stream_db, argv, start)], False, end, link.path, start)
            if self.transaction is None:
                self.applied, self.db = end, self.stream_db
        self.report.received_offset = link.offset

    def _apply(
        self, entries: list[Entry], transaction: bool, end: int, path: str, start: int
    ) -> None:
        router = self.router
        if end <= self.skip_below:
            router.skip = [done >= end for done in self.done]
            if all(router.skip):
                return
        elif any(router.skip):
            router.skip = [False] * len(self.writers)
        router.position = encode_position(
            {"replid": self.replid, "offset": end, "db": self.stream_db}
        )
        commands = router.commands
        router.apply(entries, transaction, path)  # errors name the path and the offset
        self.report.commands += router.commands - commands

    # -- durability, markers, status -----------------------------------------------------

    def _housekeeping(self, link: ReplicaConnection, progress: Progress | None) -> None:
        now = self.clock.now_us()
        options = self.options
        if self.applied > link.durable_offset and (
            now - self.last_sync_us >= options.sync_interval_ms * 1000
        ):
            self._make_durable(link)
        if now - self.last_mark_us >= options.mark_interval_ms * 1000:
            self.last_mark_us = now
            for shard in range(len(self.writers)):
                self._mark_behind(shard)
        if now - self.last_status_us >= options.status_interval_ms * 1000:
            elapsed_s = (now - self.last_status_us) / 1e6
            self.report.commands_per_s = (self.report.commands - self.last_commands) / elapsed_s
            self.last_commands, self.last_status_us = self.report.commands, now
            self._count()
            write_status(self.data_dir, self.report, now, running=True)
            if progress is not None:
                progress(self.report)

    def _make_durable(self, link: ReplicaConnection) -> None:
        """Sync the shards written since the last sync, then acknowledge ``applied``."""
        for shard, writer in enumerate(self.writers):
            if writer.next_lsn != self.synced_lsn[shard]:
                writer.sync()
                self.synced_lsn[shard] = writer.next_lsn
        link.ack(self.applied)
        self.report.durable_offset = self.applied
        self.last_sync_us = self.clock.now_us()

    def _mark_behind(self, shard: int) -> None:
        """A position marker in ``shard`` when its stored offset is behind ``applied``."""
        writer = self.writers[shard]
        stored = decode_position(writer.source, writer.shard_dir)
        if stored.get("replid") == self.replid and int(stored["offset"]) >= self.applied:
            return
        position = {"replid": self.replid, "offset": self.applied, "db": self.db}
        self.router.mark(shard, encode_position(position))

    def _count(self) -> None:
        self.report.per_shard = list(self.router.records)
        self.report.records = sum(self.router.records)


def _member(keys: set[tuple[int, bytes]]) -> Callable[[int, bytes], bool]:
    return lambda db, key: (db, key) in keys


def _select(argv: list[bytes], path: str, offset: int) -> int:
    db = selected_db(argv)
    if db is None:
        raise UnsupportedFormatError(f"bad SELECT {argv[1:]!r}", path=path, offset=offset)
    return db


__all__ = ["CaptureOptions", "CaptureReport", "capture"]
