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
from moonish.values.model import entry_from_image, untext
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


def table_keyspace(spark: Any, table_dir: Path) -> dict[tuple[int, bytes], Any]:
    """Each live key's value as :func:`comparable` gives it, or, where the image left the
    value out (above max_value_bytes), its (type, length, expire_at_ms) as :func:`shape`."""
    rows = moonish.spark.read_table(spark, str(table_dir)).select("image").collect()
    keyspace = {}
    for row in rows:
        image = orjson.loads(row.image)
        size = image.get("omitted_length")
        if size is not None:
            key = (image["db"], untext(image["key"]))
            keyspace[key] = (OMITTED, (image["type"], size, image["expire_at_ms"]))
        else:
            db, key_bytes, entry = entry_from_image(image)
            keyspace[(db, key_bytes)] = comparable(entry)
    return keyspace


def like_table(redis: dict[tuple[int, bytes], Any], table: dict[tuple[int, bytes], Any]) -> Any:
    """Redis's keyspace in the form :func:`table_keyspace` gave for each key."""
    return {
        key: (OMITTED, shape(entry)) if table.get(key, (None,))[0] == OMITTED else comparable(entry)
        for key, entry in redis.items()
    }


def run(spark: Any, changes: Any, table: Path, checkpoint: Path) -> None:
    moonish.spark.materialize(changes, str(table), str(checkpoint)).awaitTermination()


def wal_changes(spark: Any, data: Path, max_records: int | None = None) -> Any:
    reader = spark.readStream.format("moonish")
    if max_records:
        reader = reader.option("maxRecordsPerTrigger", max_records)
    return reader.load(str(data))
