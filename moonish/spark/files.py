"""Envelope files (``moonish cdc export``) as a streaming DataFrame of flat change rows.

Spark's JSON file source reads each line with ``ENVELOPE_SCHEMA``. ``before`` and ``after``
are declared as strings, so Spark keeps each image as its JSON text (their shape depends on
the key's type). The flat columns are the data source's (``CHANGE_COLUMNS``), derived in the
JVM: the key is ``{"_b64": ...}`` decoded to bytes when the image's ``key`` is a JSON object
and the UTF-8 bytes of the text when it is a JSON string, so a key whose text is
``{"_b64":"AAE="}`` stays that text (``get_json_object`` looks at JSON types, not text).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from moonish.cdc.envelope import CHECKPOINT_PREFIX

ENVELOPE_SCHEMA = (
    "before STRING, after STRING, "
    "source STRUCT<version: STRING, connector: STRING, name: STRING, ts_ms: BIGINT, "
    "ts_us: BIGINT, ts_ns: BIGINT, snapshot: STRING, db: INT, shard: INT, lsn: BIGINT, "
    "command: STRING, expired: BOOLEAN>, "
    "transaction STRUCT<id: STRING, total_order: BIGINT, data_collection_order: BIGINT>, "
    "op STRING, ts_ms BIGINT, ts_us BIGINT, ts_ns BIGINT, "
    "message STRUCT<prefix: STRING, content: STRING>"
)
"""The payload-only Debezium envelope (docs/envelopes.md) as a Spark DDL schema; ``before`` and
``after`` hold the images' JSON text."""


def _key(image: Column) -> Column:
    b64 = F.get_json_object(image, "$.key._b64")
    text = F.get_json_object(image, "$.key")
    return F.when(b64.isNotNull(), F.unbase64(b64)).otherwise(F.encode(text, "UTF-8"))


def flatten(envelopes: DataFrame) -> DataFrame:
    """Envelope rows (``ENVELOPE_SCHEMA``) as flat change rows (``CHANGE_COLUMNS``)."""
    image = F.coalesce(F.col("after"), F.col("before"))
    checkpoint = F.col("message.prefix") == CHECKPOINT_PREFIX
    record_type = F.when(
        F.col("op") == "m", F.when(checkpoint, F.lit("checkpoint")).otherwise(F.lit("message"))
    ).otherwise(F.coalesce(F.get_json_object(image, "$.record_type"), F.lit("kv_change")))
    return envelopes.select(
        F.col("source.shard").alias("shard"),
        F.col("source.lsn").alias("lsn"),
        F.col("op"),
        F.timestamp_micros(F.col("source.ts_us")).alias("commit_ts"),
        record_type.alias("record_type"),
        F.coalesce(F.col("source.command"), F.get_json_object(image, "$.command")).alias("command"),
        F.coalesce(F.get_json_object(image, "$.db").cast("int"), F.col("source.db")).alias("db"),
        _key(image).alias("key"),
        F.coalesce(F.col("source.expired"), F.lit(False)).alias("expired"),
        F.col("transaction.id").alias("transaction_id"),
        F.col("before"),
        F.col("after"),
    )


def read_envelope_files(
    spark: SparkSession, path: str, *, max_files_per_trigger: int | None = None
) -> DataFrame:
    """A streaming DataFrame of flat change rows from the envelope files in ``path``.

    Spark's file source lists ``path`` per micro-batch and reads each new file once (its
    checkpoint remembers which); names starting with ``.`` or ``_`` (an export's temporary
    files and state) are ignored. Rows are in file order, not LSN order: a sink orders by
    ``(shard, lsn)`` itself (``moonish.spark.table`` does).
    """
    reader = spark.readStream.schema(ENVELOPE_SCHEMA).option("mode", "FAILFAST")
    if max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", max_files_per_trigger)
    return flatten(reader.json(path))
