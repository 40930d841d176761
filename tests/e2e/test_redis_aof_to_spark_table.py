"""The whole pipeline: the real AOF imported into 4 shards and materialized by Spark through both
paths (the moonish data source, the export files) into Delta tables holds the keyspace a real
redis-server has after loading the same AOF."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import moonish
import moonish.spark
from moonish.sinks.export import Exporter, ExportOptions
from tests.support.servers.redis_server import redis_entry, redis_server
from tests.support.servers.spark import (
    AOF,
    OMITTED,
    like_table,
    mixed,
    run,
    spark,
    table_keyspace,
    wal_changes,
)

__all__ = ["mixed", "spark"]  # the module-scoped fixtures
pytest.importorskip("pyspark")
pytestmark = [pytest.mark.spark, pytest.mark.redis]


@pytest.fixture(scope="module")
def redis_keyspace(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[int, bytes], Any]:
    """Every key of every db of a redis-server that loaded the real AOF."""
    copy = tmp_path_factory.mktemp("redis") / "redis"
    shutil.copytree(AOF / "mixed", copy)
    keyspace = {}
    with redis_server(copy, "--appendonly", "yes", "--appenddirname", "appendonlydir") as client:
        for db in range(16):
            client.execute_command("SELECT", db)
            for key in client.scan_iter(count=1000):
                keyspace[(db, key)] = redis_entry(client, key)
    return keyspace


def test_both_paths_materialize_the_keyspace_redis_loads(
    spark: Any, mixed: Path, redis_keyspace: dict[tuple[int, bytes], Any], tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    run(spark, wal_changes(spark, mixed, 50_000), tmp_path / "t1", tmp_path / "c1")
    assert DeltaTable(str(tmp_path / "t1")).version() >= 2  # several micro-batches
    assert len(redis_keyspace) > 5000
    table = table_keyspace(spark, tmp_path / "t1")
    assert sum(value[0] == OMITTED for value in table.values()) >= 2  # large values left out
    assert table == like_table(redis_keyspace, table)

    with Exporter(mixed, tmp_path / "export", ExportOptions(max_records_per_file=20_000)) as e:
        e.run()
    files = moonish.spark.read_envelope_files(spark, str(tmp_path / "export"))
    run(spark, files, tmp_path / "t2", tmp_path / "c2")
    assert table_keyspace(spark, tmp_path / "t2") == table
