"""The Change Data Feed of a table ``moonish.spark.materialize`` wrote, on a real local
SparkSession: per micro-batch, one ``insert`` per new key, an ``update_preimage`` and
``update_postimage`` pair per changed key (its latest change in the batch), one ``delete`` per
deleted key, nothing for a key created and deleted inside one batch; replayed from empty, the
feed gives the table Spark reads. The same from the directory source and from a ``moonish serve``
server's URL."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

import moonish.spark
from moonish.state.shard import ShardOptions, ShardWriter
from moonish.values.model import untext
from tests.support.delta import txn_versions
from tests.support.servers.serve_util import Running
from tests.support.servers.spark import run, spark, wal_changes

__all__ = ["spark"]  # the module-scoped fixture
pytest.importorskip("pyspark")
pytestmark = pytest.mark.spark

FIRST = [
    (0, [b"SET", b"a", b"a1"]),
    (0, [b"SET", b"b", b"b1"]),
    (0, [b"SET", b"c", b"c1"]),
    (0, [b"SET", b"d", b"d1"]),
    (2, [b"SET", b"a", b"db2-a1"]),  # the same key in another db is another row
]
SECOND = [
    (0, [b"SET", b"a", b"a2"]),  # an update
    (0, [b"DEL", b"b"]),  # a delete
    (0, [b"SET", b"c", b"c2"]),
    (0, [b"APPEND", b"c", b"+"]),  # two changes of one key in a batch: one update, the latest
    (0, [b"SET", b"e", b"e1"]),  # an insert
    (0, [b"SET", b"gone", b"g"]),
    (0, [b"DEL", b"gone"]),  # created and deleted inside the batch: no row at all
    (2, [b"DEL", b"a"]),
]


def write(data: Path, commands: list[tuple[int, list[bytes]]]) -> None:
    with ShardWriter(data / "shard-0", ShardOptions(expiry_sweep_ms=0)) as writer:
        for db, command in commands:
            writer.execute(db, command)


@contextlib.contextmanager
def source(spark: Any, data: Path, kind: str) -> Iterator[Any]:
    """A function giving a new streaming DataFrame of ``data``'s changes: read from the
    directory, or from a server over it (running inside the block)."""
    if kind == "dir":
        yield lambda: wal_changes(spark, data)
        return
    with Running(data) as server:
        yield lambda: spark.readStream.format("moonish").option("url", server.url).load()


@pytest.mark.parametrize("kind", ["dir", "url"])
def test_the_change_data_feed_holds_each_applied_change_once(
    spark: Any, tmp_path: Path, kind: str
) -> None:
    import pyarrow as pa
    from deltalake import DeltaTable

    from moonish.spark.table import query_id  # imports pyspark: only once the module is kept

    data, table, checkpoint = tmp_path / "data", tmp_path / "table", tmp_path / "ck"
    write(data, FIRST)
    with source(spark, data, kind) as changes:
        run(spark, changes(), table, checkpoint)  # one micro-batch each, on one checkpoint
        write(data, SECOND)
        run(spark, changes(), table, checkpoint)
    assert txn_versions(table, query_id(str(checkpoint))) == [0, 1]
    feed = pa.table(DeltaTable(str(table)).load_cdf(starting_version=0)).to_pylist()
    changes = sorted(
        (
            row["_commit_version"],
            row["_change_type"],
            row["db"],
            row["key"],
            untext(orjson.loads(row["value"])),
        )
        for row in feed
    )
    assert changes == [
        (1, "insert", 0, b"a", b"a1"),
        (1, "insert", 0, b"b", b"b1"),
        (1, "insert", 0, b"c", b"c1"),
        (1, "insert", 0, b"d", b"d1"),
        (1, "insert", 2, b"a", b"db2-a1"),
        (2, "delete", 0, b"b", b"b1"),
        (2, "delete", 2, b"a", b"db2-a1"),
        (2, "insert", 0, b"e", b"e1"),
        (2, "update_postimage", 0, b"a", b"a2"),
        (2, "update_postimage", 0, b"c", b"c2+"),
        (2, "update_preimage", 0, b"a", b"a1"),
        (2, "update_preimage", 0, b"c", b"c1"),
    ]
    # Each row carries the LSN of the change it holds: the postimage the later one.
    lsns = {(r["_change_type"], r["db"], r["key"]): r["lsn"] for r in feed}
    assert lsns[("update_postimage", 0, b"c")] > lsns[("update_preimage", 0, b"c")]

    # Applied in commit order from empty, the feed is the table Spark reads.
    replayed: dict[tuple[int, bytes], tuple[str, int]] = {}
    for row in sorted(feed, key=lambda r: r["_commit_version"]):
        if row["_change_type"] in ("insert", "update_postimage"):
            replayed[(row["db"], row["key"])] = (row["value"], row["lsn"])
        elif row["_change_type"] == "delete":
            del replayed[(row["db"], row["key"])]
    current = moonish.spark.read_table(spark, str(table)).collect()
    assert replayed == {(r.db, bytes(r.key)): (r.value, r.lsn) for r in current}
