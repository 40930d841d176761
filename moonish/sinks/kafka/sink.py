"""moonish changes into Kafka as Debezium puts them there: ``moonish cdc kafka``.

Topics (``P`` is the topic prefix, by default the source name)::

    P.db<N>        change events of Redis database N (c, u, d, r; t from plain kv records),
                   a tombstone (same key, null value) after every d unless tombstones are off
    P.transaction  Debezium's BEGIN/END records around each atomic batch, key {"id": ...}
    P.message      non-data records (op "m": checkpoints, ...), key {"prefix": ...}; optional
    P.offsets      the sink's positions (compacted, one partition; moonish.sinks.kafka.offsets)

Every data, transaction and message topic has one partition per shard, and a shard's records
go to the partition of its number, so each partition holds its shard's records in LSN order.
Record key of a change: ``{"db", "key", "key_encoding"}``; value: the envelope (payload-only,
or Connect's ``schemas.enable=true`` form, moonish.sinks.kafka.schema); headers
``moonish.shard`` and ``moonish.lsn`` (ASCII decimal); timestamp: the commit time (ms).

Delivery:

- **exactly-once** (default): one transactional producer per shard (``transactional.id``
  derived from the sink name, the data directory and the shard). A transaction holds whole
  polls of the shard's log (never part of an atomic batch), their tombstones and BEGIN/END
  records, and the shard's new position in ``P.offsets``. A start fences every earlier
  instance (``init_transactions``), reads the positions ``read_committed`` and resumes after
  them. Consumers reading ``read_committed`` see each change once.
- **at-least-once**: one idempotent producer per shard; a position moves only after every
  delivery report of the records up to it came back. After a crash, records after the last
  stored position are sent again: whole records, which consumers drop by
  ``(source.shard, source.lsn)``.

Either way the sink can be a named consumer of the data directory, moved to its stored
positions at start and as they advance (at most once a second, and once more when it goes
idle), so retention never removes what it has not delivered. Records that send nothing
(position markers, and checkpoints and messages when ``messages`` is off) move the position
too: a shard whose log holds no more changes has its position stored up to the end of its
log (at most every :data:`PASS_OVER_MS`), so an idle sink that delivered everything holds no
segment and shows no lag.
docs/kafka.md has the details, the guarantees and what they rest on.

Options and stats are moonish.sinks.kafka.options (re-exported here).

Example::

    from moonish.sinks.kafka.sink import KafkaOptions, KafkaSink

    with KafkaSink("data", KafkaOptions("localhost:9092", consumer="kafka-moonish")) as sink:
        stats = sink.run()          # until the end of every shard's log
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException, Producer

from moonish.cdc.events import EventBatch
from moonish.cdc.follow import ChangeSignal
from moonish.cdc.positions import data_shards
from moonish.cdc.shard_read import Tail
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.datadir import consumers
from moonish.errors import MoonishError
from moonish.sinks.kafka.metrics import SinkMetrics
from moonish.sinks.kafka.offsets import (
    BrokerUnavailableError,
    DeliveryError,
    SinkFencedError,
    marker_key,
    new_marker,
    offset_key,
    offset_value,
    read_positions,
)
from moonish.sinks.kafka.options import (
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    TOPIC_PREFIX,
    KafkaOptions,
    KafkaStats,
)
from moonish.sinks.kafka.records import RecordMaker, Topics
from moonish.sinks.kafka.shards import Pending, SinkShard

PASS_OVER_MS = 1000
"""A shard whose log has only records that send nothing after its position stores the
position past them at most this often (a transaction of only its offset, exactly-once)."""
ACK_MS = 1000
"""The named consumer is moved to the stored positions at most this often (and at the end)."""


class KafkaSink:
    """Sends every shard of ``data_dir`` to Kafka (see the module docstring).

    Args:
        data_dir: a data directory (``shard-<k>``) or one shard's directory.
        options: where and how.
        clock: the envelopes' processing time.
        progress: called with the stats after each step that moved a position (at most
            every ``progress_ms``) and at the end of :meth:`run`.

    Raises (from :meth:`run`):
        BrokerUnavailableError: the cluster cannot be reached (without ``follow``; following,
            the sink retries with backoff until :meth:`stop`).
        SinkFencedError: another instance of the sink started (exactly-once).
        DeliveryError: the broker refused a record (at-least-once).
        InvalidArgumentError: the stored positions are another data directory's; a topic has
            fewer partitions than shards; not a data directory.
        ConsumerLostError, PositionNotRetainedError, LsnNotRetainedError: the log no longer
            holds what the sink has not delivered.
        CorruptionError: damage in a shard's log, once every record before it is delivered.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        options: KafkaOptions,
        clock: Clock = SYSTEM_CLOCK,
        progress: Callable[[KafkaStats], None] | None = None,
        progress_ms: int = 1000,
    ) -> None:
        self.options = options
        self.data_dir = os.fspath(data_dir)
        self.source = os.path.realpath(self.data_dir)
        self._paths = data_shards(self.data_dir)
        self._clock, self._progress, self._progress_ms = clock, progress, progress_ms
        self._config = {
            "bootstrap.servers": options.bootstrap_servers,
            "log_level": 3,
            **options.client_config,
        }
        self._shards: list[SinkShard] = []
        self._signal: ChangeSignal | None = None
        self._stop = threading.Event()
        self._started = False
        self._acked_at = 0.0
        self._acked: list[int] | None = None  # the positions the consumer was moved to
        self._reported_at = 0.0
        self._reported: tuple[int, int, dict[int, int]] | None = None  # what was reported
        self.stats = KafkaStats()
        self.metrics = SinkMetrics(options.sink_name)
        prefix = options.prefix
        self.topics = Topics(
            self._config, prefix, len(self._paths), options.replication_factor, options.timeout_ms
        )
        self._records = RecordMaker(
            self.topics,
            options.schemas,
            options.tombstones,
            options.messages,
            options.routes,
            options.include_keys,
            options.exclude_keys,
        )

    # -- start -----------------------------------------------------------------------------

    def start(self) -> None:
        """Connect: make the topics and producers (fencing earlier instances), read the stored
        positions and register the named consumer. :meth:`run` starts the sink when it has not
        started; call this first to know that the broker is there (or to time the start).

        Raises:
            BrokerUnavailableError, SinkFencedError, InvalidArgumentError: as :meth:`run`.
        """
        opts = self.options
        self.topics.check_reachable()
        self.topics.ensure_static()
        digest = hashlib.sha256(self.source.encode()).hexdigest()[:12]
        for index, path in enumerate(self._paths):
            config = {
                **self._config,
                "enable.idempotence": True,
                "linger.ms": 5,
                "compression.type": "lz4",
            }
            txn_id = f"{opts.sink_name}.{digest}.shard-{index}"
            if opts.delivery == EXACTLY_ONCE:
                config["transactional.id"] = txn_id
            producer = Producer(config)
            self._shards.append(SinkShard(index, path, producer, txn_id))
            if opts.delivery == EXACTLY_ONCE:
                self._broker_call(producer.init_transactions, opts.timeout_ms / 1000)
        marker = new_marker()
        first = self._shards[0].producer
        key = marker_key(opts.sink_name, opts.prefix)
        if opts.delivery == EXACTLY_ONCE:
            first.begin_transaction()
            first.produce(self.topics.offsets, marker, key, partition=0)
            self._commit(self._shards[0])
        else:
            first.produce(self.topics.offsets, marker, key, partition=0)
            self._flush(self._shards[0])
        stored = read_positions(
            self._config,
            self.topics.offsets,
            opts.sink_name,
            opts.prefix,
            marker,
            self.source,
            len(self._paths),
            opts.timeout_ms,
        )
        for shard in self._shards:
            shard.position = stored.get(shard.index, 0)
            shard.tail = Tail(  # messages are read: they go to <prefix>.message (or nowhere)
                shard.path,
                shard.position + 1,
                name=opts.name,
                clock=self._clock,
                transactions=True,
                messages=True,
            )
        if opts.consumer is not None:  # the topic is the truth: the consumer follows it
            consumers.register_sink(
                self.data_dir, opts.consumer, self.positions, owner="kafka", authoritative=True
            )
        self.stats.positions = dict(enumerate(self.positions))
        self._started = True

    def _broker_call(self, call: Callable[[float], object], timeout_s: float) -> None:
        try:
            call(timeout_s)
        except KafkaException as error:
            raise BrokerUnavailableError(
                str(error.args[0]), self.options.bootstrap_servers
            ) from None

    @property
    def positions(self) -> list[int]:
        """Each shard's stored position: the last LSN delivered for good (0: none)."""
        return [shard.position for shard in self._shards]

    # -- the loop --------------------------------------------------------------------------

    def run(self, follow: bool = False) -> KafkaStats:
        """Send until every shard's log is exhausted (or, with ``follow``, until :meth:`stop`).

        With ``follow``, a broker that cannot be reached (at start, or later: a step that times
        out) is retried with backoff, 0.5 s doubling to 30 s: the clients are made anew and
        the sink resumes from the positions stored in Kafka, as a restart would.

        Returns:
            the stats of this sink so far (events, Kafka records and positions).

        Raises:
            see the class docstring.
        """
        backoff_s = 0.5
        while not self._stop.is_set():
            try:
                if not self._started:
                    self.start()
                    backoff_s = 0.5
                self._loop(follow)
                break
            except BrokerUnavailableError:
                self._close_clients()
                if not follow or self._stop.is_set():
                    raise
                self._stop.wait(backoff_s)  # the broker may come back: retry, each wait longer
                backoff_s = min(backoff_s * 2, 30.0)
        self._report(force=True)
        return self.stats

    def _loop(self, follow: bool) -> None:
        if follow and self._signal is None:
            self._signal = ChangeSignal(self._paths, self.options.poll_ms)
        while not self._stop.is_set():
            if self._signal is not None:
                self._signal.clear()
            sent = [self._pump(shard) for shard in self._shards]
            self._ack()
            self._report()
            if all(at_end for _, at_end in sent):
                if not follow:
                    break
                if not any(count for count, _ in sent) and self._signal is not None:
                    self._signal.wait(self.options.poll_ms if self._unsettled() else None)
        for shard in self._shards:
            self._flush(shard)
            self._pass_over(shard, force=True)
        self._ack(force=True)

    def _unsettled(self) -> bool:
        """Whether something is still to do without a new record: deliveries to await, a
        position to store past records that send nothing, a consumer to move, a report."""
        return (
            any(shard.pending or shard.read_to > shard.position for shard in self._shards)
            or (self.options.consumer is not None and self._acked != self.positions)
            or (
                self._progress is not None
                and self._reported
                != (self.stats.events, self.stats.messages, dict(enumerate(self.positions)))
            )
        )

    def _pump(self, shard: SinkShard) -> tuple[int, bool]:
        """Read up to a transaction's worth of the shard's log and send it; returns how many
        log records were sent and whether the end of the log was reached."""
        assert shard.tail is not None
        batches: list[EventBatch] = []
        records, at_end, damage = 0, True, None
        try:
            for batch in shard.tail.batches():
                batches.append(batch)
                records += len(batch)
                if records >= self.options.max_transaction_records:
                    at_end = False
                    break
        except MoonishError as error:
            damage = error  # what came before it is sent first
        if batches:
            self._send(shard, batches, shard.tail.cursor.lsn - 1)
        else:
            if self.options.delivery == AT_LEAST_ONCE:
                shard.producer.poll(0)
                self._advance(shard)
            if damage is None:
                self._pass_over(shard)
        if damage is not None:
            raise damage
        return records, at_end

    def _send(self, shard: SinkShard, batches: list[EventBatch], last_lsn: int) -> None:
        producer, opts = shard.producer, self.options
        exactly_once = opts.delivery == EXACTLY_ONCE
        tracker = None if exactly_once else Pending(last_lsn, self.metrics.on_delivery)
        position = offset_value(last_lsn, self.source, len(self._shards))
        key = offset_key(opts.sink_name, opts.prefix, shard.index)
        count = 0
        try:
            if exactly_once:
                producer.begin_transaction()
            for batch in batches:
                count += self._records.produce(producer, shard.index, batch, tracker)
            if exactly_once:
                producer.produce(self.topics.offsets, position, key, partition=0)
        except KafkaException as exc:
            raise self._failure(shard, exc.args[0]) from None
        if exactly_once:
            committed = self._commit(shard)
            self.metrics.transaction(committed, count)
            if not committed:  # the tail was rewound: the records go again
                return
            shard.position = last_lsn
            self.stats.transactions += 1
        else:
            assert tracker is not None
            shard.pending.append(tracker)
            producer.poll(0)
            self._advance(shard)
        self.stats.events += sum(len(batch) for batch in batches)
        self.stats.messages += count
        self.stats.filtered = self._records.filtered
        self._ack()
        self._report()

    def _pass_over(self, shard: SinkShard, force: bool = False) -> None:
        """Store the position past records that sent nothing (the log's end holds no
        change), at most every :data:`PASS_OVER_MS` unless ``force``; at-least-once, once
        every delivery before them is reported."""
        last = shard.read_to
        now = time.monotonic()
        if last <= shard.position or shard.pending:
            return
        if not force and now - shard.passed_at < PASS_OVER_MS / 1000:
            return
        opts = self.options
        position = offset_value(last, self.source, len(self._shards))
        key = offset_key(opts.sink_name, opts.prefix, shard.index)
        producer = shard.producer
        try:
            if opts.delivery == EXACTLY_ONCE:
                producer.begin_transaction()
            producer.produce(self.topics.offsets, position, key, partition=0)
        except KafkaException as exc:
            raise self._failure(shard, exc.args[0]) from None
        if opts.delivery == EXACTLY_ONCE:
            committed = self._commit(shard)
            self.metrics.transaction(committed, 0)
            if not committed:  # the position was not stored: pass over again
                return
            self.stats.transactions += 1
        else:
            producer.poll(0)
        shard.position, shard.passed_at = last, now

    def _advance(self, shard: SinkShard) -> None:
        """At-least-once: move the position past every step whose reports all came back, and
        store it in the offsets topic (a hint for the next start: idempotent, not awaited)."""
        moved = False
        while shard.pending and shard.pending[0].remaining <= 0:
            done = shard.pending.popleft()
            if done.error:
                raise DeliveryError(shard.index, done.lsn, self.options.prefix, done.error)
            shard.position, moved = done.lsn, True
        if moved:
            opts = self.options
            shard.producer.produce(
                self.topics.offsets,
                offset_value(shard.position, self.source, len(self._shards)),
                offset_key(opts.sink_name, opts.prefix, shard.index),
                partition=0,
            )

    def _commit(self, shard: SinkShard) -> bool:
        """Commit the shard's transaction: retried while retriable; aborted (and the log read
        again from the stored position) when Kafka says so; fencing stops the sink. Whether
        it was committed (``False``: aborted)."""
        deadline = time.monotonic() + self.options.timeout_ms / 1000
        while True:
            try:
                shard.producer.commit_transaction(self.options.timeout_ms / 1000)
                return True
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.fatal():
                    raise self._failure(shard, error) from None
                if error.txn_requires_abort():
                    shard.producer.abort_transaction(self.options.timeout_ms / 1000)
                    assert shard.tail is not None
                    shard.tail.close()  # the records go again, in the next transaction
                    shard.tail = Tail(
                        shard.path,
                        shard.position + 1,
                        name=self.options.name,
                        clock=self._clock,
                        transactions=True,
                        messages=True,
                    )
                    return False
                if not error.retriable() or time.monotonic() > deadline:
                    raise BrokerUnavailableError(
                        str(error), self.options.bootstrap_servers
                    ) from None

    def _failure(self, shard: SinkShard, error: KafkaError) -> MoonishError:
        """The error that stops the sink for a producer's failure: fencing, or the broker."""
        if error.code() == KafkaError._FATAL:  # produce() says only "fatal": ask for which
            try:
                shard.producer.abort_transaction(1)
                self.metrics.aborted.inc()
            except KafkaException as exc:
                error = exc.args[0]
        fenced = (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)
        if error.code() in fenced or "fenced" in str(error).lower():
            return SinkFencedError(shard.index, shard.txn_id)
        return BrokerUnavailableError(str(error), self.options.bootstrap_servers)

    def _flush(self, shard: SinkShard) -> None:
        """At-least-once: wait for every delivery report, then move the position."""
        if self.options.delivery == EXACTLY_ONCE:
            return
        left = shard.producer.flush(self.options.timeout_ms / 1000)
        self._advance(shard)  # stores the position: flushed too, so the next start has it
        left += shard.producer.flush(self.options.timeout_ms / 1000)
        if left:
            raise BrokerUnavailableError(
                f"{left} records not delivered within {self.options.timeout_ms} ms",
                self.options.bootstrap_servers,
            )

    def _ack(self, force: bool = False) -> None:
        """Move the named consumer to the stored positions when they moved (at most every
        :data:`ACK_MS` unless ``force``)."""
        now = time.monotonic()
        if self.options.consumer is None or not self._started:
            return
        positions = self.positions
        if positions == self._acked:
            return
        if force or now - self._acked_at >= ACK_MS / 1000:
            consumers.ack(self.data_dir, self.options.consumer, positions)
            self._acked_at, self._acked = now, positions

    def _report(self, force: bool = False) -> None:
        """Call ``progress`` when the stats changed (at most every ``progress_ms`` unless
        ``force``)."""
        stats = self.stats
        stats.positions = dict(enumerate(self.positions))
        self.metrics.producers(shard.producer for shard in self._shards)
        now = time.monotonic()
        seen = (stats.events, stats.messages, stats.positions)
        if self._progress is None or (not force and seen == self._reported):
            return
        if force or now - self._reported_at >= self._progress_ms / 1000:
            self._progress(stats)
            self._reported_at, self._reported = now, seen

    # -- stop ------------------------------------------------------------------------------

    def stop(self) -> None:
        """End a running :meth:`run` after its current step (from a signal handler or another
        thread); what was sent is stored, the rest goes next time."""
        self._stop.set()
        if self._signal is not None:
            self._signal.wake()

    def _close_clients(self) -> None:
        for shard in self._shards:
            if shard.tail is not None:
                shard.tail.close()
        self._shards.clear()
        self._started = False

    def close(self) -> None:
        """Release the logs and the clients (a transaction left open is aborted by Kafka)."""
        self._stop.set()
        if self._signal is not None:
            self._signal.close()
        self._close_clients()

    def __enter__(self) -> KafkaSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = [
    "AT_LEAST_ONCE",
    "EXACTLY_ONCE",
    "TOPIC_PREFIX",
    "KafkaOptions",
    "KafkaSink",
    "KafkaStats",
]
