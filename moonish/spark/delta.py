"""The materialized table as a Delta Lake table, written with delta-rs (PyPI ``deltalake``).

One table holds the latest state of every key (:data:`moonish.spark.tablerows.TABLE_SCHEMA`),
partitioned by ``bucket`` (CRC-32 of the key modulo the bucket count), with the Change Data
Feed on. It is created with the table properties ``delta.enableChangeDataFeed = true``,
``moonish.table = 1`` (what says moonish made it) and ``moonish.buckets = <n>``; delta-rs
writes protocol reader version 1, writer version 4 (the Change Data Feed's), no table
features.

Each micro-batch is one MERGE (:func:`merge_batch`) on ``(bucket, db, key)``:

- a matched row is replaced by a newer change, or deleted by a newer delete; "newer" is the
  higher ``(lsn, shard)``, so an older change never overwrites a newer one;
- an unmatched key is inserted unless its change is a delete (deleted keys leave no row);
- the commit carries Delta's transaction identifier (a ``txn`` action, Delta protocol
  "Transaction Identifiers"): ``appId`` = the streaming query's id, ``version`` = the batch
  id. Before merging, the table's latest version for that app id is read; a batch at or below
  it was committed already (Spark replays the last batch after a crash between the sink's
  commit and its own) and is skipped. A MERGE that changes no row commits nothing.

A table of moonish's earlier own format (a ``_moonish_table.json`` pointer over Parquet copies)
is refused by name, never read as something else.

A table is a local directory or an ``s3://bucket/path`` URI (``moonish.spark.storage``: the
storage options, commits by S3 conditional writes, the store's errors as moonish's kinds);
every function here takes ``storage_options`` for the latter (none for a local directory).

:func:`first_rows` reads the first rows of the current version in ``(db, key)`` order with
delta-rs and pyarrow alone (``moonish spark show``: no Spark, no JVM).

This module imports deltalake and pyarrow, not pyspark.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable
from deltalake.transaction import CommitProperties, Transaction

from moonish.errors import InvalidArgumentError, UnsupportedFormatError
from moonish.spark.storage import is_object_store, storage_errors, table_options
from moonish.spark.tablerows import COLUMN_NAMES, DATA_COLUMNS, PARTITION_COLUMNS, TABLE_SCHEMA

OLD_POINTER_NAME = "_moonish_table.json"
"""The commit pointer of moonish's own table format before Delta Lake (refused)."""
FORMAT_PROPERTY, FORMAT_VERSION = "moonish.table", "1"
BUCKETS_PROPERTY = "moonish.buckets"
CDF_PROPERTY = "delta.enableChangeDataFeed"
DEFAULT_BUCKETS = 64
MAX_READER_VERSION = 1
"""The highest Delta reader version :func:`readable_files` reads (no deletion vectors, no
column mapping: each Parquet file's rows are the table's)."""


@dataclass(frozen=True)
class BatchResult:
    """What :func:`merge_batch` did with one micro-batch.

    Attributes:
        applied: False when the batch was committed before (a replay) and so skipped.
        table_version: the table's Delta version after the batch.
        metrics: delta-rs's MERGE metrics (``num_target_rows_inserted``, ``..._updated``,
            ``..._deleted``, ``num_target_files_removed``, ...); empty when skipped.
    """

    applied: bool
    table_version: int
    metrics: dict[str, Any]


def refuse_old_format(table_uri: str) -> None:
    """Refuse a directory holding moonish's earlier own table format (a local directory only:
    that format was never written to an object store).

    Raises:
        UnsupportedFormatError: ``table_uri`` holds ``_moonish_table.json``.
    """
    if is_object_store(table_uri):
        return
    pointer = os.path.join(table_uri, OLD_POINTER_NAME)
    if os.path.exists(pointer):
        raise UnsupportedFormatError(
            "a table of moonish's own format from before Delta Lake (Parquet versions under "
            f"a {OLD_POINTER_NAME} pointer), which this version no longer reads: "
            "materialize the source again into a new directory",
            path=table_uri,
        )


def open_table(
    table_uri: str, storage_options: Mapping[str, str] | None = None
) -> DeltaTable | None:
    """The moonish Delta table at ``table_uri`` (a local directory or ``s3://bucket/path``),
    or None where there is no Delta table yet.

    Raises:
        UnsupportedFormatError: a table of moonish's earlier own format, or a Delta table
            moonish did not create (no ``moonish.table`` property) or of a later moonish
            table version.
        InvalidArgumentError: storage options refused (``moonish.spark.storage.table_options``:
            given for a local directory, or committing without conditional writes), a URI of
            another scheme, a missing bucket, refused credentials.
        UnavailableError: the object store cannot be reached.
    """
    refuse_old_format(table_uri)
    options = table_options(table_uri, storage_options)
    with storage_errors(table_uri, options):
        if not DeltaTable.is_deltatable(table_uri, storage_options=options):
            return None
        table = DeltaTable(table_uri, storage_options=options)
    version = table.metadata().configuration.get(FORMAT_PROPERTY)
    if version != FORMAT_VERSION:
        what = "not made by moonish" if version is None else f"of moonish table version {version}"
        raise UnsupportedFormatError(
            f"a Delta table {what} (this build writes {FORMAT_PROPERTY} = {FORMAT_VERSION})",
            path=table_uri,
        )
    return table


def require_table(table_uri: str, storage_options: Mapping[str, str] | None = None) -> DeltaTable:
    """The moonish Delta table at ``table_uri``, which must exist.

    Raises:
        InvalidArgumentError: there is no Delta table there (not a table directory, or no
            micro-batch was applied to it yet); or as :func:`open_table`.
        UnsupportedFormatError, UnavailableError: as :func:`open_table`.
    """
    table = open_table(table_uri, storage_options)
    if table is None:
        raise InvalidArgumentError(
            "not a materialized table: no Delta table (_delta_log) here (not a table "
            "directory, or no micro-batch was applied to it yet: moonish spark materialize)",
            path=table_uri,
        )
    return table


def create_table(
    table_uri: str,
    buckets: int = DEFAULT_BUCKETS,
    storage_options: Mapping[str, str] | None = None,
) -> DeltaTable:
    """The moonish Delta table at ``table_uri``, created empty with ``buckets`` buckets if
    there is none; an existing table keeps its own bucket count. A local directory is
    created; an S3 bucket must exist.

    Raises:
        InvalidArgumentError: ``buckets`` is below 1; or as :func:`open_table`.
        UnsupportedFormatError, UnavailableError: as :func:`open_table`.
    """
    if buckets < 1:
        raise InvalidArgumentError(f"buckets must be at least 1, not {buckets}", path=table_uri)
    table = open_table(table_uri, storage_options)
    if table is not None:
        return table
    options = table_options(table_uri, storage_options)
    with storage_errors(table_uri, options):
        DeltaTable.create(
            table_uri,
            TABLE_SCHEMA,
            mode="ignore",
            partition_by=list(PARTITION_COLUMNS),
            name="moonish",
            description="the latest state of every Redis key, kept by moonish spark materialize",
            configuration={
                CDF_PROPERTY: "true",
                FORMAT_PROPERTY: FORMAT_VERSION,
                BUCKETS_PROPERTY: str(buckets),
            },
            storage_options=options,
            raise_if_key_not_exists=False,
        )
    created = open_table(table_uri, storage_options)
    assert created is not None
    return created


def table_buckets(table: DeltaTable) -> int:
    """The bucket count the table was created with."""
    return int(table.metadata().configuration[BUCKETS_PROPERTY])


def committed_batch(table: DeltaTable, app_id: str) -> int | None:
    """The latest batch id committed for ``app_id`` (its ``txn`` version), or None."""
    return table.transaction_version(app_id)


_UPDATES = {name: f"s.{name}" for name in COLUMN_NAMES}
_NEWER = "(s.lsn > t.lsn OR (s.lsn = t.lsn AND s.shard > t.shard))"


def merge_batch(
    table_uri: str,
    rows: pa.Table,
    app_id: str,
    batch_id: int,
    storage_options: Mapping[str, str] | None = None,
) -> BatchResult:
    """Apply one micro-batch's latest change per key as one MERGE committed with the
    transaction identifier ``(app_id, batch_id)``; skip it when that app id's committed
    version is ``batch_id`` or later.

    Args:
        table_uri: the table (created by :func:`create_table`).
        rows: :data:`moonish.spark.tablerows.MERGE_SCHEMA` rows, one per ``(db, key)``.
        app_id: the streaming query's identity (Spark's query id).
        batch_id: Spark's micro-batch id.
        storage_options: of an S3 table (``moonish.spark.storage``).

    Raises:
        InvalidArgumentError: no table at ``table_uri``; or as :func:`open_table`.
        UnsupportedFormatError, UnavailableError: as :func:`open_table`.
        deltalake.exceptions.CommitFailedError: another writer committed a conflicting
            change first (two queries on one table: docs/spark.md, one table, one query).
    """
    table = require_table(table_uri, storage_options)
    done = committed_batch(table, app_id)
    if done is not None and done >= batch_id:
        return BatchResult(False, table.version(), {})
    if rows.num_rows == 0:
        return BatchResult(True, table.version(), {})
    buckets = sorted(set(rows.column("bucket").to_pylist()))
    predicate = (
        f"t.bucket IN ({', '.join(map(str, buckets))}) AND t.bucket = s.bucket "
        "AND t.db = s.db AND t.key = s.key"
    )
    commit = CommitProperties(app_transactions=[Transaction(app_id, batch_id)])
    with storage_errors(table_uri, table_options(table_uri, storage_options)):
        metrics = (
            table.merge(
                rows,
                predicate,
                source_alias="s",
                target_alias="t",
                commit_properties=commit,
            )
            .when_matched_delete(f"s.deleted AND {_NEWER}")
            .when_matched_update(_UPDATES, f"NOT s.deleted AND {_NEWER}")
            .when_not_matched_insert(_UPDATES, "NOT s.deleted")
            .execute()
        )
    return BatchResult(True, table.version(), metrics)


def compact(table_uri: str, storage_options: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Compact the table's small files, bucket by bucket (``OPTIMIZE``: a commit of its own,
    no data change); returns delta-rs's metrics (``numFilesRemoved``, ``numFilesAdded``, ...).

    Raises:
        InvalidArgumentError: no table at ``table_uri``; or as :func:`open_table`.
        UnavailableError: as :func:`open_table`.
    """
    table = require_table(table_uri, storage_options)
    with storage_errors(table_uri, table_options(table_uri, storage_options)):
        return table.optimize.compact()


def readable_files(table: DeltaTable) -> list[str]:
    """The Parquet files of the table's current version, for a reader that reads their
    :data:`moonish.spark.tablerows.DATA_COLUMNS` (each file holds exactly its rows).

    Raises:
        UnsupportedFormatError: the table's protocol needs a reader version above 1 or reader
            features (deletion vectors, column mapping): read it with delta-spark instead.
    """
    protocol = table.protocol()
    if protocol.min_reader_version > MAX_READER_VERSION or protocol.reader_features:
        raise UnsupportedFormatError(
            f"Delta reader version {protocol.min_reader_version} (features "
            f"{protocol.reader_features}): moonish reads version {MAX_READER_VERSION}; "
            "read this table with delta-spark",
            path=table.table_uri,
        )
    return table.file_uris()


ROW_ORDER = (("db", "ascending"), ("key", "ascending"))
"""The order :func:`first_rows` gives: by ``db``, then by ``key`` as unsigned bytes (as Spark
orders BINARY)."""


def first_rows(table: DeltaTable, limit: int, columns: Sequence[str] = DATA_COLUMNS) -> pa.Table:
    """The first ``limit`` rows of the table's current version in :data:`ROW_ORDER`, with
    ``columns``, read through delta-rs (``DeltaTable.to_pyarrow_dataset``) without Spark.

    The files are scanned batch by batch, keeping the best ``limit`` rows so far, so memory
    holds ``limit`` rows plus one batch, whatever the table's size; every file is read.

    Raises:
        InvalidArgumentError: ``limit`` is below 1.
        UnsupportedFormatError: as :func:`readable_files` (a later reader version).
    """
    if limit < 1:
        raise InvalidArgumentError(f"limit must be at least 1, not {limit}", path=table.table_uri)
    readable_files(table)  # the protocol check, before any file is read
    order = list(ROW_ORDER)
    with storage_errors(table.table_uri, {}):
        dataset = table.to_pyarrow_dataset()
        kept = dataset.schema.empty_table().select(list(columns))
        for batch in dataset.to_batches(columns=list(columns)):
            if batch.num_rows == 0:
                continue
            both = pa.concat_tables([kept, pa.Table.from_batches([batch])])
            top = pc.select_k_unstable(both, min(limit, both.num_rows), sort_keys=order)
            kept = both.take(top)
    return kept.sort_by(order)


def current_rows(table: DeltaTable, columns: Sequence[str] = DATA_COLUMNS) -> pa.Table:
    """Every row of the table's current version, with ``columns``, read through delta-rs
    into memory (``moonish.spark.table.read_table`` of an S3 table, which Spark cannot read
    without the hadoop-aws jars).

    Raises:
        UnsupportedFormatError: as :func:`readable_files` (a later reader version).
        InvalidArgumentError, UnavailableError: the object store's errors
            (``moonish.spark.storage.storage_errors``).
    """
    readable_files(table)
    with storage_errors(table.table_uri, {}):
        result: pa.Table = table.to_pyarrow_table(columns=list(columns))
    return result
