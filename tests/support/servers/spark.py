"""A local SparkSession, the real AOF in 4 shards, and the materialized table's keyspace in the
form the Redis oracle gives."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish
import moonish.spark
from moonish.log.records import ViewType
from moonish.redis.aof.importer import import_aof
from moonish.state.config import StreamConfig
from moonish.values.model import entry_from_image
from tests.support.paths import ROOT
from tests.support.servers.redis_server import comparable, shape

AOF = ROOT / "fixtures" / "redis-aof"


OMITTED = "omitted"


FULL_IMAGES = StreamConfig(ViewType.NEW_AND_OLD_IMAGES, max_value_bytes=1 << 30)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = moonish.spark.session("local[2]", spark__sql__shuffle__partitions="2")
    yield session
    for query in session.streams.active:  # left running by a failed test: stop() would hang
        query.stop()
    session.stop()


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The whole real AOF imported into 4 shards (images up to the default 4096 bytes)."""
    path = tmp_path_factory.mktemp("mixed") / "data"
    import_aof(AOF / "mixed" / "appendonlydir", path, 4)
    return path


def table_keyspace(
    spark: Any, table_dir: Path | str, storage_options: dict[str, str] | None = None
) -> dict[tuple[int, bytes], Any]:
    """Each live key's value as :func:`comparable` gives it, or, where the image left the
    value out (above max_value_bytes), its (type, length, expire_at_ms) as :func:`shape`
    (``table_dir``: a directory or an ``s3://`` URI with its ``storage_options``)."""
    keyspace = {}
    for row in moonish.spark.read_table(spark, str(table_dir), storage_options).collect():
        key = bytes(row.key)
        text = key.decode("utf-8", "replace")
        assert row.key_text == (text if text.encode() == key else None)
        expire_ms = None if row.expire_at is None else round(row.expire_at.timestamp() * 1000)
        if row.omitted_length is not None:
            keyspace[(row.db, key)] = (OMITTED, (row.type, row.omitted_length, expire_ms))
            continue
        image = {"db": row.db, "key": "", "type": row.type, "value": orjson.loads(row.value)}
        image["expire_at_ms"] = expire_ms
        if row.field_expire_at_ms is not None:
            image["field_expire_at_ms"] = orjson.loads(row.field_expire_at_ms)
        keyspace[(row.db, key)] = comparable(entry_from_image(image)[2])
    return keyspace


def like_table(redis: dict[tuple[int, bytes], Any], table: dict[tuple[int, bytes], Any]) -> Any:
    """Redis's keyspace in the form :func:`table_keyspace` gave for each key."""
    return {
        key: (OMITTED, shape(entry)) if table.get(key, (None,))[0] == OMITTED else comparable(entry)
        for key, entry in redis.items()
    }


def run(spark: Any, changes: Any, table: Path | str, checkpoint: Path, **options: Any) -> None:
    """Materialize ``changes`` into ``table`` until the query ends (``options``: of
    :func:`moonish.spark.materialize`)."""
    moonish.spark.materialize(changes, str(table), str(checkpoint), **options).awaitTermination()


def wal_changes(spark: Any, data: Path, max_records: int | None = None) -> Any:
    reader = spark.readStream.format("moonish")
    if max_records:
        reader = reader.option("maxRecordsPerTrigger", max_records)
    return reader.load(str(data))
