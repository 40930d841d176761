"""The materialized table: the latest state of every key, kept exactly once from a change stream.

Layout of ``table_dir``:

- ``v-<batch id:020d>/``: one complete Parquet version of the table per applied micro-batch;
- ``_moonish_table.json``: ``{"format": "moonish-table", "version": 1, "batch_id": n,
  "path": "v-..."}``, replaced atomically after the version is written. It is the commit
  point: :func:`read_table` reads the version it names, so a batch reader always sees one
  whole version. The newest two versions are kept.

Row: ``db INT, key BINARY, type STRING, image STRING (the after image's JSON), expire_at_ms
BIGINT, shard INT, lsn BIGINT, commit_ts TIMESTAMP, deleted BOOLEAN``. A deleted key stays as
a row with ``deleted`` true and its LSN (a tombstone), so that a late change older than the
delete never brings it back; :func:`read_table` leaves tombstones out.

Exactly once: each micro-batch is applied as ``new version = latest row per (db, key) of
(previous version + the batch's changes)``, where "latest" is the highest ``(lsn, shard)`` (a
key lives in one shard, whose LSNs order its changes). Applying the same changes twice gives
the same table; and a micro-batch Spark replays after a crash (the sink wrote, Spark had not
committed) finds its ``batch_id`` already committed and is skipped. Each version rewrites the
whole table (copy-on-write): fine for tables of millions of keys, not for billions.
"""

from __future__ import annotations

import os
import shutil
from typing import Any

import orjson
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from moonish.errors import InvalidArgumentError, UnsupportedFormatError
from moonish.fileio import replace_atomically
from moonish.spark.progress import BatchGate

POINTER_NAME = "_moonish_table.json"
POINTER_FORMAT, POINTER_VERSION = "moonish-table", 1
TABLE_COLUMNS = (
    "db INT, key BINARY, type STRING, image STRING, expire_at_ms BIGINT, shard INT, "
    "lsn BIGINT, commit_ts TIMESTAMP, deleted BOOLEAN"
)
KEEP_VERSIONS = 2
DATA_OPS = ("c", "u", "d", "r")


def current_version(table_dir: str) -> dict[str, Any] | None:
    """The committed version's pointer, or None for a table never written.

    Raises:
        UnsupportedFormatError: the pointer file is not a moonish table pointer.
    """
    path = os.path.join(table_dir, POINTER_NAME)
    try:
        with open(path, "rb") as file:
            pointer = orjson.loads(file.read())
    except FileNotFoundError:
        return None
    except orjson.JSONDecodeError as error:
        raise UnsupportedFormatError(f"table pointer is not JSON: {error}", path=path) from error
    if pointer.get("format") != POINTER_FORMAT or pointer.get("version") != POINTER_VERSION:
        raise UnsupportedFormatError(
            f"not a {POINTER_FORMAT} version {POINTER_VERSION} pointer", path=path
        )
    return dict(pointer)


def require_version(table_dir: str) -> dict[str, Any]:
    """The committed version's pointer of ``table_dir``, which must have one.

    Raises:
        InvalidArgumentError: ``table_dir`` holds no pointer: it is not a materialized table,
            or no micro-batch was applied to it yet.
        UnsupportedFormatError: the pointer file is not a moonish table pointer.
    """
    pointer = current_version(table_dir)
    if pointer is None:
        raise InvalidArgumentError(
            f"not a materialized table: no {POINTER_NAME} (not a table directory, or no "
            "micro-batch was applied to it yet: moonish spark materialize)",
            path=table_dir,
        )
    return pointer


def read_table(spark: SparkSession, table_dir: str, *, tombstones: bool = False) -> DataFrame:
    """The committed version of the table (live keys; with ``tombstones``, deleted ones too).

    An empty DataFrame of the table's schema when nothing was applied yet.
    """
    pointer = current_version(table_dir)
    if pointer is None:
        return spark.createDataFrame([], TABLE_COLUMNS)
    table = spark.read.schema(TABLE_COLUMNS).parquet(os.path.join(table_dir, pointer["path"]))
    return table if tombstones else table.where(~F.col("deleted"))


def _latest(rows: DataFrame) -> DataFrame:
    """The latest row per ``(db, key)``; ``type`` and ``expire_at_ms`` of new rows are read
    from their image only here, once per surviving row rather than once per change."""
    order = Window.partitionBy("db", "key").orderBy(F.col("lsn").desc(), F.col("shard").desc())
    latest = rows.withColumn("_n", F.row_number().over(order)).where(F.col("_n") == 1)
    return latest.select(
        "db",
        "key",
        F.coalesce("type", F.get_json_object("image", "$.type")).alias("type"),
        "image",
        F.coalesce(
            "expire_at_ms", F.get_json_object("image", "$.expire_at_ms").cast("bigint")
        ).alias("expire_at_ms"),
        "shard",
        "lsn",
        "commit_ts",
        "deleted",
    )


def table_rows(changes: DataFrame) -> DataFrame:
    """Flat change rows (``CHANGE_COLUMNS``) of data changes as table rows, ``type`` and
    ``expire_at_ms`` left null for :func:`_latest` to fill from the image."""
    return changes.where(
        (F.col("record_type") == "kv_change") & F.col("op").isin(*DATA_OPS)
    ).select(
        "db",
        "key",
        F.lit(None).cast("string").alias("type"),
        F.col("after").alias("image"),
        F.lit(None).cast("bigint").alias("expire_at_ms"),
        "shard",
        "lsn",
        "commit_ts",
        (F.col("op") == "d").alias("deleted"),
    )


def apply_batch(spark: SparkSession, table_dir: str, changes: DataFrame, batch_id: int) -> bool:
    """Apply one micro-batch of flat change rows as version ``batch_id``; False when that
    batch (or a later one) is already committed, so a replayed batch changes nothing."""
    pointer = current_version(table_dir)
    if pointer is not None and pointer["batch_id"] >= batch_id:
        return False
    rows = table_rows(changes)
    if pointer is not None:
        rows = read_table(spark, table_dir, tombstones=True).unionByName(rows)
    name = f"v-{batch_id:020d}"
    _latest(rows).write.mode("overwrite").parquet(os.path.join(table_dir, name))
    commit = {
        "format": POINTER_FORMAT,
        "version": POINTER_VERSION,
        "batch_id": batch_id,
        "path": name,
    }
    replace_atomically(os.path.join(table_dir, POINTER_NAME), [orjson.dumps(commit)])
    versions = sorted(entry for entry in os.listdir(table_dir) if entry.startswith("v-"))
    for old in versions[: max(0, versions.index(name) - KEEP_VERSIONS + 1)]:
        shutil.rmtree(os.path.join(table_dir, old))
    return True


def materialize(
    changes: DataFrame,
    table_dir: str,
    checkpoint_dir: str,
    *,
    available_now: bool = True,
    processing_time_ms: int = 1000,
    gate: BatchGate | None = None,
) -> StreamingQuery:
    """Start a streaming query that keeps ``table_dir`` at the latest state per key.

    Args:
        changes: a streaming DataFrame of flat change rows (the ``moonish`` data source or
            :func:`moonish.spark.files.read_envelope_files`).
        table_dir: where the versions and the pointer live (created if missing).
        checkpoint_dir: Spark's checkpoint of this query (offsets and commits).
        available_now: process what is there now, then stop (``trigger(availableNow=True)``);
            otherwise run micro-batches every ``processing_time_ms`` until stopped.
        gate: run each micro-batch inside it, so that a stop can wait for the running one
            (moonish.spark.progress).

    Returns:
        the started query; ``awaitTermination()`` waits for it.
    """
    os.makedirs(table_dir, exist_ok=True)
    spark = changes.sparkSession

    def sink(batch: DataFrame, batch_id: int) -> None:
        if gate is None:
            apply_batch(spark, table_dir, batch, batch_id)
            return
        with gate.batch(batch_id):
            apply_batch(spark, table_dir, batch, batch_id)

    writer = changes.writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint_dir)
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{processing_time_ms} milliseconds")
    return writer.start()
