"""The Delta table's MERGE (moonish.spark.delta, moonish.spark.tablerows) without Spark: an
older change never overwrites a newer one, deletes drop the row, a batch committed before is
skipped by its transaction identifier, the Change Data Feed has every change, a MERGE rewrites
only the buckets of its keys, the first rows by (db, key) are read across every file, and tables
of another format are refused by name."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

pytest.importorskip("deltalake")

import pyarrow as pa
from deltalake import DeltaTable

from moonish.errors import InvalidArgumentError, UnsupportedFormatError
from moonish.spark.delta import (
    compact,
    create_table,
    first_rows,
    merge_batch,
    open_table,
    readable_files,
    require_table,
)
from moonish.spark.tablerows import DATA_COLUMNS, MERGE_SCHEMA, bucket_of
from tests.support.delta import table_rows, txn_versions

APP = "5f3c2d1e-query"
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def change(
    key: bytes, lsn: int, value: Any = None, *, shard: int = 0, db: int = 0
) -> dict[str, Any]:
    """One latest-change row as Spark's ``latest_changes`` gives it; ``value`` None: a delete."""
    image = None
    if value is not None:
        image = orjson.dumps(
            {
                "db": db,
                "key": key.decode("utf-8", "replace"),
                "type": "string",
                "value": value,
                "expire_at_ms": 1767225600123,
            }
        ).decode()
    return {
        "db": db,
        "key": key,
        "shard": shard,
        "lsn": lsn,
        "commit_ts": EPOCH + datetime.timedelta(seconds=lsn),
        "deleted": value is None,
        "image": image,
    }


def rows(*changes: dict[str, Any], buckets: int = 4) -> pa.Table:
    result: pa.Table = table_rows(*changes, buckets=buckets)
    return result


def state(table: Path) -> dict[bytes, tuple[str | None, int]]:
    """key -> (value JSON, lsn) of the table's current version."""
    current = DeltaTable(str(table)).to_pyarrow_table()
    return {row["key"]: (row["value"], row["lsn"]) for row in current.to_pylist()}


def test_table_rows_take_the_image_apart(tmp_path: Path) -> None:
    table = rows(change(b"k\xff", 3, [["f", "v"]]), change(b"gone", 4))
    assert table.schema == MERGE_SCHEMA
    first, second = table.to_pylist()
    assert first["key_text"] is None and first["value"] == '[["f","v"]]'
    assert first["expire_at"] == datetime.datetime(2026, 1, 1, 0, 0, 0, 123000, datetime.UTC)
    assert first["bucket"] == bucket_of(b"k\xff", 4) and first["type"] == "string"
    assert second["key_text"] == "gone" and second["deleted"] and second["value"] is None


def test_an_older_change_never_overwrites_a_newer_one_and_deletes_drop_rows(
    tmp_path: Path,
) -> None:
    table = tmp_path / "table"
    create_table(str(table), buckets=4)
    merge_batch(str(table), rows(change(b"a", 10, "a10"), change(b"b", 10, "b10")), APP, 0)
    batch = rows(
        change(b"a", 5, "a5"),  # older: ignored
        change(b"b", 5),  # an older delete: ignored
        change(b"c", 7),  # a delete of a key the table lacks: nothing
        change(b"d", 8, "d8"),
    )
    merge_batch(str(table), batch, APP, 1)
    assert state(table) == {b"a": ('"a10"', 10), b"b": ('"b10"', 10), b"d": ('"d8"', 8)}
    merge_batch(str(table), rows(change(b"a", 11), change(b"b", 12, "b12")), APP, 2)
    assert state(table) == {b"b": ('"b12"', 12), b"d": ('"d8"', 8)}
    # the same LSN on a higher shard is newer (a key moved between shards)
    merge_batch(str(table), rows(change(b"d", 8, "d8'", shard=1)), APP, 3)
    assert state(table)[b"d"] == ('"d8\'"', 8)


def test_a_batch_committed_before_is_skipped(tmp_path: Path) -> None:
    table = tmp_path / "table"
    create_table(str(table))
    first = merge_batch(str(table), rows(change(b"a", 1, "x")), APP, 0)
    batch = rows(change(b"a", 2, "y"), change(b"b", 3, "z"))
    applied = merge_batch(str(table), batch, APP, 1)
    replayed = merge_batch(str(table), batch, APP, 1)  # Spark replays it after a crash
    earlier = merge_batch(str(table), rows(change(b"c", 4, "w")), APP, 0)
    assert first.applied and applied.applied and not replayed.applied and not earlier.applied
    assert replayed.table_version == applied.table_version == 2
    assert txn_versions(table, APP) == [0, 1]
    assert DeltaTable(str(table)).transaction_version(APP) == 1
    assert state(table) == {b"a": ('"y"', 2), b"b": ('"z"', 3)}
    other = merge_batch(str(table), rows(change(b"c", 4, "w")), "another-query", 0)
    assert other.applied and b"c" in state(table)


def test_the_change_data_feed_has_every_applied_change(tmp_path: Path) -> None:
    table = tmp_path / "table"
    create_table(str(table))
    merge_batch(str(table), rows(change(b"a", 1, "a1"), change(b"b", 2, "b1")), APP, 0)
    merge_batch(
        str(table),
        rows(change(b"a", 3, "a2"), change(b"b", 4), change(b"c", 5, "c1"), change(b"a", 0, "x")),
        APP,
        1,
    )
    feed = pa.table(DeltaTable(str(table)).load_cdf(starting_version=0)).to_pylist()
    changes = sorted((r["_commit_version"], r["_change_type"], r["key"], r["value"]) for r in feed)
    assert changes == [
        (1, "insert", b"a", '"a1"'),
        (1, "insert", b"b", '"b1"'),
        (2, "delete", b"b", '"b1"'),
        (2, "insert", b"c", '"c1"'),
        (2, "update_postimage", b"a", '"a2"'),
        (2, "update_preimage", b"a", '"a1"'),
    ]


def test_a_merge_rewrites_only_the_buckets_of_its_keys(tmp_path: Path) -> None:
    table = tmp_path / "table"
    create_table(str(table), buckets=16)
    keys = [b"key:%d" % n for n in range(2000)]
    merge_batch(str(table), rows(*(change(k, 1, "v") for k in keys), buckets=16), APP, 0)
    compact(str(table))
    assert len(readable_files(require_table(str(table)))) == 16  # one file per bucket
    changed = [k for k in keys if bucket_of(k, 16) in (3, 9)][:50]
    result = merge_batch(
        str(table), rows(*(change(k, 2, "w") for k in changed), buckets=16), APP, 1
    )
    assert result.metrics["num_target_files_removed"] == 2
    assert result.metrics["num_target_rows_updated"] == 50
    assert result.metrics["num_target_files_skipped_during_scan"] == 14


@pytest.mark.slow
def test_first_rows_are_the_smallest_db_and_key_across_every_file(tmp_path: Path) -> None:
    table = tmp_path / "table"
    create_table(str(table), buckets=8)
    assert first_rows(require_table(str(table)), 5).num_rows == 0  # nothing applied yet
    keys = [bytes([n % 256, n // 256]) + b"k" for n in range(0, 600, 7)]  # \x00.. to \xff..
    for batch_id in range(3):
        part = keys[batch_id::3]
        batch = rows(*(change(k, 1, "v", db=k[0] % 2) for k in part), buckets=8)
        merge_batch(str(table), batch, APP, batch_id)
    assert len(readable_files(require_table(str(table)))) > 8  # rows in many files
    expected = sorted((key[0] % 2, key) for key in keys)  # bytes order as unsigned, as Spark's
    for limit in (1, 5, len(keys), len(keys) + 10):
        got = first_rows(require_table(str(table)), limit, ("db", "key", "lsn"))
        assert got.column_names == ["db", "key", "lsn"]
        assert [(row["db"], row["key"]) for row in got.to_pylist()] == expected[:limit]
    assert first_rows(require_table(str(table)), 1).column_names == list(DATA_COLUMNS)
    with pytest.raises(InvalidArgumentError, match="limit must be at least 1"):
        first_rows(require_table(str(table)), 0)


def test_tables_of_another_format_are_refused_by_name(tmp_path: Path) -> None:
    old = tmp_path / "old"
    old.mkdir()
    (old / "_moonish_table.json").write_bytes(b'{"format": "moonish-table", "version": 1}')
    for call in (open_table, require_table, create_table):
        with pytest.raises(UnsupportedFormatError, match="moonish's own format") as raised:
            call(str(old))
        assert raised.value.path == str(old)
    foreign = tmp_path / "foreign"
    DeltaTable.create(str(foreign), pa.schema([("x", pa.int64())]))
    with pytest.raises(UnsupportedFormatError, match="not made by moonish"):
        open_table(str(foreign))
    with pytest.raises(InvalidArgumentError, match="not a materialized table"):
        require_table(str(tmp_path))
    assert open_table(str(tmp_path / "missing")) is None


def test_spark_reads_every_column_but_the_partition_column() -> None:
    pytest.importorskip("pyspark")
    from moonish.spark.table import TABLE_COLUMNS

    names = tuple(column.split()[0] for column in TABLE_COLUMNS.split(", "))
    assert (
        names
        == DATA_COLUMNS
        == tuple(n for n in MERGE_SCHEMA.names if n not in ("bucket", "deleted"))
    )
