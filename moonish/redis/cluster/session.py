"""The stream side of a cluster capture (moonish.redis.cluster.runner): one replication link
per master, each with its own applier over the shared shards (a
:class:`~moonish.redis.capture.apply.ShardApplier`, or with several processes the workers
that own the shards, moonish.redis.cluster.workers), applied by one thread.

Each link is connected and synced (``PSYNC``, a full resync loaded as the differences of its
node's slots) by the capture's thread; then a reader thread per link reads its stream
(``read_batch``, which also sends its ``REPLCONF ACK``s) into one bounded queue, and the
capture's thread applies the batches in the order they arrive, syncs, acknowledges each link's
durable offset, marks idle shards and writes ``capture.json``. A link whose connection fails
reconnects after a backoff and ``PSYNC``s from its applied offset, while the other links go on.

**Failover.** Before each reconnect, the topology is read again from the first node that
answers (moonish.redis.topology; every node seen at the start is a seed): the master that
serves the link's first slot now is the one to follow. When it is another node (a replica
promoted by election or ``CLUSTER FAILOVER``), the link moves to it and sends its usual
``PSYNC <replid> <applied + 1>``: PSYNC2 keeps the old history as the promoted node's
``replid2``, so it answers ``+CONTINUE <new replid>`` when it holds every byte the link applied
(the new replication ID is stored from then on), and ``+FULLRESYNC`` otherwise, written as the
differences of the link's slots (writes the old master acknowledged but never replicated are
lost by Redis; moonish reverses them rather than keep them). While the slot's owner is flagged
failed and no replica has taken over, the link waits (``waiting_for_failover``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable

from moonish.clock import Clock
from moonish.errors import UnavailableError
from moonish.gcpolicy import settle_gc
from moonish.redis.capture.behind import MasterWatch
from moonish.redis.capture.metrics import CaptureMetrics
from moonish.redis.capture.session import StatusPublishing, tally
from moonish.redis.capture.status import (
    CONNECTED,
    RECONNECTING,
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
)
from moonish.redis.cluster.handoff import Handoffs
from moonish.redis.cluster.links import Link, LinkApplier, measure
from moonish.redis.cluster.order import Order, Stream
from moonish.redis.cluster.watch import TOPOLOGY_INTERVAL_MS, TopologyFollowing
from moonish.redis.replication.connection import Continue, FullResync, ReplicaConnection
from moonish.redis.replication.resp import ReplCommand
from moonish.redis.routing.filterfile import FilterFile
from moonish.redis.topology.nodes import ClusterNode

Progress = Callable[[CaptureReport], None]
OnEvent = Callable[[CaptureEvent], None]
CATCH_UP_MAX_MS = 10_000
_QUEUED_BATCHES = 64  # per capture: a reader waits when the appliers are this far behind


class ClusterSession(TopologyFollowing, StatusPublishing):
    """Connects, syncs and applies every link until ``stop`` (module docstring)."""

    def __init__(
        self,
        data_dir: str,
        links: list[Link],
        report: CaptureReport,
        options: CaptureOptions,
        clock: Clock,
        seeds: list[str] | None = None,
        *,
        handoffs: Handoffs,
    ) -> None:
        self.data_dir, self.links, self.report = data_dir, links, report
        self.seeds = seeds or [link.url for link in links]
        """The nodes' URLs the topology is asked from after a lost link, in order."""
        self.options, self.clock = options, clock
        self.on_event: OnEvent | None = None
        self.filter_file: FilterFile | None = None
        self.first_load = True  # a first start's loads make one snapshot over the links
        self.metrics: CaptureMetrics | None = None
        self.handoffs = handoffs
        """The pairing of migrations: over the shards' writers, or the workers'."""
        self.order = Order(self.links, self.handoffs, options.replica, clock)
        self.order.on_note = self._noted
        self.make_link: Callable[[ClusterNode, ClusterNode], Link] | None = None
        """A new link for a master that has none (a node added to the cluster), read from the
        second node (the master, or one of its replicas)."""
        self.prefer_replica = False
        """Whether links read their master's stream from one of its replicas."""
        self._topology_us = clock.now_us()
        self._queue: queue.Queue[tuple[Link, list[ReplCommand] | BaseException]] = queue.Queue(
            _QUEUED_BATCHES
        )
        self.last_status_us = clock.now_us()
        self.last_commands = 0

    # -- the run ------------------------------------------------------------------------

    def run(self, stop: threading.Event, progress: Progress | None) -> None:
        """Sync every link, then apply their streams until ``stop``; stopping syncs and
        acknowledges everything applied.

        Raises:
            UnavailableError: a link stayed unreachable ``max_reconnects`` times in a row, or
                a shard's log failed.
            Any error of :meth:`ShardApplier.apply_batch` or of a full resync.
        """
        had_status = os.path.exists(os.path.join(self.data_dir, "capture.json"))
        self.metrics = CaptureMetrics(self.report.master)
        try:
            unsynced = [link for link in self.links if not link.applier.replid]
            for link in self.links:
                if stop.is_set():
                    break
                self._connect(link, stop, progress, not unsynced or link is unsynced[-1])
            if self.options.settle_gc:
                settle_gc()  # (the loaded keyspace lives on; moonish.gcpolicy)
            while not stop.is_set():
                self._step(stop, progress)
            self._finish()
        except BaseException:
            self._halt()
            if not (had_status or self.report.full_resyncs or self.report.continues):
                remove_status(self.data_dir)
            raise

    def _connect(
        self, link: Link, stop: threading.Event, progress: Progress | None, last_load: bool
    ) -> None:
        """Connect ``link`` and sync it, retrying after a backoff while the node cannot be
        reached (the status kept current), until ``stop``."""
        while not stop.is_set():
            if self._try_connect(link, last_load):
                return
            while not stop.is_set() and self.clock.now_us() < link.retry_at_us:
                self._status(progress, force=True)
                stop.wait(min(link.backoff_ms, self.options.status_interval_ms) / 1000)

    def _try_connect(self, link: Link, last_load: bool = True) -> bool:
        """One attempt to connect and sync ``link`` and start its reader: whether it worked
        (else it is scheduled again after its backoff).

        Raises:
            UnavailableError: ``max_reconnects`` failures in a row.
        """
        options = self.options
        if link.import_wait is not None and not self._import_over(link):
            link.retry_at_us = self.clock.now_us() + TOPOLOGY_INTERVAL_MS * 1000
            return False
        if link.failures and not self._follow_owner(link):
            return False
        self._catch_up(link)
        if not self._reader_holds(link):
            self._read_master(link)
        connection = ReplicaConnection(link.url, options.replica, self.clock)
        try:
            self._sync(link, connection, last_load)
        except UnavailableError as exc:
            connection.close()
            if exc.path != connection.path:
                raise  # a shard's log failed, not the network
            self._lost(link, exc)
            return False
        link.connection = connection
        link.failures, link.backoff_ms = 0, 0
        link.report.state = CONNECTED
        if link.watch is None:
            link.watch = MasterWatch(
                link.master_url, options.replica, self.clock, options.status_interval_ms
            )
        link.reading.set()
        link.reader = threading.Thread(
            target=self._read, args=(link, connection), name="moonish-cluster-link", daemon=True
        )
        link.reader.start()
        return True

    def _sync(self, link: Link, connection: ReplicaConnection, last_load: bool) -> None:
        applier, report = link.applier, link.report
        replid, applied = applier.replid, applier.applied
        if link.import_wait is not None:  # the node's keys after an atomic migration
            replid = ""
        asked = f"PSYNC {replid} {applied + 1}" if replid else "PSYNC ? -1"
        answer = connection.psync(replid, applied) if replid else connection.psync()
        self._event(link, psync_event(self.clock.now_us(), asked, answer))
        if isinstance(answer, FullResync):
            self._full_resync(link, connection, answer, last_load)
        else:
            self._continue(link, answer)
        report.replid = applier.replid
        report.received_offset = connection.offset
        report.durable_offset = applier.durable
        link.import_wait = None

    def _continue(self, link: Link, answer: Continue) -> None:
        link.report.partial_resyncs += 1
        self.report.continues += 1
        link.applier.continued(answer.replid, answer.previous_replid)
        link.applier.replid = answer.replid

    def _full_resync(
        self, link: Link, connection: ReplicaConnection, answer: FullResync, last_load: bool
    ) -> None:
        """Load the node's RDB: ``r`` rows into shards that hold nothing of this link, else
        the differences of the node's slots (moonish.redis.capture.apply)."""
        applier, started_us = link.applier, self.clock.now_us()
        link.report.full_resyncs += 1
        self.report.full_resyncs += 1
        before = _resync_counts(applier)
        first, self.first_load = self.first_load, False
        applier.full_resync(
            answer.replid,
            answer.offset,
            answer.payload,
            connection.path,
            snapshot_first=first,
            snapshot_last=last_load,
        )
        connection.ack(answer.offset)
        diff = [now - was for now, was in zip(_resync_counts(applier), before, strict=True)]
        now = self.clock.now_us()
        outcome = FullResyncOutcome(
            now,
            answer.replid,
            answer.offset,
            connection.rdb_bytes,
            (now - started_us) / 1e6,
            *diff,
        )
        self.report.last_full_resync = outcome
        self._event(link, full_resync_event(outcome))

    def _read(self, link: Link, connection: ReplicaConnection) -> None:
        """A link's reader thread: its batches into the queue until told to stop, or its
        error (the capture's thread handles it)."""
        wait_ms = self.options.batch_wait_ms
        try:
            while link.reading.is_set():
                batch = connection.read_batch(wait_ms)
                if batch:
                    self._put(link, batch)
        except BaseException as exc:
            self._put(link, exc)

    def _put(self, link: Link, item: list[ReplCommand] | BaseException) -> None:
        while link.reading.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put((link, item), timeout=0.1)
                return

    def _step(self, stop: threading.Event, progress: Progress | None) -> None:
        """Take what arrived (waiting up to ``batch_wait_ms`` when nothing is pending, a
        moment when a barrier holds something), apply what the order lets through
        (moonish.redis.cluster.order), then sync, acknowledge, mark, reconnect links that are
        due and write the status."""
        wait_s = 0.005 if self.order.has_pending() else self.options.batch_wait_ms / 1000
        self._pump(wait_s)
        now = self.clock.now_us()
        for each in self.links:
            applier = each.applier
            applier.tick()
            if each.connection is not None and applier.durable > each.connection.durable_offset:
                each.connection.ack(applier.durable)
                each.report.durable_offset = applier.durable
            if each.connection is None and now >= each.retry_at_us and not stop.is_set():
                self._try_connect(each)
        if now - self._topology_us >= TOPOLOGY_INTERVAL_MS * 1000 and not stop.is_set():
            self._watch_topology()
        self._status(progress)

    def _pump(self, wait_s: float) -> None:
        """Take what the readers queued (waiting up to ``wait_s`` for the first), then apply
        every command the order lets through."""
        try:
            first = self._queue.get(timeout=wait_s)
        except queue.Empty:
            pass
        else:
            self._take(*first)
            while True:
                try:
                    self._take(*self._queue.get_nowait())
                except queue.Empty:
                    break
        applied = True
        while applied:
            applied = False
            for link in self.links:
                chunk = self.order.ready(link)
                if chunk and link.connection is not None:
                    link.applier.apply_batch(chunk, link.connection.path)
                    applied = True
        while self.order.slot_imports:
            stream = self.order.slot_imports.pop(0)
            for link in self.links:
                if link.link_id == stream.link_id:
                    self._leave_for_import(link)

    def _catch_up(self, link: Link) -> None:
        """Before ``link`` asks for its stream: apply every other link up to what its node
        had written now, so a full resync's RDB (taken after) never holds a write another
        link has yet to apply (a key that migrated to this node). Waits up to
        :data:`CATCH_UP_MAX_MS` (a lost link does not come back meanwhile)."""
        if not any(other is not link and other.connected for other in self.links):
            return
        offsets = self.order.offsets_now(link)
        others = {other.link_id: other for other in self.links}
        deadline = self.clock.now_us() + CATCH_UP_MAX_MS * 1000
        while self.clock.now_us() < deadline and any(
            others[link_id].connected and others[link_id].applied < offset
            for link_id, offset in offsets.items()
        ):
            self._pump(0.005)

    def _take(self, link: Link, item: list[ReplCommand] | BaseException) -> None:
        """A reader's batch (queued behind the link's pending commands) or error."""
        if isinstance(item, UnavailableError) and link.connection is not None:
            if item.path != link.connection.path:
                raise item
            self._drop(link)
            self._lost(link, item)
        elif isinstance(item, BaseException):
            raise item
        elif link.connection is not None and link.reading.is_set():
            self.order.received(link, item)
            link.report.received_offset = item[-1].end_offset

    def _drop(self, link: Link) -> None:
        """Stop ``link``'s reader and close its connection; what it applied is synced."""
        link.reading.clear()
        if link.reader is not None:
            link.reader.join()
            link.reader = None
        if link.connection is not None:
            link.connection.close()
            link.connection = None
        self._discard_queued(link)
        self.order.drop(link)
        link.applier.disconnected()

    def _discard_queued(self, link: Link) -> None:
        """Batches of ``link`` still queued came after what its applier applied: the next
        ``PSYNC`` asks for them again."""
        kept = []
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item[0] is not link:
                kept.append(item)
        for item in kept:
            self._queue.put(item)

    def _lost(self, link: Link, exc: UnavailableError) -> None:
        options = self.options
        link.failures += 1
        link.report.reconnects += 1
        self.report.reconnects += 1
        link.report.last_error = self.report.last_error = str(exc)
        link.report.state = RECONNECTING
        if options.max_reconnects is not None and link.failures > options.max_reconnects:
            raise exc
        backoff = link.backoff_ms * 2 if link.backoff_ms else options.backoff_min_ms
        link.backoff_ms = min(backoff, options.backoff_max_ms)
        link.retry_at_us = self.clock.now_us() + link.backoff_ms * 1000
        self._event(
            link, reconnect_event(self.clock.now_us(), str(exc), link.failures, link.backoff_ms)
        )

    def _finish(self) -> None:
        """Stopping: every link's shards store its applied position, synced and
        acknowledged."""
        self._stop_readers()
        for link in self.links:
            link.applier.finish()
            connection = link.connection
            if connection is not None and link.applier.replid:
                connection.ack(link.applier.applied)
                with contextlib.suppress(UnavailableError):
                    connection.send_ack()
            link.report.durable_offset = link.applier.applied
            link.report.state = STOPPED
        self.report.link = STOPPED
        self._count()
        self._measure()
        self._publish(self.clock.now_us(), running=False)
        self._halt()

    def _stop_readers(self) -> None:
        """Tell every reader thread to stop, then wait for each (at most ``batch_wait_ms``)."""
        for link in self.links:
            link.reading.clear()
        for link in self.links:
            if link.reader is not None:
                link.reader.join()
                link.reader = None

    def _halt(self) -> None:
        """Stop the readers and close every connection and side connection."""
        self._stop_readers()
        self.order.close()
        for link in self.links:
            if link.connection is not None:
                link.connection.close()
                link.connection = None
            if link.watch is not None:
                link.watch.close()
                link.watch = None

    # -- status -------------------------------------------------------------------------

    def _noted(self, stream: Stream, text: str) -> None:
        """What the order tells of ``stream``'s commands, as a ``source`` event."""
        for link in self.links:
            if link.link_id == stream.link_id:
                now = self.clock.now_us()
                self._event(link, source_event(now, text, link.report.address))

    def _event(self, link: Link, event: CaptureEvent) -> None:
        if self.on_event is not None:
            report = link.report
            fields = {**event.fields, "link": report.link, "node": report.address}
            text = f"link {report.link[:8]} ({report.address}): {event.text}"
            self.on_event(CaptureEvent(event.kind, event.time_us, text, fields))

    def _measure(self) -> None:
        """Each link against its node, and the capture's sums (moonish.redis.cluster.links
        ``measure``)."""
        measure(self.report, self.links, self.clock.now_us())
        self.report.migrations = dict(sorted(self.handoffs.totals().items()))

    def _count(self) -> None:
        counts = [link.applier.counts for link in self.links]
        commands = sum(c.commands for c in counts)
        tally(self.report, counts, commands, sum(c.transactions for c in counts))


def _resync_counts(applier: LinkApplier) -> tuple[int, int, int, int]:
    """Keys full resyncs wrote so far: (``r`` rows, ``c``, ``u``, ``d``)."""
    counts = applier.counts
    rows = counts.rdb_keys - counts.created - counts.updated
    return rows, counts.created, counts.updated, counts.removed_keys
