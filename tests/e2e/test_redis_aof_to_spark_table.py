"""The whole pipeline: the real AOF imported into 4 shards and materialized by Spark through every
path (the moonish data source over the directory and over a ``moonish serve`` server's URL, the
export files) into Delta tables holds the keyspace a real redis-server has after loading the
same AOF; and so does a ``moonish spark materialize URL`` job SIGKILLed twice mid-run and
restarted, with each micro-batch committed to the table once."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import moonish
import moonish.spark
from moonish.serve import ServeOptions
from moonish.sinks.export import Exporter, ExportOptions
from tests.support.cli import MOONISH
from tests.support.delta import txn_versions
from tests.support.paths import ROOT
from tests.support.processes import gone
from tests.support.servers.redis_server import redis_entry, redis_server
from tests.support.servers.serve_util import TOKEN, Running
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

    with Running(mixed) as server:  # executors read the server, not the directory
        changes = (
            spark.readStream.format("moonish")
            .option("url", server.url)
            .option("maxRecordsPerTrigger", 50_000)
            .load()
        )
        run(spark, changes, tmp_path / "t3", tmp_path / "c3")
    assert DeltaTable(str(tmp_path / "t3")).version() >= 2
    assert table_keyspace(spark, tmp_path / "t3") == table


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (``/proc/<pid>/task/*/children``), children first."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found += [child, *descendants(child)]
    return found


def kill_job(job: subprocess.Popen[bytes]) -> None:
    """SIGKILL the whole Spark job: the command's process group and the JVM's (it runs in a
    session of its own, with its Python workers), then wait until every process is gone."""
    below = descendants(job.pid)
    groups = {job.pid}
    for pid in below:
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    for group in groups:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    assert job.wait(30) == -signal.SIGKILL
    deadline = time.monotonic() + 30
    while not all(gone(pid) for pid in below):
        assert time.monotonic() < deadline, "a process of the killed job lingers"
        time.sleep(0.1)


def committed(table: Path, checkpoint: Path) -> list[int]:
    """The batch ids the table's log has for the query of ``checkpoint`` (none before it
    started)."""
    from moonish.spark.table import query_id

    if not (checkpoint / "metadata").exists() or not (table / "_delta_log").exists():
        return []
    return txn_versions(table, query_id(str(checkpoint)))


def test_a_job_killed_twice_mid_run_restarts_into_the_keyspace_redis_loads(
    spark: Any, mixed: Path, redis_keyspace: dict[tuple[int, bytes], Any], tmp_path: Path
) -> None:
    from moonish.spark.table import query_id

    table, checkpoint, token = tmp_path / "table", tmp_path / "ck", tmp_path / "token"
    token.write_text(TOKEN)
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    log = tmp_path / "job.log"
    with Running(mixed, ServeOptions(port=0, token=TOKEN)) as server:
        args = [
            *MOONISH,
            *("spark", "materialize", server.url, str(table), "--checkpoint", str(checkpoint)),
            *("--token-file", str(token), "--max-records-per-trigger", "8000"),
            *("--master", "local[2]", "--optimize-every", "4"),
        ]

        def start() -> subprocess.Popen[bytes]:
            with log.open("ab") as output:
                return subprocess.Popen(
                    args,
                    cwd=tmp_path,  # not the repository: Spark's workers would import from it
                    env=env,
                    stdout=output,
                    stderr=output,
                    start_new_session=True,  # the job's own process group, killed whole
                )

        # Killed at once when a batch's table commit appears (most likely before Spark
        # commits the batch: the next run replays it), then mid-batch.
        for more, delay_s in ((1, 0.0), (2, 0.7)):
            before = len(committed(table, checkpoint))
            job = start()
            deadline = time.monotonic() + 300
            while len(committed(table, checkpoint)) < before + more:
                assert job.poll() is None, log.read_text()
                assert time.monotonic() < deadline
                time.sleep(0.05)
            time.sleep(delay_s)
            kill_job(job)
        killed_at = len(committed(table, checkpoint))
        job = start()
        assert job.wait(600) == 0, log.read_text()
        with moonish.connect(server.url, TOKEN) as client:
            assert client.consumer("spark-table")["token"] == client.info()["now"]
    versions = txn_versions(table, query_id(str(checkpoint)))
    assert versions == list(range(len(versions))) and len(versions) >= 10  # each batch once
    assert len(versions) > killed_at  # the kills came part of the way
    keyspace = table_keyspace(spark, table)
    assert keyspace == like_table(redis_keyspace, keyspace)
