"""The materialized table: the latest state of every key, kept exactly once in a Delta Lake
table from a change stream.

Spark computes each micro-batch's latest change per ``(db, key)`` (:func:`latest_changes`:
the highest ``(lsn, shard)``; a key lives in one shard, whose LSNs order its changes, and rows
arrive in any order) in a ``foreachBatch`` function; the driver collects those rows as Arrow
(one per changed key, so a micro-batch's size bounds the driver's memory), takes the images
apart (``moonish.spark.tablerows``) and applies them as one delta-rs MERGE committed with the
transaction identifier (query id, batch id) (``moonish.spark.delta``). Every
``optimize_every`` batches the table's small files are compacted.

Exactly once rests on three things: the sources are replayable (the same offsets read the same
rows), a batch already committed to the table is skipped by its transaction identifier, and
the MERGE keeps the newer change per key, so applying a change twice changes nothing either.

:func:`read_table` reads the table's current version in Spark (its Parquet files, which the
Delta log lists, read on the executors; it takes the caller's session and starts none);
``moonish spark show`` reads it without Spark (``moonish.spark.delta.first_rows``);
delta-spark, DuckDB, polars and pandas read it as a Delta table (docs/spark.md).

The table may be an ``s3://bucket/path`` URI, with ``storage_options`` and the AWS environment
variables (``moonish.spark.storage``); Spark's checkpoint directory stays a local (or shared)
directory, and the table is written by the driver alone, with delta-rs.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import orjson
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from moonish.errors import InvalidArgumentError
from moonish.spark import delta
from moonish.spark.progress import BatchGate
from moonish.spark.storage import is_object_store, table_uri
from moonish.spark.tablerows import merge_rows

DATA_OPS = ("c", "u", "d", "r")
DEFAULT_OPTIMIZE_EVERY = 100
TABLE_COLUMNS = (
    "db INT, key BINARY, key_text STRING, type STRING, value STRING, omitted_length BIGINT, "
    "field_expire_at_ms STRING, expire_at TIMESTAMP, shard INT, lsn BIGINT, "
    "commit_ts TIMESTAMP"
)
"""The columns :func:`read_table` gives (the table's, without the partition column
``bucket``), as a Spark DDL schema: ``moonish.spark.tablerows.DATA_COLUMNS``."""


def latest_changes(changes: DataFrame) -> DataFrame:
    """The latest data change per ``(db, key)`` of flat change rows (``CHANGE_COLUMNS``):
    ``db, key, shard, lsn, commit_ts, deleted, image`` (the after image's JSON text)."""
    rows = changes.where((F.col("record_type") == "kv_change") & F.col("op").isin(*DATA_OPS))
    order = Window.partitionBy("db", "key").orderBy(F.col("lsn").desc(), F.col("shard").desc())
    latest = rows.withColumn("_n", F.row_number().over(order)).where(F.col("_n") == 1)
    return latest.select(
        "db",
        "key",
        "shard",
        "lsn",
        "commit_ts",
        (F.col("op") == "d").alias("deleted"),
        F.col("after").alias("image"),
    )


def apply_batch(
    table: str,
    changes: DataFrame,
    app_id: str,
    batch_id: int,
    storage_options: Mapping[str, str] | None = None,
) -> delta.BatchResult:
    """Apply one micro-batch of flat change rows to the Delta table ``table`` (which must
    exist) as batch ``batch_id`` of ``app_id``; a batch committed before is skipped.

    Raises:
        InvalidArgumentError: no table at ``table``; or its storage is refused
            (``moonish.spark.delta.open_table``).
        UnsupportedFormatError: ``table`` is not a moonish Delta table.
        UnavailableError: the object store cannot be reached.
    """
    existing = delta.require_table(table, storage_options)
    done = delta.committed_batch(existing, app_id)
    if done is not None and done >= batch_id:  # skip before Spark computes anything
        return delta.BatchResult(False, existing.version(), {})
    rows = merge_rows(latest_changes(changes).toArrow(), delta.table_buckets(existing))
    return delta.merge_batch(table, rows, app_id, batch_id, storage_options)


def query_id(checkpoint_dir: str) -> str:
    """The id of the streaming query whose checkpoint is ``checkpoint_dir`` (Spark writes it
    to ``metadata`` when the query first starts and keeps it across restarts).

    Raises:
        InvalidArgumentError: no readable query id in the checkpoint.
    """
    path = os.path.join(checkpoint_dir, "metadata")
    try:
        with open(path, "rb") as file:
            return str(orjson.loads(file.readline())["id"])
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError) as error:
        raise InvalidArgumentError(
            f"no streaming query id in the checkpoint: {error}", path=path
        ) from error


def read_table(
    spark: SparkSession, table: str, storage_options: Mapping[str, str] | None = None
) -> DataFrame:
    """The table's current version: one row per live key (:data:`TABLE_COLUMNS`).

    A local table's Parquet files are read by Spark, on the executors. An ``s3://`` table's
    rows are read by delta-rs on the driver and handed to Spark (Spark has no S3 file system
    without the hadoop-aws jars), so the driver holds the whole version in memory.

    Raises:
        InvalidArgumentError: no Delta table at ``table`` (not a table, or nothing applied);
            a missing bucket, refused credentials or storage options.
        UnsupportedFormatError: a table of moonish's earlier own format, a Delta table moonish
            did not make, or one whose protocol needs more than reader version 1.
        UnavailableError: the object store cannot be reached.
    """
    existing = delta.require_table(table, storage_options)
    if is_object_store(table):
        rows = delta.current_rows(existing)
        if rows.num_rows == 0:
            return spark.createDataFrame([], TABLE_COLUMNS)
        return spark.createDataFrame(rows, TABLE_COLUMNS)
    files = delta.readable_files(existing)
    if not files:
        return spark.createDataFrame([], TABLE_COLUMNS)
    return spark.read.schema(TABLE_COLUMNS).parquet(*files)


def materialize(
    changes: DataFrame,
    table: str,
    checkpoint_dir: str,
    *,
    available_now: bool = True,
    processing_time_ms: int = 1000,
    gate: BatchGate | None = None,
    buckets: int = delta.DEFAULT_BUCKETS,
    optimize_every: int = DEFAULT_OPTIMIZE_EVERY,
    on_applied: Callable[[int, delta.BatchResult], None] | None = None,
    storage_options: Mapping[str, str] | None = None,
) -> StreamingQuery:
    """Start a streaming query that keeps the Delta table ``table`` at the latest state per key.

    Args:
        changes: a streaming DataFrame of flat change rows (the ``moonish`` data source or
            :func:`moonish.spark.files.read_envelope_files`).
        table: the Delta table: a local directory or an ``s3://bucket/path`` URI (created
            with ``buckets`` buckets if missing; an S3 bucket must exist).
        checkpoint_dir: Spark's checkpoint of this query (offsets, commits, the query id
            that identifies its commits to the table), a local or shared directory.
        available_now: process what is there now, then stop (``trigger(availableNow=True)``);
            otherwise run micro-batches every ``processing_time_ms`` until stopped.
        gate: run each micro-batch inside it, so that a stop can wait for the running one
            (moonish.spark.progress).
        buckets: the bucket count of a table this creates (docs/spark.md, "Layout and cost");
            an existing table keeps its own.
        optimize_every: compact the table's small files after every this many applied
            micro-batches (by batch id); 0: never.
        on_applied: called with each micro-batch's id and what :func:`apply_batch` did.
        storage_options: for an ``s3://`` table, delta-rs's storage options (``AWS_REGION``,
            ``AWS_ENDPOINT_URL``, ...), over the AWS environment variables
            (``moonish.spark.storage``).

    Returns:
        the started query; ``awaitTermination()`` waits for it.

    Raises:
        InvalidArgumentError: ``buckets`` below 1, or ``optimize_every`` below 0; a URI of
            another scheme than ``s3://``, storage options refused
            (``moonish.spark.storage.table_options``), a missing bucket, refused credentials.
        UnsupportedFormatError: ``table`` holds a table of moonish's earlier own format, or a
            Delta table moonish did not make.
        UnavailableError: the object store cannot be reached.
    """
    if optimize_every < 0:
        raise InvalidArgumentError(f"optimize_every must be 0 or more, not {optimize_every}")
    table = table_uri(table)
    if not is_object_store(table):
        os.makedirs(table, exist_ok=True)
    delta.create_table(table, buckets, storage_options)
    app_ids: list[str] = []

    def apply(batch: DataFrame, batch_id: int) -> None:
        if not app_ids:
            app_ids.append(query_id(checkpoint_dir))
        result = apply_batch(table, batch, app_ids[0], batch_id, storage_options)
        if result.applied and optimize_every and (batch_id + 1) % optimize_every == 0:
            delta.compact(table, storage_options)
        if on_applied is not None:
            on_applied(batch_id, result)

    def sink(batch: DataFrame, batch_id: int) -> None:
        if gate is None:
            apply(batch, batch_id)
            return
        with gate.batch(batch_id):
            apply(batch, batch_id)

    writer = changes.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint_dir)
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{processing_time_ms} milliseconds")
    return writer.start()
