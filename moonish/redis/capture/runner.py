"""Live capture: following a Redis master as its replica, every change into sharded logs.

``capture(url, data_dir, shards)`` connects as a replica (moonish.redis.replication.connection)
and runs until ``stop`` is set (docs/redis-source.md, "Live capture"):

1. **First start** (no shard holds a position): ``PSYNC ? -1``. The full resync's RDB is read
   whole (CRC-64 checked, moonish.redis.rdb.contents; expired keys kept: a replica waits for the
   master's ``DEL``) and every key becomes an ``r`` row of its shard, the position
   ``{"replid", "offset": <the RDB's offset>, "db": 0}`` on the last; every shard then holds
   that position (a position marker where no key landed).
2. **The command stream**: each command through moonish.redis.routing.router with the position
   ``{"replid", "offset": <its end offset>, "db": <the db selected after it>}`` on its last
   record; ``MULTI``/``EXEC`` as one atomic batch per shard (buffered until ``EXEC``);
   ``SELECT`` tracked; ``PING``, ``PUBLISH``, ``SPUBLISH`` and ``REPLCONF`` change no key and
   are not applied. Keys do not expire on access (commands run as Redis loads them): the
   master sends a ``DEL`` (or ``UNLINK``) for each key it expires, marked ``expired`` when
   the key's time had passed; keys overdue by ``overdue_expiry_ms`` that it never deletes
   (expired during ``DEBUG RELOAD``) are swept. The records' commit time is when moonish
   applied the command: Redis sends no times.
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
   An unfinished ``MULTI`` is dropped and received again. Each ``PSYNC`` answer, full resync
   and lost connection is an ``on_event`` (:class:`CaptureEvent`); ``capture.json`` says
   ``reconnecting`` meanwhile.
6. **Processes**: the shards are written by a :class:`~moonish.redis.capture.apply.ShardApplier`
   in this process, or with ``processes > 1`` by worker processes, each its share of them
   (moonish.redis.capture.workers); this process reads the stream, acknowledges the offset
   every worker has synced and writes ``capture.json``.
7. **Behind the master**: a side connection asks the master ``INFO replication`` every
   ``status_interval_ms`` (moonish.redis.capture.behind); the report, the progress callback
   and ``capture.json`` carry the bytes and seconds the durable offset is behind it.

Example::

    stop = threading.Event()
    report = capture("redis://127.0.0.1:6379", "data", 4, stop=stop)   # until stop.set()
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Callable

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError, UnavailableError
from moonish.gcpolicy import settle_gc
from moonish.log.writer import DEFAULT_SEGMENT_BYTES, FsyncPolicy, WriterOptions
from moonish.redis.capture.apply import ShardApplier, StreamRoute, resume_point
from moonish.redis.capture.behind import MasterWatch
from moonish.redis.capture.metrics import CaptureMetrics
from moonish.redis.capture.status import (
    CONNECTED,
    RECONNECTING,
    STATUS_NAME,
    STOPPED,
    CaptureEvent,
    CaptureOptions,
    CaptureReport,
    FullResyncOutcome,
    full_resync_event,
    psync_event,
    reconnect_event,
    remove_status,
    write_status,
)
from moonish.redis.capture.workers import Batch, Channel, LocalChannel, start_workers
from moonish.redis.replication.connection import (
    Continue,
    FullResync,
    ReplicaConnection,
    parse_redis_url,
)
from moonish.redis.routing.filterfile import FilterFile
from moonish.redis.routing.shards import source_shards
from moonish.redis.routing.sources import describe
from moonish.redis.routing.target import check_target
from moonish.state.config import StreamConfig

Progress = Callable[[CaptureReport], None]
OnEvent = Callable[[CaptureEvent], None]


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
    processes: int = 1,
    on_recovery: Callable[[str, int, int], None] | None = None,
    on_event: OnEvent | None = None,
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
        processes: with more than 1 (and more than 1 shard), the shards are written by up to
            this many worker processes, each its share (moonish.redis.capture.workers); this
            process reads the stream and acknowledges. The logs are the same as with one.
        on_recovery: called while the shards' writers rebuild their keyspaces as they open,
            with (the shard directory, the LSN rebuilt up to, the last LSN), after the
            snapshot and every batch of records replayed. ``stop`` is looked at there too:
            set during the rebuild, the capture returns without connecting (a rebuild writes
            nothing, so nothing is lost).
        on_event: called with each :class:`CaptureEvent` (``PSYNC`` answers, full resyncs,
            lost connections) as it happens, from the capture's thread.

    Returns:
        A :class:`CaptureReport`.

    Raises:
        InvalidArgumentError: a bad URL, shard count, process count or data directory (as
            ``wal import-aof``).
        SourceMismatchError: the data directory follows another source.
        ReplicationAuthError, ReplicationRefusedError: Redis refuses the credentials or
            replication (never retried).
        UnavailableError: the master stayed unreachable ``max_reconnects`` times in a row,
            a shard's log failed (path in the error), or a worker process died.
        RdbCorruptionError, RdbUnsupportedError: a full resync's RDB that moonish cannot read.
        UnsupportedFormatError: a command moonish does not implement, or function libraries
            in the RDB (the master's address and the replication offset in the error).
        CommandError: a command Redis would have refused.
        ResumeError: a command across shards stored in some of them only.
        WriterLockedError: another process writes one of the shards.
    """
    out_dir = os.fspath(data_dir)
    address = parse_redis_url(url)
    if processes < 1:
        raise InvalidArgumentError(f"processes must be at least 1, got {processes}")
    check_target(out_dir, shards, source=None)
    location = f"{address.host}:{address.port}"
    log = WriterOptions(segment_bytes=segment_bytes, fsync=FsyncPolicy.NEVER)
    options = options or CaptureOptions()
    stream = stream or StreamConfig()

    def recovering(shard_dir: str, lsn: int, last_lsn: int) -> None:
        if stop is not None and stop.is_set():
            raise _Stopped
        if on_recovery is not None:
            on_recovery(shard_dir, lsn, last_lsn)

    try:
        return _run(
            url,
            out_dir,
            shards,
            location,
            log,
            stream,
            options,
            clock,
            processes,
            stop,
            progress,
            recovering,
            on_event,
        )
    except _Stopped:  # while the shards were opened: nothing connected, nothing written
        report = CaptureReport(per_shard=[0] * shards)
        report.master = address.path
        return report


class _Stopped(Exception):
    """``stop`` was set while the shards' writers rebuilt their keyspaces."""


def _run(
    url: str,
    out_dir: str,
    shards: int,
    location: str,
    log: WriterOptions,
    stream: StreamConfig,
    options: CaptureOptions,
    clock: Clock,
    processes: int,
    stop: threading.Event | None,
    progress: Progress | None,
    recovering: Callable[[str, int, int], None],
    on_event: OnEvent | None,
) -> CaptureReport:
    """:func:`capture` once its arguments are checked."""
    address = parse_redis_url(url)
    if options.key_filter.types is not None:  # it asks the keyspaces which keys they hold
        processes = 1
    alone = min(processes, shards) == 1  # else the workers rebuild the keyspaces
    with source_shards(
        out_dir,
        shards,
        "replica",
        location,
        log,
        stream,
        clock,
        options.snapshots,
        recovering,
        rebuild=alone,
        key_filter=options.key_filter,
    ) as opened:
        filter_file = opened.filter
        assert filter_file is not None
        for name in os.listdir(out_dir):  # a full resync's copy left by a capture killed
            if name.startswith(".resync-") and name.endswith(".rdb"):  # (the shards are ours)
                os.unlink(os.path.join(out_dir, name))
        processes = min(processes, shards)
        if processes == 1:
            applier = ShardApplier(
                opened.writers, None, options, clock, key_filter=filter_file.key_filter
            )
            positions = list(applier.positions().values())
            session = _Capture(url, out_dir, [LocalChannel(applier)], positions, options, clock)
            session.filter_file = filter_file
            session.on_event = on_event
            session.report.master = address.path
            session.run(stop or threading.Event(), progress)
            return session.report
        for writer in opened.writers:  # the workers open them again
            writer.close()
        with start_workers(out_dir, shards, processes, log, stream, options, clock) as workers:
            found = workers.positions(stop)
            if found is None:
                raise _Stopped
            positions = found
            session = _Capture(
                url, out_dir, workers.channels, positions, options, clock, workers.route
            )
            session.filter_file = filter_file
            session.on_event = on_event
            session.report.master = address.path
            session.run(stop or threading.Event(), progress)
    return session.report


class _Capture:
    """The stream's side of a capture: the connection, acknowledgements and status; the
    shards are written by the appliers behind ``channels`` (in this process, or workers)."""

    def __init__(
        self,
        url: str,
        data_dir: str,
        channels: list[Channel],
        positions: list[dict[str, object]],
        options: CaptureOptions,
        clock: Clock,
        route: StreamRoute | None = None,
    ) -> None:
        self.url, self.data_dir, self.channels = url, data_dir, channels
        self.route = route  # what each worker gets (several processes)
        self.options, self.clock = options, clock
        self.positions = positions
        self.report = CaptureReport(per_shard=[0] * len(positions))
        self.replid = ""
        self.applied = 0  # the offset the appliers applied up to, at the last sync point
        self.db = 0  # the db the stream had selected there
        now = clock.now_us()
        self.last_status_us = now
        self.last_commands = 0
        self.on_event: OnEvent | None = None
        self.watch: MasterWatch | None = None
        self.filter_file: FilterFile | None = None  # saved with each status
        self.metrics: CaptureMetrics | None = None

    # -- connections ------------------------------------------------------------------

    def run(self, stop: threading.Event, progress: Progress | None) -> None:
        """Connect, sync and apply until ``stop``; reconnect after network errors."""
        options = self.options
        had_status = os.path.exists(os.path.join(self.data_dir, STATUS_NAME))
        self.metrics = CaptureMetrics(self.report.master)
        self.watch = MasterWatch(self.url, options.replica, self.clock, options.status_interval_ms)
        try:
            self._run(stop, progress)
        except BaseException:
            if not (had_status or self.report.full_resyncs or self.report.continues):
                remove_status(self.data_dir)  # never synced: a first start leaves nothing
            raise
        finally:
            self.watch.close()

    def _run(self, stop: threading.Event, progress: Progress | None) -> None:
        self.report.resumed_from = [describe(position) for position in self.positions]
        point = resume_point(self.positions)
        self.replid, self.applied, self.db = point.replid, point.applied, point.db
        self.report.replid = self.replid
        self.report.received_offset = self.report.durable_offset = self.applied
        self._settle(lambda channel: channel.start(point))
        options = self.options
        backoff_ms, failures = options.backoff_min_ms, 0
        while not stop.is_set():
            link = ReplicaConnection(self.url, options.replica, self.clock)
            try:
                self._sync(link)
                if options.settle_gc:
                    settle_gc()  # (the loaded keyspace lives on; moonish.gcpolicy)
                backoff_ms, failures = options.backoff_min_ms, 0
                self.report.link = CONNECTED
                while not stop.is_set():
                    batch = Batch(link.read_batch(options.batch_wait_ms), self.route)
                    for channel in self.channels:
                        channel.apply_batch(batch, link.path)
                    self.report.received_offset = link.offset
                    self._housekeeping(link, progress)
                self._finish(link)
                return
            except UnavailableError as exc:
                if exc.path != link.path:
                    raise  # a shard's log failed, not the network
                failures += 1
                self.report.reconnects += 1
                self.report.last_error = str(exc)
                self.report.link = RECONNECTING
                if options.max_reconnects is not None and failures > options.max_reconnects:
                    raise
                self._settle(lambda channel: channel.disconnected())
                self.report.received_offset = self.report.durable_offset = self.applied
                self._event(reconnect_event(self.clock.now_us(), str(exc), failures, backoff_ms))
            finally:
                link.close()
            if self._backoff(stop, backoff_ms, progress):
                break
            backoff_ms = min(backoff_ms * 2, options.backoff_max_ms)
        self._finish(None)

    def _backoff(self, stop: threading.Event, backoff_ms: int, progress: Progress | None) -> bool:
        """Wait ``backoff_ms`` (or until ``stop``: then ``True``), the status kept current."""
        left_ms = backoff_ms
        while left_ms > 0:
            self._status(progress, force=True)
            step_ms = min(left_ms, self.options.status_interval_ms)
            if stop.wait(step_ms / 1000):
                return True
            left_ms -= step_ms
        return stop.is_set()

    def _event(self, event: CaptureEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def _each(self, call: Callable[[Channel], None]) -> None:
        for channel in self.channels:
            call(channel)

    def _settle(self, call: Callable[[Channel], None]) -> None:
        """Make every applier run ``call`` and wait until each has; ``applied`` and ``db`` are
        then theirs (every applier is told where each batch leaves the stream: they agree)."""
        self._each(call)
        states = [channel.settle() for channel in self.channels]
        self.applied, self.db = states[0].applied, states[0].db

    def _sync(self, link: ReplicaConnection) -> None:
        """``PSYNC`` from the applied offset (or ``? -1``) and apply the answer."""
        asked = f"PSYNC {self.replid} {self.applied + 1}" if self.replid else "PSYNC ? -1"
        answer = link.psync(self.replid, self.applied) if self.replid else link.psync()
        self._event(psync_event(self.clock.now_us(), asked, answer))
        if isinstance(answer, FullResync):
            self._full_resync(link, answer)
        else:
            self._continue(answer)
        self.report.received_offset = link.offset
        if self.route is not None:
            self.route.reset(self.db)

    def _continue(self, answer: Continue) -> None:
        self.report.continues += 1
        self.replid = answer.replid
        self._each(lambda channel: channel.continued(answer.replid, answer.previous_replid))
        self.report.replid = self.replid

    def _full_resync(self, link: ReplicaConnection, answer: FullResync) -> None:
        """Load the RDB into every shard (ShardApplier.full_resync); the workers of a capture
        in several processes each read a copy spooled to the data directory."""
        self.report.full_resyncs += 1
        replid, offset = answer.replid, answer.offset
        started_us = self.clock.now_us()
        self._count()
        before = self._resync_counts()
        if len(self.channels) == 1:
            self._settle(
                lambda channel: channel.full_resync(replid, offset, answer.payload, link.path)
            )
        else:
            with tempfile.NamedTemporaryFile(
                dir=self.data_dir, prefix=".resync-", suffix=".rdb"
            ) as spool:
                shutil.copyfileobj(answer.payload, spool, 1 << 20)
                spool.flush()
                name = spool.name
                self._settle(lambda channel: channel.full_resync(replid, offset, name, link.path))
        self.replid, self.applied, self.db = answer.replid, answer.offset, 0
        self.report.replid = answer.replid
        link.ack(answer.offset)
        self.report.durable_offset = answer.offset
        self._count()
        diff = [
            after - earlier for after, earlier in zip(self._resync_counts(), before, strict=True)
        ]
        now = self.clock.now_us()
        outcome = FullResyncOutcome(
            now, replid, offset, link.rdb_bytes, (now - started_us) / 1e6, *diff
        )
        self.report.last_full_resync = outcome
        self._event(full_resync_event(outcome))

    def _resync_counts(self) -> tuple[int, int, int, int]:
        """Keys full resyncs wrote so far: (``r`` rows, ``c``, ``u``, ``d``)."""
        counts = [channel.counts() for channel in self.channels]
        created = sum(c.created for c in counts)
        updated = sum(c.updated for c in counts)
        rows = sum(c.rdb_keys for c in counts) - created - updated
        return rows, created, updated, sum(c.removed_keys for c in counts)

    def _finish(self, link: ReplicaConnection | None) -> None:
        """Stopping: every shard stores the applied position, all synced and acknowledged."""
        self._settle(lambda channel: channel.finish())
        if link is not None and self.replid:
            link.ack(self.applied)
            with contextlib.suppress(UnavailableError):  # the next PSYNC tells the master
                link.send_ack()
        self.report.durable_offset = self.applied
        self.report.link = STOPPED
        self._count()
        self._measure()
        now = self.clock.now_us()
        write_status(self.data_dir, self.report, now, running=False)
        self._save_filtered()
        if self.metrics is not None:
            self.metrics.observe(self.report, now)

    # -- durability, status -------------------------------------------------------------

    def _housekeeping(self, link: ReplicaConnection, progress: Progress | None) -> None:
        durable = min(channel.durable() for channel in self.channels)
        if durable > link.durable_offset:
            link.ack(durable)
            self.report.durable_offset = durable
        self._status(progress)

    def _status(self, progress: Progress | None, force: bool = False) -> None:
        """Every ``status_interval_ms`` (or now, ``force``): the counts, how far behind the
        master, ``capture.json`` and the progress callback."""
        now = self.clock.now_us()
        elapsed_us = now - self.last_status_us
        if not force and elapsed_us < self.options.status_interval_ms * 1000:
            return
        self._count()
        self._measure()
        if elapsed_us > 0:
            rate = (self.report.commands - self.last_commands) / (elapsed_us / 1e6)
            self.report.commands_per_s = rate
        self.last_commands, self.last_status_us = self.report.commands, now
        write_status(self.data_dir, self.report, now, running=True)
        self._save_filtered()
        if self.metrics is not None:
            self.metrics.observe(self.report, now)
        if progress is not None:
            progress(self.report)

    def _measure(self) -> None:
        """The report's figures against the master (moonish.redis.capture.behind)."""
        if self.watch is None:
            return
        report = self.report
        lag = self.watch.behind.measure(report.replid, report.durable_offset, self.clock.now_us())
        report.master_offset, report.bytes_behind = lag.master_offset, lag.bytes_behind
        report.seconds_behind, report.master_error = lag.seconds_behind, lag.error

    def _count(self) -> None:
        counts = [channel.counts() for channel in self.channels]
        report = self.report
        report.commands, report.transactions = counts[0].commands, counts[0].transactions
        per_shard = [0] * len(report.per_shard)
        for each in counts:  # (a worker's own shards; 0 for the others)
            for shard, records in enumerate(each.records):
                per_shard[shard] += records
        report.per_shard = per_shard
        report.records = sum(channel.appended() for channel in self.channels)
        report.rdb_keys = sum(c.rdb_keys for c in counts)
        report.removed_keys = sum(c.removed_keys for c in counts)
        filtered: Counter[str] = Counter()
        for each in counts:
            filtered.update(each.filtered)
        report.filtered = dict(sorted(filtered.items()))

    def _save_filtered(self) -> None:
        """``filter.json`` with this run's counts so far (when it has a filter)."""
        if self.filter_file is not None and self.report.filtered:
            self.filter_file.save(Counter(self.report.filtered))


__all__ = ["CaptureOptions", "CaptureReport", "capture"]
