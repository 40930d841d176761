"""A micro-batch's latest change per key as rows of the Delta table, in Arrow.

Input (what :func:`moonish.spark.table.latest_changes` computes in Spark, collected with
``toArrow()``): one row per ``(db, key)`` with ``shard``, ``lsn``, ``commit_ts``, ``deleted``
and ``image``, the after image's JSON text (docs/images.md; null for a delete).

Output: :data:`TABLE_SCHEMA` plus the column ``deleted`` (which MERGE reads and the table does
not keep). The image is taken apart here, on the driver, once per surviving key: ``value`` is
the image's ``value`` member as JSON text (Debezium's ``io.debezium.data.Json``), re-encoded
from the parsed image, since Spark's ``get_json_object`` returns a JSON string's content, not
its JSON. ``bucket`` is the CRC-32 (zlib's, IEEE 802.3) of the key's bytes modulo the table's
bucket count: the partition column that bounds what a MERGE rewrites (docs/spark.md, "Layout
and cost").

This module imports pyarrow, not pyspark or deltalake.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson
import pyarrow as pa

UTC_MICROS = pa.timestamp("us", tz="UTC")

TABLE_SCHEMA = pa.schema(
    [
        pa.field("db", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("key_text", pa.string()),
        pa.field("type", pa.string()),
        pa.field("value", pa.string()),
        pa.field("omitted_length", pa.int64()),
        pa.field("field_expire_at_ms", pa.string()),
        pa.field("expire_at", UTC_MICROS),
        pa.field("shard", pa.int32()),
        pa.field("lsn", pa.int64()),
        pa.field("commit_ts", UTC_MICROS),
        pa.field("bucket", pa.int32()),
    ]
)
"""The table's columns, in order (docs/spark.md, "Columns"); ``bucket`` is the partition
column. All are declared nullable (``db``, ``key``, ``shard``, ``lsn``, ``commit_ts`` and
``bucket`` are never null): delta-rs's MERGE fails its own check of non-null columns on the
rows the Change Data Feed adds."""

COLUMN_NAMES = tuple(TABLE_SCHEMA.names)
PARTITION_COLUMNS = ("bucket",)
DATA_COLUMNS = tuple(name for name in COLUMN_NAMES if name not in PARTITION_COLUMNS)
"""The columns held in the Parquet files (a partition column's value is in the Delta log)."""

MERGE_SCHEMA = TABLE_SCHEMA.append(pa.field("deleted", pa.bool_()))


def bucket_of(key: bytes, buckets: int) -> int:
    """The bucket of ``key`` in a table of ``buckets`` buckets: CRC-32 of its bytes, modulo."""
    return zlib.crc32(key) % buckets


def key_text(key: bytes) -> str | None:
    """The key as text when its bytes are UTF-8, else None."""
    try:
        return key.decode("utf-8")
    except UnicodeDecodeError:
        return None


def merge_rows(latest: pa.Table, buckets: int) -> pa.Table:
    """The table rows (:data:`MERGE_SCHEMA`) of one micro-batch's latest change per key.

    Args:
        latest: columns ``db, key, shard, lsn, commit_ts, deleted, image`` (any order), one
            row per ``(db, key)``.
        buckets: the table's bucket count.

    Raises:
        orjson.JSONDecodeError: an image is not JSON (the source wrote something else).
    """
    columns: dict[str, list[Any]] = {name: [] for name in MERGE_SCHEMA.names}
    keys = latest.column("key").to_pylist()
    images = latest.column("image").to_pylist()
    for key, image_text in zip(keys, images, strict=True):
        image = orjson.loads(image_text) if image_text is not None else {}
        value = image.get("value")
        field_times = image.get("field_expire_at_ms")
        expire_ms = image.get("expire_at_ms")
        columns["key_text"].append(key_text(key))
        columns["type"].append(image.get("type"))
        columns["value"].append(None if value is None else orjson.dumps(value).decode())
        columns["omitted_length"].append(image.get("omitted_length"))
        columns["field_expire_at_ms"].append(
            None if field_times is None else orjson.dumps(field_times).decode()
        )
        columns["expire_at"].append(None if expire_ms is None else int(expire_ms) * 1000)
        columns["bucket"].append(bucket_of(key, buckets))
    passed = ("db", "key", "shard", "lsn", "commit_ts", "deleted")
    arrays = []
    for field in MERGE_SCHEMA:
        if field.name in passed:
            arrays.append(latest.column(field.name).combine_chunks().cast(field.type))
        elif field.name == "expire_at":
            arrays.append(pa.array(columns[field.name], pa.int64()).cast(UTC_MICROS))
        else:
            arrays.append(pa.array(columns[field.name], field.type))
    return pa.Table.from_arrays(arrays, schema=MERGE_SCHEMA)
