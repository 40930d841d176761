"""The materialized table in an S3-compatible store (moto in server mode on 127.0.0.1), on a real
local SparkSession: the same query over the real AOF into a local directory and into an s3://
URI gives the local table's rows, each micro-batch committed once, a replayed batch skipped,
and a Change Data Feed (read back from the store) that replays to the table; the CLI writes and
shows an s3:// table from the AWS environment variables or --storage-option, and refuses a
missing bucket (exit 2) and an unreachable endpoint (exit 6) before Spark starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")
pytest.importorskip("moto.server")
pytest.importorskip("boto3")

import pyarrow as pa
from deltalake import DeltaTable

import moonish
import moonish.spark
from cli.main import main
from moonish.cdc.images import text_or_b64
from moonish.datadir import consumers
from moonish.redis.aof.importer import import_aof
from tests.support.delta import txn_versions, uncommit
from tests.support.servers.moto_s3 import S3Server, free_port, s3
from tests.support.servers.spark import AOF, FULL_IMAGES, run, spark, wal_changes

__all__ = ["s3", "spark"]  # the module-scoped fixtures
pytestmark = [pytest.mark.spark, pytest.mark.s3]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real AOF's slice in 2 shards, with full images."""
    path = tmp_path_factory.mktemp("slice") / "data"
    import_aof(AOF / "slice" / "appendonlydir", path, 2, stream=FULL_IMAGES)
    return path


def table_rows(spark: Any, table: str, options: dict[str, str] | None = None) -> list[Any]:
    """Every row of the table's current version, every column, in (db, key) order."""
    rows = moonish.spark.read_table(spark, table, options).collect()
    return sorted((tuple(row) for row in rows), key=lambda row: (row[0], bytes(row[1])))


@pytest.fixture(scope="module")
def local_rows(spark: Any, data: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """The rows of the slice materialized into a local directory in one micro-batch."""
    where = tmp_path_factory.mktemp("whole")
    run(spark, wal_changes(spark, data), where / "table", where / "ck")
    return table_rows(spark, str(where / "table"))


@pytest.mark.parametrize("where", ["local", "s3"])
def test_a_table_in_s3_has_the_local_tables_rows_each_batch_committed_once(
    spark: Any, s3: S3Server, data: Path, local_rows: list[Any], where: str, tmp_path: Path
) -> None:
    from moonish.spark.table import query_id

    if where == "s3":
        table, options = f"s3://{s3.bucket()}/tables/redis", s3.storage_options
    else:
        table, options = str(tmp_path / "table"), None

    def versions(app: str) -> list[int]:
        return s3.txn_versions(table, app) if where == "s3" else txn_versions(Path(table), app)

    checkpoint = tmp_path / "ck"  # Spark's checkpoint stays local either way
    run(
        spark,
        wal_changes(spark, data, 500),
        table,
        checkpoint,
        optimize_every=3,
        storage_options=options,
    )
    app = query_id(str(checkpoint))
    committed = versions(app)
    last = committed[-1]
    assert committed == list(range(last + 1)) and last >= 6  # each batch once, in order
    assert table_rows(spark, table, options) == local_rows

    # The table committed the last batch, Spark did not: Spark replays it, the table skips it.
    delta_table = DeltaTable(table, storage_options=options)
    version = delta_table.version()
    uncommit(checkpoint, last)
    run(
        spark,
        wal_changes(spark, data, 500),
        table,
        checkpoint,
        optimize_every=3,
        storage_options=options,
    )
    delta_table = DeltaTable(table, storage_options=options)
    assert versions(app) == committed and delta_table.version() == version
    compactions = [h for h in delta_table.history() if h["operation"] == "OPTIMIZE"]
    assert len(compactions) == (last + 1) // 3  # --optimize-every 3

    # The Change Data Feed, read from where the table is, replays to the table.
    feed = pa.table(delta_table.load_cdf(starting_version=0)).to_pylist()
    replayed: dict[tuple[int, bytes], tuple[str, int]] = {}
    for row in sorted(feed, key=lambda r: r["_commit_version"]):
        if row["_change_type"] in ("insert", "update_postimage"):
            replayed[(row["db"], row["key"])] = (row["value"], row["lsn"])
        elif row["_change_type"] == "delete":
            del replayed[(row["db"], row["key"])]
    assert replayed == {(row[0], bytes(row[1])): (row[4], row[9]) for row in local_rows}


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_cli_writes_and_shows_an_s3_table(
    spark: Any,
    s3: S3Server,
    data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    table = f"s3://{s3.bucket()}/tables/redis"
    for name, value in s3.environment.items():  # the endpoint from the environment
        monkeypatch.setenv(name, value)
    checkpoint = str(tmp_path / "ck")
    command = ["spark", "materialize", str(data), table, "--checkpoint", checkpoint]
    assert main([*command, "--master", "local[2]", "--no-consumer"]) == 0
    assert f"table {table}: Delta version 1, " in capsys.readouterr().out
    for name in s3.environment:  # from here on, from --storage-option alone
        monkeypatch.delenv(name)
    settings = [f"--storage-option={name}={value}" for name, value in s3.environment.items()]
    assert main(["spark", "show", table, "--limit", "300", *settings]) == 0
    shown = [orjson.loads(line) for line in capsys.readouterr().out.splitlines()]
    by_spark = moonish.spark.read_table(spark, table, s3.storage_options)
    assert len(shown) == 300 and shown == [
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
        for row in by_spark.orderBy("db", "key").limit(300).collect()
    ]
    # the query is the named consumer spark-<the URI's last name>, acknowledged per batch
    assert main([*command, "--master", "local[2]", *settings]) == 0
    assert consumers.load(data, "spark-redis").positions == tuple(
        moonish.info(data / f"shard-{k}")["latest_lsn"] for k in range(2)
    )


def test_cli_refuses_a_missing_bucket_and_an_unreachable_endpoint_before_spark_starts(
    s3: S3Server, data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = [f"--storage-option={name}={value}" for name, value in s3.environment.items()]
    missing = "s3://no-such-bucket-here/tables/redis"
    checkpoint = tmp_path / "ck"
    materialize = ["spark", "materialize", str(data), missing, "--checkpoint", str(checkpoint)]
    assert main([*materialize, *settings]) == 2
    assert "invalid_argument: no bucket 'no-such-bucket-here'" in capsys.readouterr().err
    assert not checkpoint.exists()
    assert main(["spark", "show", missing, *settings]) == 2
    assert "no bucket 'no-such-bucket-here'" in capsys.readouterr().err
    nowhere = f"--storage-option=AWS_ENDPOINT_URL=http://127.0.0.1:{free_port()}"
    assert main(["spark", "show", f"s3://{s3.bucket()}/t", *settings, nowhere]) == 6
    assert "unavailable: cannot reach the object store" in capsys.readouterr().err
