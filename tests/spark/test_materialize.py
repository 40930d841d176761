"""The Spark pipeline on a real local SparkSession (one per module, local[2]): the moonish data
source and the export files give the same rows; the Delta table applies each micro-batch once
across a restart and a replay, keeps binary and non-ASCII keys, and the CLI writes and shows
it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish
import moonish.spark
from cli.main import main
from moonish.cdc.images import text_or_b64
from moonish.datadir import consumers
from moonish.errors import CommandError
from moonish.redis.aof.importer import import_aof
from moonish.sinks.export import Exporter, ExportOptions
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import untext
from tests.support.delta import txn_versions, uncommit
from tests.support.servers.spark import (
    AOF,
    FULL_IMAGES,
    mixed,
    run,
    spark,
    table_keyspace,
    wal_changes,
)

__all__ = ["mixed", "spark"]  # the module-scoped fixtures
pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark


def test_both_paths_give_the_same_rows(spark: Any, mixed: Path, tmp_path: Path) -> None:
    from moonish.spark.files import ENVELOPE_SCHEMA, flatten

    with Exporter(mixed, tmp_path / "export") as exporter:
        exporter.run()
    wal = spark.read.format("moonish").option("recordsPerPartition", 25_000).load(str(mixed))
    files = flatten(spark.read.schema(ENVELOPE_SCHEMA).json(str(tmp_path / "export")))
    events = 0
    for shard_dir in moonish.shard_dirs(mixed):
        with moonish.tail(shard_dir) as stream:
            events += sum(1 for _ in stream)
    assert wal.count() == files.count() == events  # every record but position markers
    assert wal.exceptAll(files).count() == 0
    assert files.exceptAll(wal).count() == 0


def test_a_restarted_query_and_a_replayed_batch_apply_each_batch_once(
    spark: Any, tmp_path: Path
) -> None:
    from deltalake import DeltaTable

    from moonish.spark.table import query_id

    data = tmp_path / "data"
    import_aof(AOF / "slice" / "appendonlydir", data, 2, stream=FULL_IMAGES)
    run(spark, wal_changes(spark, data), tmp_path / "whole", tmp_path / "whole-ck")
    expected = table_keyspace(spark, tmp_path / "whole")
    table, checkpoint = tmp_path / "table", tmp_path / "ck"

    # Stopped between micro-batches: a processing-time query stopped after its first commit.
    query = moonish.spark.materialize(
        wal_changes(spark, data, 500),
        str(table),
        str(checkpoint),
        available_now=False,
        processing_time_ms=100,
        optimize_every=3,
    )
    try:
        while not txn_versions(table, query_id(str(checkpoint))):
            query.awaitTermination(0.1)
    finally:
        query.stop()
    app = query_id(str(checkpoint))
    assert table_keyspace(spark, table) != expected  # really stopped part of the way
    run(spark, wal_changes(spark, data, 500), table, checkpoint, optimize_every=3)
    versions = txn_versions(table, app)
    last = versions[-1]
    assert versions == list(range(last + 1)) and last >= 6  # each batch once, in order
    assert table_keyspace(spark, table) == expected

    # The table committed the batch, Spark did not: Spark replays it, the table skips it.
    uncommit(checkpoint, last)
    version = DeltaTable(str(table)).version()
    run(spark, wal_changes(spark, data, 500), table, checkpoint, optimize_every=3)
    assert txn_versions(table, app) == versions and DeltaTable(str(table)).version() == version
    assert table_keyspace(spark, table) == expected
    compactions = [h for h in DeltaTable(str(table)).history() if h["operation"] == "OPTIMIZE"]
    assert len(compactions) == (last + 1) // 3  # --optimize-every 3


KEYS = [b"\xff\xfe\x00bin", "übergröße:ключ".encode(), b'{"_b64":"AAE="}', b"\x00\x01"]


def test_binary_non_ascii_and_b64_lookalike_keys(spark: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ShardWriter(data / "shard-0", ShardOptions(expiry_sweep_ms=0)) as writer:
        for key in KEYS:
            writer.execute(0, [b"SET", key, key + b"!"])
        writer.execute(0, [b"DEL", KEYS[0]])
        with pytest.raises(CommandError):  # a string: refused, writes nothing
            writer.execute(0, [b"LPUSH", KEYS[3], b"late"])
    with Exporter(data, tmp_path / "export") as exporter:
        exporter.run()
    for changes in (
        wal_changes(spark, data),
        moonish.spark.read_envelope_files(spark, str(tmp_path / "export")),
    ):
        name = str(len(os.listdir(tmp_path)))
        run(spark, changes, tmp_path / f"t{name}", tmp_path / f"c{name}")
        rows = moonish.spark.read_table(spark, str(tmp_path / f"t{name}")).collect()
        assert sorted(bytes(row.key) for row in rows) == sorted(KEYS[1:])
        for row in rows:
            key = bytes(row.key)
            assert untext(orjson.loads(row.value)) == key + b"!" and row.type == "string"
            assert row.key_text == key.decode()  # the binary key is the deleted one


def test_both_paths_give_the_same_message_rows(spark: Any, tmp_path: Path) -> None:
    """Function messages and checkpoints, asked for (the option ``messages``), are ``m`` rows
    of their own record type (with the message's db), the same from the WAL and from envelope
    files; without it neither path has them."""
    from moonish.spark.files import ENVELOPE_SCHEMA, flatten

    data = tmp_path / "data"
    with ShardWriter(data / "shard-0", ShardOptions(expiry_sweep_ms=0)) as writer:
        writer.execute(3, [b"FUNCTION", b"LOAD", b"#!lua name=lib\nreturn 1"])
        writer.checkpoint()
        writer.execute(0, [b"SET", b"k", b"v"])
    with Exporter(data, tmp_path / "export", ExportOptions(messages=True)) as exporter:
        exporter.run()
    wal = spark.read.format("moonish").option("messages", "true").load(str(data))
    files = flatten(spark.read.schema(ENVELOPE_SCHEMA).json(str(tmp_path / "export")))
    rows = sorted((r.lsn, r.op, r.record_type, r.db) for r in wal.collect())
    assert rows == [(1, "m", "message", 3), (2, "m", "checkpoint", None), (3, "c", "kv_change", 0)]
    assert wal.exceptAll(files).count() == 0 and files.exceptAll(wal).count() == 0
    plain = spark.read.format("moonish").load(str(data))
    assert [(r.lsn, r.op) for r in plain.collect()] == [(3, "c")]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_cli_materialize_and_show(
    spark: Any, mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table = tmp_path / "table"
    assert (
        main(
            [
                "spark",
                "materialize",
                str(mixed),
                str(table),
                "--checkpoint",
                str(tmp_path / "ck"),
                "--master",
                "local[2]",
            ]
        )
        == 0
    )
    assert f"{table}: Delta version 1, " in capsys.readouterr().out
    # the query is the named consumer spark-table, acknowledged as its micro-batch committed
    ends = tuple(moonish.info(mixed / f"shard-{k}")["latest_lsn"] for k in range(4))
    registered = consumers.load(mixed, "spark-table")
    assert registered.owner == "spark" and registered.positions == ends
    assert main(["spark", "show", str(table), "--limit", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 3 and all(orjson.loads(line)["db"] == 0 for line in lines)
    assert {"value", "expire_at_ms", "type"} <= orjson.loads(lines[0]).keys()
    # delta-rs gives what Spark's read of the same version gives, in Spark's (db, key) order
    assert main(["spark", "show", str(table), "--limit", "500"]) == 0
    shown = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_spark = moonish.spark.read_table(spark, str(table)).orderBy("db", "key").limit(500)
    assert len(shown) == 500 and shown == [
        {
            "db": row.db,
            "key": text_or_b64(bytes(row.key)),
            "type": row.type,
            "value": None if row.value is None else orjson.loads(row.value),
            "expire_at_ms": None
            if row.expire_at is None
            else round(row.expire_at.timestamp() * 1000),
            "shard": row.shard,
            "lsn": row.lsn,
        }
        for row in by_spark.collect()
    ]
