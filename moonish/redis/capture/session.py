"""The stream's side of a live capture (moonish.redis.capture.runner): the connection to the
master (from a URL, or Sentinel: moonish.redis.capture.source), ``PSYNC`` and what it answers,
reconnects with backoff, acknowledgements, and the status (``capture.json``, the progress
callback, metrics, ``filter.json``'s counts); the shards are written by the appliers behind
its channels, in this process or in workers (moonish.redis.capture.workers).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import Counter
from collections.abc import Callable

from moonish.clock import Clock
from moonish.errors import UnavailableError
from moonish.gcpolicy import settle_gc
from moonish.redis.capture.apply import ApplierCounts, StreamRoute, resume_point
from moonish.redis.capture.behind import MasterWatch
from moonish.redis.capture.metrics import CaptureMetrics
from moonish.redis.capture.source import (
    MasterSource,
    check_node,
)
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
    source_event,
    write_status,
)
from moonish.redis.capture.workers import Batch, Channel, spooled
from moonish.redis.replication.connection import (
    Continue,
    FullResync,
    ReplicaConnection,
)
from moonish.redis.routing.filterfile import FilterFile
from moonish.redis.routing.sources import describe

Progress = Callable[[CaptureReport], None]
OnEvent = Callable[[CaptureEvent], None]


class StatusPublishing:
    """What a running capture publishes, shared by :class:`CaptureSession` and a cluster's
    ``ClusterSession`` (moonish.redis.cluster.session): ``capture.json``, ``filter.json``'s
    counts, the ``moonish_source_*`` metrics and the progress callback. The session provides
    the attributes declared here, ``_count`` (the report's counts from its appliers) and
    ``_measure`` (its figures against the master)."""

    data_dir: str
    report: CaptureReport
    options: CaptureOptions
    clock: Clock
    metrics: CaptureMetrics | None
    filter_file: FilterFile | None
    last_status_us: int
    last_commands: int
    _count: Callable[[], None]
    _measure: Callable[[], None]

    def _status(self, progress: Progress | None, force: bool = False) -> None:
        """Every ``status_interval_ms`` (or now, ``force``): the counts, how far behind the
        master, the commands per second since the last time, then :meth:`_publish` and the
        progress callback."""
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
        self._publish(now, running=True)
        if progress is not None:
            progress(self.report)

    def _publish(self, now_us: int, running: bool) -> None:
        """``capture.json`` (``running`` or stopped), ``filter.json``'s counts (when the
        capture has a filter) and the metrics, as the report stands."""
        write_status(self.data_dir, self.report, now_us, running=running)
        if self.filter_file is not None and self.report.filtered:
            self.filter_file.save(Counter(self.report.filtered))
        if self.metrics is not None:
            self.metrics.observe(self.report, now_us)


class CaptureSession(StatusPublishing):
    """The stream's side of a capture: the connection, acknowledgements and status; the
    shards are written by the appliers behind ``channels`` (in this process, or workers)."""

    def __init__(
        self,
        source: MasterSource,
        data_dir: str,
        channels: list[Channel],
        positions: list[dict[str, object]],
        options: CaptureOptions,
        clock: Clock,
        route: StreamRoute | None = None,
    ) -> None:
        self.source, self.data_dir, self.channels = source, data_dir, channels
        self.accept_new_source = False
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
        had_status = os.path.exists(os.path.join(self.data_dir, STATUS_NAME))
        self.metrics = CaptureMetrics(self.report.master)
        try:
            self._run(stop, progress)
        except BaseException:
            if not (had_status or self.report.full_resyncs or self.report.continues):
                remove_status(self.data_dir)  # never synced: a first start leaves nothing
            raise
        finally:
            if self.watch is not None:
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
            link: ReplicaConnection | None = None
            try:
                link = ReplicaConnection(self._master_url(), options.replica, self.clock)
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
                if link is not None and exc.path != link.path:
                    raise  # a shard's log failed, not the network
                self.source.lost()  # (Sentinel is asked again)
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
                if link is not None:
                    link.close()
            if self._backoff(stop, backoff_ms, progress):
                break
            backoff_ms = min(backoff_ms * 2, options.backoff_max_ms)
        self._finish(None)

    def _master_url(self) -> str:
        """The master to connect to now; another node than the last one is checked first
        (its history must hold the applied position: moonish.redis.capture.source), and the
        side connection that asks it for its offset follows it.

        Raises:
            UnavailableError: Sentinel or the node cannot be asked (retried as a lost link).
            SourceMismatchError: the node holds another history.
        """
        source = self.source
        url, node, was = source.url(), source.node(), source.followed
        if was is not None and node != was:
            history = (self.replid, self.applied) if self.replid else None
            decided = check_node(source, history, self.accept_new_source, was)
            if decided is not None:
                self._event(source_event(self.clock.now_us(), decided, node))
            self.report.master = source.path
        if self.watch is None or node != was:  # the side connection follows the master
            if self.watch is not None:
                self.watch.close()
            interval_ms = self.options.status_interval_ms
            self.watch = MasterWatch(url, self.options.replica, self.clock, interval_ms)
        source.followed = node
        return url

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
            with spooled(self.data_dir, answer.payload) as name:
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
        self._publish(self.clock.now_us(), running=False)

    # -- durability, status -------------------------------------------------------------

    def _housekeeping(self, link: ReplicaConnection, progress: Progress | None) -> None:
        durable = min(channel.durable() for channel in self.channels)
        if durable > link.durable_offset:
            link.ack(durable)
            self.report.durable_offset = durable
        self._status(progress)

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
        tally(self.report, counts, counts[0].commands, counts[0].transactions)
        self.report.records = sum(channel.appended() for channel in self.channels)


def tally(
    report: CaptureReport, counts: list[ApplierCounts], commands: int, transactions: int
) -> None:
    """The report's counts from its appliers' (records per shard summed: each applier counts
    its own shards'), with ``commands`` and ``transactions`` as the caller counts them (the
    appliers of one stream each see all of it; a cluster's links each their own)."""
    report.commands, report.transactions = commands, transactions
    per_shard = [0] * len(report.per_shard)
    for each in counts:
        for shard, records in enumerate(each.records):
            per_shard[shard] += records
    report.per_shard = per_shard
    report.records = sum(per_shard)
    report.rdb_keys = sum(c.rdb_keys for c in counts)
    report.removed_keys = sum(c.removed_keys for c in counts)
    filtered: Counter[str] = Counter()
    for each in counts:
        filtered.update(each.filtered)
    report.filtered = dict(sorted(filtered.items()))
