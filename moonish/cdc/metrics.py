"""A data directory's figures as Prometheus metrics, read at scrape time: each shard's WAL
(bytes, segments, records, the newest commit), the change events appended since the collector
began, by op, and each named consumer's lag (moonish.cdc.lag).

:class:`DataDirCollector` is registered by the process serving ``/metrics``
(moonish.metrics.http): a command with ``--metrics-port`` or ``moonish run``'s supervisor. It
reads files only, so any process can serve it beside the one writing the log.

Events by op (Debezium's TotalNumberOfCreate/Update/DeleteEventsSeen): each shard is tailed
from where its log ended when the collector was made (a shard made since, such as a first
capture's, from its first record), and each new record counted by the op its
envelope has (moonish.cdc.events: a kv_change's own ``c``/``u``/``d``/``r``; plain kv records by
their command; checkpoints, messages and position markers are no events). A scrape reads at
most :data:`MAX_RECORDS_PER_SCRAPE` records per shard and counts the rest at the next one. If
retention removes records before they were counted, the count goes on from the oldest retained
record (the counter misses those: it never counts a record twice).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

from moonish.cdc.envelope import is_change
from moonish.cdc.events import op_of
from moonish.cdc.lag import lag_table
from moonish.cdc.positions import data_shards
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError, LsnNotRetainedError
from moonish.log.format import RecordType
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader
from moonish.log.segment import list_segments, segment_path
from moonish.metrics.collect import CounterMetricFamily, GaugeMetricFamily
from moonish.state.config import load_config

MAX_RECORDS_PER_SCRAPE = 1_000_000
"""Records one scrape counts per shard at most (the rest at the next scrape)."""
_POLL = 4096


class _EventCount:
    """One shard's tail and its counts by op: from ``start`` (an LSN), or from the end."""

    def __init__(self, shard_dir: str, start: int | None = None) -> None:
        self.reader = ShardReader(shard_dir)
        if start is None:
            self.reader.seek_end()
        else:
            try:
                self.reader.seek(start)
            except LsnNotRetainedError as error:
                self.reader.seek(error.oldest_lsn)
        self.ops: dict[str, int] = {}
        self.last_commit_us: int | None = None

    def advance(self) -> None:
        """Count the records appended since the last call (up to the bound).

        Raises:
            CorruptionError: damage in the shard's log where it is read.
        """
        reader, ops, read = self.reader, self.ops, 0
        while read < MAX_RECORDS_PER_SCRAPE:
            try:
                frames = reader.poll(_POLL)
            except LsnNotRetainedError as error:  # removed before it was counted
                reader.seek(error.oldest_lsn)
                continue
            if not frames:
                return
            read += len(frames)
            for frame in frames:
                kind, payload = frame.record_type, frame.payload
                if not is_change(kind, payload):
                    continue
                if kind == RecordType.KV_CHANGE:
                    op = chr(payload[0])
                else:
                    op = op_of(decode_payload(kind, payload))
                ops[op] = ops.get(op, 0) + 1
            self.last_commit_us = frames[-1].commit_us


class DataDirCollector:
    """The collector of ``data_dir``'s figures (see the module docstring).

    Args:
        data_dir: a data directory (or a shard directory). Before it holds its shards (a
            capture that has not started) the collector gives none of its families' samples.
        clock: the consumers' lag ages are measured against it.
        consumers: whether to read the consumers' lag (a scrape then costs
            moonish.cdc.lag's reads).

    Raises (from ``collect``, so from a scrape):
        CorruptionError: damage where a shard's log or a consumer's file is read.
    """

    def __init__(
        self, data_dir: str | os.PathLike[str], clock: Clock = SYSTEM_CLOCK, consumers: bool = True
    ) -> None:
        self.data_dir = os.fspath(data_dir)
        self.clock, self.consumers = clock, consumers
        self._lock = threading.Lock()
        self._counts: dict[str, _EventCount] = {}
        try:  # the shards there now are counted from their end
            for shard_dir in data_shards(self.data_dir):
                self._counts[shard_dir] = _EventCount(shard_dir)
        except InvalidArgumentError:
            pass  # none yet: each is counted from its first record

    def describe(self) -> list[Any]:
        """Nothing: the families depend on the directory (not checked at registration)."""
        return []

    def collect(self) -> Iterator[Any]:
        """The families, read now."""
        try:
            shard_dirs = data_shards(self.data_dir)
        except InvalidArgumentError:
            return  # no shards yet
        with self._lock:
            yield from self._wal(shard_dirs)
            if self.consumers:
                yield from self._consumers()

    def _wal(self, shard_dirs: list[str]) -> Iterator[Any]:
        wal_bytes = GaugeMetricFamily(
            "moonish_wal_bytes", "Bytes of the shard's WAL segments on disk.", labels=["shard"]
        )
        segments = GaugeMetricFamily(
            "moonish_wal_segments", "WAL segments the shard holds.", labels=["shard"]
        )
        records = CounterMetricFamily(
            "moonish_wal_records",
            "Records appended to the shard's log since it was created (its last LSN: LSNs "
            "are dense from 1).",
            labels=["shard"],
        )
        retained = GaugeMetricFamily(
            "moonish_wal_retained_records",
            "Records the shard's log still holds (retention removed the rest).",
            labels=["shard"],
        )
        pinned = GaugeMetricFamily(
            "moonish_retention_max_pinned_bytes",
            "The shard's retention bound on what consumers may hold (max_pinned_bytes); "
            "absent when it has none.",
            labels=["shard"],
        )
        events = CounterMetricFamily(
            "moonish_events",
            "Change events appended to the shard's log since this endpoint started, by "
            "Debezium op (c, u, d, r, t).",
            labels=["shard", "op"],
        )
        last = GaugeMetricFamily(
            "moonish_wal_last_commit_timestamp_seconds",
            "Commit time of the newest change event counted (Unix time, seconds); absent "
            "until one is.",
            labels=["shard"],
        )
        for number, shard_dir in enumerate(shard_dirs):
            shard = str(number)
            bases = list_segments(shard_dir)
            sizes = [_size(segment_path(shard_dir, base)) for base in bases]
            wal_bytes.add_metric([shard], sum(sizes))
            segments.add_metric([shard], len(bases))
            count = self._counts.get(shard_dir)
            if count is None:
                count = self._counts[shard_dir] = _EventCount(shard_dir, start=1)
            count.advance()
            latest = count.reader.next_lsn - 1
            records.add_metric([shard], latest)
            retained.add_metric([shard], latest - bases[0] + 1 if bases else 0)
            for op in sorted(count.ops):
                events.add_metric([shard, op], count.ops[op])
            if count.last_commit_us is not None:
                last.add_metric([shard], count.last_commit_us / 1e6)
            config = load_config(shard_dir)
            bound = None if config is None else config.retention.max_pinned_bytes
            if bound is not None:
                pinned.add_metric([shard], bound)
        yield from (wal_bytes, segments, records, retained, pinned, events, last)

    def _consumers(self) -> Iterator[Any]:
        labels = ["consumer", "shard"]
        lag_records = GaugeMetricFamily(
            "moonish_consumer_lag_records",
            "Changes after the consumer's confirmed position (moonish consumer list).",
            labels=labels,
        )
        lag_bytes = GaugeMetricFamily(
            "moonish_consumer_lag_bytes",
            "WAL bytes from the consumer's next change to the end of the log: what it pins.",
            labels=labels,
        )
        lag_seconds = GaugeMetricFamily(
            "moonish_consumer_lag_seconds",
            "Age of the consumer's oldest unconfirmed change (0 when it has confirmed all).",
            labels=labels,
        )
        lost = GaugeMetricFamily(
            "moonish_consumer_lost",
            "Whether the consumer is lost (1): retention removed changes it had not confirmed.",
            labels=["consumer"],
        )
        for entry in lag_table(self.data_dir, clock=self.clock):
            name = entry.consumer.name
            lost.add_metric([name], 1 if any(s.status == "lost" for s in entry.shards) else 0)
            for shard in entry.shards:
                key = [name, str(shard.shard)]
                lag_records.add_metric(key, shard.lag_records)
                lag_bytes.add_metric(key, shard.lag_bytes)
                age_ms = shard.oldest_unconfirmed_age_ms
                lag_seconds.add_metric(key, 0 if age_ms is None else age_ms / 1000)
        yield from (lag_records, lag_bytes, lag_seconds, lost)

    def close(self) -> None:
        """Close the shards' readers."""
        with self._lock:
            for count in self._counts.values():
                count.reader.close()
            self._counts.clear()


def _size(path: str) -> int:
    try:
        return os.path.getsize(path)
    except FileNotFoundError:  # removed by retention since it was listed
        return 0
