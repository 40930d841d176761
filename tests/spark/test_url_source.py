"""The moonish data source over a ``moonish serve`` server (``option("url", ...)``,
moonish.spark.urlsource) on a real local SparkSession: the rows are the directory source's,
``spark materialize URL`` keeps the same table and acknowledges the named consumer on the
server with the end token, and an unreachable server or a refused bearer token fails before
Spark starts, with the exit codes of the other remote commands."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyspark")
pytest.importorskip("deltalake")

from cli.main import main
from moonish.serve import ServeOptions
from tests.support.servers.serve_util import TOKEN, Running
from tests.support.servers.spark import (
    mixed,
    run,
    spark,
    table_keyspace,
    wal_changes,
)

__all__ = ["mixed", "spark"]  # the module-scoped fixtures
pytestmark = pytest.mark.spark


def token_file(tmp_path: Path, text: str = TOKEN) -> Path:
    path = tmp_path / "token"
    path.write_text(text + "\n")
    return path


def test_the_url_source_reads_the_directory_sources_rows(
    spark: Any, mixed: Path, tmp_path: Path
) -> None:
    options = ServeOptions(port=0, token=TOKEN)
    with Running(mixed, options) as server:
        url = (
            spark.read.format("moonish")
            .option("url", server.url)
            .option("tokenFile", str(token_file(tmp_path)))
            .option("recordsPerPartition", 25_000)  # several tasks per shard
            .load()
        )
        wal = spark.read.format("moonish").option("recordsPerPartition", 25_000).load(str(mixed))
        assert url.rdd.getNumPartitions() > 4
        assert url.count() == wal.count() > 50_000
        assert url.exceptAll(wal).count() == 0 and wal.exceptAll(url).count() == 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_cli_materialize_from_a_server_acknowledges_its_consumer(
    spark: Any, mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import moonish

    run(spark, wal_changes(spark, mixed), tmp_path / "by-dir", tmp_path / "by-dir-ck")
    with Running(mixed, ServeOptions(port=0, token=TOKEN)) as server:
        table = tmp_path / "table"
        status = main(
            [
                "spark",
                "materialize",
                server.url,
                str(table),
                "--checkpoint",
                str(tmp_path / "ck"),
                "--max-records-per-trigger",
                "30000",
                "--token-file",
                str(token_file(tmp_path)),
                "--master",
                "local[2]",
            ]
        )
        assert status == 0
        captured = capsys.readouterr()
        assert "(url source)" in captured.out
        assert "batch 2: " in captured.err and "shard 3: LSN 1.." in captured.err
        with moonish.connect(server.url, TOKEN) as client:
            consumer = client.consumer("spark-table")
            assert consumer["token"] == client.info()["now"]  # acknowledged to the end
    assert table_keyspace(spark, table) == table_keyspace(spark, tmp_path / "by-dir")


def free_port() -> int:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        return int(listener.getsockname()[1])


def test_an_unreachable_server_and_a_refused_token_fail_before_spark(
    mixed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    table, checkpoint = str(tmp_path / "table"), str(tmp_path / "ck")
    nobody = f"http://127.0.0.1:{free_port()}"
    assert main(["spark", "materialize", nobody, table, "--checkpoint", checkpoint]) == 6
    assert nobody in capsys.readouterr().err
    with Running(mixed, ServeOptions(port=0, token=TOKEN)) as server:
        wrong = str(token_file(tmp_path, "another-token-0123456789abcdef"))
        args = ["spark", "materialize", server.url, table, "--checkpoint", checkpoint]
        assert main([*args, "--token-file", wrong]) == 2
        assert "wants a valid bearer token" in capsys.readouterr().err
        assert main(args) == 2  # no token at all
    local = ["spark", "materialize", str(mixed), table, "--checkpoint", checkpoint]
    assert main([*local, "--token-file", wrong]) == 2  # a token goes with a URL only
    assert "--token-file goes with a server URL" in capsys.readouterr().err
    assert not (tmp_path / "table").exists()
