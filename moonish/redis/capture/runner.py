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

import os
import threading
from collections.abc import Callable, Mapping

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError
from moonish.log.writer import DEFAULT_SEGMENT_BYTES, FsyncPolicy, WriterOptions
from moonish.redis.capture.apply import GATHER_BYTES, ShardApplier
from moonish.redis.capture.session import CaptureSession, OnEvent, Progress
from moonish.redis.capture.source import (
    MasterSource,
    check_node,
    last_location,
    refuse_cluster_node,
    stored_history,
)
from moonish.redis.capture.status import (
    CaptureOptions,
    CaptureReport,
    source_event,
)
from moonish.redis.capture.workers import LocalChannel, remove_spools, start_workers
from moonish.redis.routing.shards import source_shards
from moonish.redis.routing.sources import remember_source
from moonish.redis.routing.target import check_target
from moonish.state.config import StreamConfig


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
    accept_new_source: bool = False,
    retention: Mapping[str, int] | None = None,
) -> CaptureReport:
    """Follow the Redis master at ``url`` into ``shards`` shards under ``data_dir`` until
    ``stop`` is set (see the module docstring); then sync, acknowledge and return.

    Args:
        url: ``redis[s]://[[user]:password@]host[:port]``, or a Sentinel URL
            ``redis[s]+sentinel://[[user]:password@]host[:port][,...]/<master-name>``: the
            master Sentinel names, asked again after each lost connection (so a failover is
            followed; moonish.redis.capture.source).
        data_dir: the moonish data directory (created if missing); it remembers where it
            last followed the master (``source.json``: kind ``replica``, location
            ``host:port`` or the Sentinel URL without credentials). Another node continues it
            when its replication history holds the shards' position.
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
            lost connections, another node followed) as it happens, from the capture's thread.
        accept_new_source: follow a node whose history does not hold the data directory's
            position (another data set): its full resync is written as the differences.
        retention: rules of every shard's retention policy to set as the writers open
            (``RetentionPolicy`` field names: ``max_bytes``, ``max_age_ms``, ...; the others
            keep their stored values).

    Returns:
        A :class:`CaptureReport`.

    Raises:
        InvalidArgumentError: a bad URL, shard count, process count or data directory (as
            ``wal import-aof``).
        SourceMismatchError: the data directory follows another source, or the node's
            replication history does not hold its position (without ``accept_new_source``).
        ReplicationAuthError, ReplicationRefusedError: Redis refuses the credentials or
            replication (never retried).
        UnavailableError: the master stayed unreachable ``max_reconnects`` times in a row,
            a shard's log failed (path in the error), or a worker process died.
        RdbCorruptionError, RdbUnsupportedError: a full resync's RDB that moonish cannot read.
        UnsupportedFormatError: a command moonish does not implement, or function libraries
            in the RDB (the master's address and the replication offset in the error).
        ClusterNodeError: a Redis Cluster node (``ReplicaOptions.cluster_node`` unset).
        CommandError: a command Redis would have refused.
        ResumeError: a command across shards stored in some of them only.
        WriterLockedError: another process writes one of the shards.
    """
    out_dir = os.fspath(data_dir)
    options = options or CaptureOptions()
    source = MasterSource(url, options.replica)
    if processes < 1:
        raise InvalidArgumentError(f"processes must be at least 1, got {processes}")
    check_target(out_dir, shards, source=None)
    refuse_cluster_node(source)
    log = WriterOptions(
        segment_bytes=segment_bytes, fsync=FsyncPolicy.NEVER, write_buffer_bytes=GATHER_BYTES
    )
    stream = stream or StreamConfig()

    def recovering(shard_dir: str, lsn: int, last_lsn: int) -> None:
        if stop is not None and stop.is_set():
            raise _Stopped
        if on_recovery is not None:
            on_recovery(shard_dir, lsn, last_lsn)

    was = last_location(out_dir)
    if was is not None and was != source.location:  # another node: its history decides
        shard_dirs = [os.path.join(out_dir, f"shard-{k}") for k in range(shards)]
        decided = check_node(source, stored_history(shard_dirs), accept_new_source, was)
        remember_source(out_dir, "replica", source.location)
        if decided is not None and on_event is not None:
            on_event(source_event(clock.now_us(), decided, source.node()))
    try:
        return _run(
            source,
            out_dir,
            shards,
            accept_new_source,
            retention,
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
        report.master = source.path
        return report


class _Stopped(Exception):
    """``stop`` was set while the shards' writers rebuilt their keyspaces."""


def _run(
    source: MasterSource,
    out_dir: str,
    shards: int,
    accept_new_source: bool,
    retention: Mapping[str, int] | None,
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
    if options.key_filter.types is not None:  # it asks the keyspaces which keys they hold
        processes = 1
    alone = min(processes, shards) == 1  # else the workers rebuild the keyspaces
    with source_shards(
        out_dir,
        shards,
        "replica",
        source.location,
        log,
        stream,
        clock,
        options.snapshots,
        recovering,
        rebuild=alone,
        key_filter=options.key_filter,
        retention=retention,
    ) as opened:
        filter_file = opened.filter
        assert filter_file is not None
        remove_spools(out_dir)  # (the shards are ours: no capture reads them)
        processes = min(processes, shards)
        if processes == 1:
            applier = ShardApplier(
                opened.writers, None, options, clock, key_filter=filter_file.key_filter
            )
            positions = list(applier.positions().values())
            session = CaptureSession(
                source, out_dir, [LocalChannel(applier)], positions, options, clock
            )
            session.filter_file, session.accept_new_source = filter_file, accept_new_source
            session.on_event = on_event
            session.report.master = source.path
            session.run(stop or threading.Event(), progress)
            return session.report
        for writer in opened.writers:  # the workers open them again
            writer.close()
        with start_workers(out_dir, shards, processes, log, stream, options, clock) as workers:
            found = workers.positions(stop)
            if found is None:
                raise _Stopped
            positions = found
            session = CaptureSession(
                source, out_dir, workers.channels, positions, options, clock, workers.route
            )
            session.filter_file, session.accept_new_source = filter_file, accept_new_source
            session.on_event = on_event
            session.report.master = source.path
            session.run(stop or threading.Event(), progress)
    return session.report


__all__ = ["CaptureOptions", "CaptureReport", "capture"]
