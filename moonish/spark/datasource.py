"""``spark.readStream.format("moonish").load(data_dir)``: a PySpark data source over the WAL.

PySpark's Python data source API (``pyspark.sql.datasource``, PySpark >= 4.2 for read limits).
Rows have the flat change schema (``moonish.spark.columns.CHANGE_COLUMNS``) and are built
from the binary records as Arrow record batches: no envelope JSON is written or parsed.

Offsets are a JSON map of per-shard cursors, ``{"<shard id>": <next LSN>}``; a micro-batch
from ``start`` to ``end`` holds, per shard, the LSNs ``[start, end)`` (half-open), one Spark
partition per shard with new records (split into ranges of ``recordsPerPartition``).
Shards that appear later start at LSN 1. Since the WAL keeps every record until retention
removes it and output depends only on ``(shard, LSN range)``, a micro-batch replayed after a
restart reads the same rows: exactly once with an idempotent sink (``moonish.spark.table``).

Options:

- ``path``: the data directory (``load(path)``) or one shard directory.
- ``maxRecordsPerTrigger``: most records per micro-batch, shared fairly among shards
  (``availableNow`` and ``once`` triggers run as many such batches as needed).
- ``startingOffsets``: ``earliest`` (LSN 1 of every shard; a shard whose LSN 1 was removed
  by retention fails with ``LsnNotRetainedError`` rather than skipping), ``latest``, or a JSON
  map as above. Used by a new query only; a restarted query resumes from its checkpoint.
- ``recordsPerPartition``: longest LSN range one task reads (default 500,000).
- ``consumer``: register the query as this named consumer of the data directory
  (``moonish.datadir.consumers``): created at the starting offsets if it does not exist, and
  acknowledged with each committed micro-batch's end offsets, so retention never removes what
  the query has not committed. A consumer marked ``lost`` fails the query
  (``ConsumerLostError``) until ``moonish consumer seek`` resets it.
- ``messages``: ``true`` to include checkpoints and message records (``op: "m"`` rows);
  by default they are left out, as every reader leaves them out (docs/envelopes.md).

- ``url`` (instead of a path): read a ``moonish serve`` server; offsets are then its tokens
  (moonish.spark.urlsource has that source's options).

Example::

    import moonish.spark
    moonish.spark.register(spark)
    changes = (spark.readStream.format("moonish")
               .option("maxRecordsPerTrigger", 100_000).load("data"))
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import orjson
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from moonish.datadir import consumers
from moonish.datadir.layout import shard_dirs
from moonish.errors import InvalidArgumentError, MoonishError, UnavailableError
from moonish.log.reader import ShardReader
from moonish.spark.columns import CHANGE_COLUMNS, change_batch

ROWS_PER_ARROW_BATCH = 8192
DEFAULT_RECORDS_PER_PARTITION = 500_000

Offsets = dict[str, int]


class ShardRange(InputPartition):
    """One task's work: LSNs ``[start_lsn, end_lsn)`` of the shard at ``path``."""

    def __init__(self, path: str, shard: int, start_lsn: int, end_lsn: int) -> None:
        self.path, self.shard, self.start_lsn, self.end_lsn = path, shard, start_lsn, end_lsn


def _shards(path: str) -> dict[str, tuple[str, int]]:
    """``{"<shard id>": (shard_dir, next_lsn)}`` of every shard under ``path`` (a data
    directory or one shard)."""
    from moonish.cdc.shard_read import shard_dirs

    found: dict[str, tuple[str, int]] = {}
    for shard_dir in shard_dirs(path):
        reader = ShardReader(shard_dir)
        try:
            reader.seek_end()
            if reader.shard_id is not None:
                found[str(reader.shard_id)] = (shard_dir, reader.next_lsn)
        finally:
            reader.close()
    return found


def _ranges(
    shards: dict[str, tuple[str, int]], start: Offsets, end: Offsets, per_partition: int
) -> list[ShardRange]:
    ranges = []
    for shard, (path, _) in sorted(shards.items(), key=lambda item: int(item[0])):
        first, stop = start.get(shard, 1), end.get(shard, 1)
        for lsn in range(first, stop, per_partition):
            ranges.append(ShardRange(path, int(shard), lsn, min(lsn + per_partition, stop)))
    return ranges


def read_range(part: ShardRange, messages: bool = False) -> Iterator[Any]:
    """The rows of one range as Arrow record batches of up to 8192 records, LSN order
    (checkpoints and message records only with ``messages``).

    Raises:
        LsnNotRetainedError: the range's first LSN was removed by retention.
        UnavailableError: the log ends before the range does (the shard was replaced).
        CorruptionError: damage inside the range.
    """
    reader = ShardReader(part.path)
    try:
        reader.seek(part.start_lsn)
        while reader.next_lsn < part.end_lsn:
            frames = reader.poll(min(ROWS_PER_ARROW_BATCH, part.end_lsn - reader.next_lsn))
            if not frames:
                raise UnavailableError(
                    f"the log ends at LSN {reader.next_lsn}, before the planned end "
                    f"{part.end_lsn}: the shard was replaced or truncated",
                    path=part.path,
                    lsn=reader.next_lsn,
                )
            batch = change_batch(part.shard, frames, part.path, messages)
            if batch.num_rows:
                yield batch
    finally:
        reader.close()


def _flag(text: str, name: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise InvalidArgumentError(f"option {name} is true or false, got {text!r}")
    return text.lower() == "true"


def _parse_offsets(text: str) -> Offsets:
    try:
        value = orjson.loads(text)
        return {str(int(shard)): int(lsn) for shard, lsn in value.items()}
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError) as error:
        raise InvalidArgumentError(
            f'startingOffsets must be earliest, latest or {{"<shard>": <lsn>}}: {error}'
        ) from None


class MoonishDataSource(DataSource):
    """The ``moonish`` format: batch and streaming reads of a data directory's WAL, or with
    the ``url`` option of a ``moonish serve`` server's (moonish.spark.urlsource)."""

    @classmethod
    def name(cls) -> str:
        return "moonish"

    def schema(self) -> str:
        return CHANGE_COLUMNS

    def reader(self, schema: StructType) -> DataSourceReader:
        if self.options.get("url"):
            from moonish.spark.urlsource import UrlBatchReader

            return UrlBatchReader(self.options)
        return MoonishBatchReader(self.options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self.options.get("url"):
            from moonish.spark.urlsource import UrlStreamReader

            return UrlStreamReader(self.options)
        return MoonishStreamReader(self.options)


class _Options:
    def __init__(self, options: Any) -> None:
        self.path = options.get("path")
        if not self.path:
            raise InvalidArgumentError(
                'the moonish source needs a path, .load("<data dir>"), or a server, '
                '.option("url", "http://host:8470")'
            )
        self.path = os.path.abspath(self.path)
        self.max_records = int(options.get("maxRecordsPerTrigger", 0)) or None
        self.per_partition = int(options.get("recordsPerPartition", DEFAULT_RECORDS_PER_PARTITION))
        self.starting = options.get("startingOffsets", "earliest")
        self.consumer = options.get("consumer") or None
        self.messages = _flag(options.get("messages", "false"), "messages")
        if self.per_partition < 1 or (self.max_records is not None and self.max_records < 1):
            raise InvalidArgumentError("maxRecordsPerTrigger and recordsPerPartition must be >= 1")

    def start(self, shards: dict[str, tuple[str, int]]) -> Offsets:
        if self.starting == "earliest":
            return {shard: 1 for shard in shards}
        if self.starting == "latest":
            return {shard: next_lsn for shard, (_, next_lsn) in shards.items()}
        return _parse_offsets(self.starting)


class MoonishBatchReader(DataSourceReader):
    """A batch read: every shard from ``startingOffsets`` to the end of its log as planned."""

    def __init__(self, options: Any) -> None:
        self.options = _Options(options)

    def partitions(self) -> Sequence[InputPartition]:
        shards = _shards(self.options.path)
        end = {shard: next_lsn for shard, (_, next_lsn) in shards.items()}
        return _ranges(shards, self.options.start(shards), end, self.options.per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ShardRange)
        return read_range(partition, self.options.messages)


class MoonishStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A streaming read (see the module docstring for offsets and options)."""

    def __init__(self, options: Any) -> None:
        self.options = _Options(options)
        self._target: Offsets | None = None  # set by availableNow: read no further
        if self.options.consumer is not None:  # pins the log from before the first batch
            shards = _shards(self.options.path)
            start = self.options.start(shards)
            positions = consumer_positions(self.options.path, start)
            consumers.register_sink(
                self.options.path,
                self.options.consumer,
                positions,
                owner="spark",
                authoritative=False,
            )

    def initialOffset(self) -> Offsets:
        return self.options.start(_shards(self.options.path))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_records)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._available()

    def _available(self) -> Offsets:
        return {shard: next_lsn for shard, (_, next_lsn) in _shards(self.options.path).items()}

    def latestOffset(self, start: Offsets, limit: ReadLimit) -> Offsets:
        latest = self._target if self._target is not None else self._available()
        end = {shard: max(lsn, start.get(shard, 1)) for shard, lsn in latest.items()}
        for shard, lsn in start.items():
            end.setdefault(shard, lsn)
        if isinstance(limit, ReadMaxRows):
            end = share(start, end, limit.max_rows)
        return end

    def reportLatestOffset(self) -> Offsets:
        return self._available()

    def partitions(self, start: Offsets, end: Offsets) -> Sequence[InputPartition]:
        return _ranges(_shards(self.options.path), start, end, self.options.per_partition)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, ShardRange)
        return read_range(partition, self.options.messages)

    def commit(self, end: Offsets) -> None:
        """Acknowledge ``end`` for the ``consumer`` option's named consumer (retention may
        then remove what the query has committed); without it, nothing to release. Spark
        commits a micro-batch's offsets to its source when it plans the next one (or at a
        restart), so the last batch of a query is acknowledged then; ``moonish spark
        materialize`` also acknowledges each batch as its progress is reported.

        Raises:
            ConsumerLostError: the consumer was marked ``lost`` (the query stops loudly).
        """
        if self.options.consumer is not None:
            positions = consumer_positions(self.options.path, end)
            consumers.ack(self.options.path, self.options.consumer, positions)


def consumer_positions(path: str, offsets: Offsets) -> list[int]:
    """Offsets (``{"<shard id>": <next LSN>}``) as a consumer's positions (last LSN read, per
    shard directory in token order); a shard the offsets do not name is at 0."""
    positions = []
    for shard_dir in shard_dirs(path):
        reader = ShardReader(shard_dir)
        try:
            reader.seek(0)
            shard = reader.shard_id
        except MoonishError:
            shard = None
        finally:
            reader.close()
        positions.append(max(0, offsets.get(str(shard), 1) - 1) if shard is not None else 0)
    return positions


def share(start: Offsets, end: Offsets, budget: int) -> Offsets:
    """``end`` cut so that at most ``budget`` records are read, shared fairly: every shard
    gets an equal share, and what a shard does not need goes to the others."""
    wanted = sorted((end[shard] - start.get(shard, 1), shard) for shard in end)
    cut = {}
    for i, (available, shard) in enumerate(wanted):
        take = min(available, budget // (len(wanted) - i))
        budget -= take
        cut[shard] = start.get(shard, 1) + take
    return cut
