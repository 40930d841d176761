"""``moonish spark show``: the first rows of a materialized Delta table by (db, key) as JSON
lines, read with delta-rs in a process that never imports pyspark; a directory without a Delta
table is exit 2, a Delta table moonish did not make exit 5. (A table of the earlier own format:
tests/cli/test_spark_commands.py, beside materialize's refusal of it.)"""

from __future__ import annotations

import datetime
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

pytest.importorskip("deltalake")

import pyarrow as pa
from deltalake import DeltaTable

from moonish.spark.delta import create_table, merge_batch
from moonish.state.shard import ShardOptions, ShardWriter
from tests.support.cli import run
from tests.support.delta import table_rows
from tests.support.paths import ROOT

EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def show_without_spark(*args: str) -> subprocess.CompletedProcess[bytes]:
    """``moonish spark show`` in a child process that fails if pyspark was imported."""
    code = (
        "import sys\n"
        "from cli.main import main\n"
        f"status = main(['spark', 'show', *{list(args)!r}])\n"
        "assert 'pyspark' not in sys.modules, 'pyspark imported'\n"
        "sys.exit(status)\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, timeout=60, check=False, cwd=ROOT
    )


def set_change(
    db: int, key: bytes, lsn: int, value: object, expire_ms: int | None
) -> dict[str, object]:
    image = {"db": db, "key": "", "type": "hash", "value": value, "expire_at_ms": expire_ms}
    return {
        "db": db,
        "key": key,
        "shard": lsn % 2,
        "lsn": lsn,
        "commit_ts": EPOCH,
        "deleted": False,
        "image": orjson.dumps(image).decode(),
    }


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """A moonish Delta table of 4 buckets: keys in two dbs, one binary, one with an expiry
    time, written by two MERGEs (so in several files)."""
    path = tmp_path / "table"
    create_table(str(path), buckets=4)
    first = [
        set_change(1, b"a", 3, [["f", "v"]], None),
        set_change(0, b"\xff\x00bin", 4, [["x", "1"]], 1767225600123),
        set_change(0, b"zeta", 5, [], None),
    ]
    second = [set_change(0, b"alpha", 8, [["g", "w"]], None), set_change(1, b"\x01", 9, [], None)]
    for batch_id, changes in enumerate((first, second)):
        merge_batch(str(path), table_rows(*changes, buckets=4), "app", batch_id)
    return path


@pytest.mark.slow
def test_show_prints_the_first_rows_by_db_and_key_without_spark(table: Path) -> None:
    out = show_without_spark(str(table), "--limit", "4")
    assert out.returncode == 0, out.stderr
    lines = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert lines == [
        {
            "db": 0,
            "key": "alpha",
            "type": "hash",
            "value": [["g", "w"]],
            "expire_at_ms": None,
            "shard": 0,
            "lsn": 8,
        },
        {
            "db": 0,
            "key": "zeta",
            "type": "hash",
            "value": [],
            "expire_at_ms": None,
            "shard": 1,
            "lsn": 5,
        },
        {
            "db": 0,
            "key": {"_b64": "/wBiaW4="},
            "type": "hash",
            "value": [["x", "1"]],
            "expire_at_ms": 1767225600123,
            "shard": 0,
            "lsn": 4,
        },
        {
            "db": 1,
            "key": "\u0001",
            "type": "hash",
            "value": [],
            "expire_at_ms": None,
            "shard": 1,
            "lsn": 9,
        },
    ]
    assert out.stdout.startswith(b'{"db":0,"key":"alpha","type":"hash","value":[["g","w"]],')
    assert len(show_without_spark(str(table)).stdout.splitlines()) == 5  # every row: 5 < 10


def test_show_of_a_table_no_batch_reached_prints_nothing(tmp_path: Path) -> None:
    create_table(str(tmp_path / "table"))
    out = show_without_spark(str(tmp_path / "table"))
    assert out.returncode == 0 and out.stdout == b"", out.stderr


@pytest.mark.slow
def test_show_of_a_directory_that_is_not_a_table_is_exit_2(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ShardWriter(data / "shard-0", ShardOptions(expiry_sweep_ms=0)) as writer:
        writer.execute(0, [b"SET", b"k", b"v"])
    (tmp_path / "empty").mkdir()
    for path in (data, tmp_path / "empty"):
        out = run("spark", "show", str(path))
        assert out.returncode == 2, out.stderr
        assert b"not a materialized table" in out.stderr and str(path).encode() in out.stderr
        assert out.stdout == b""


def test_show_of_a_delta_table_moonish_did_not_make_is_exit_5(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign"
    DeltaTable.create(str(foreign), pa.schema([("db", pa.int32()), ("key", pa.binary())]))
    out = run("spark", "show", str(foreign))
    assert out.returncode == 5, out.stderr
    assert (
        b"a Delta table not made by moonish" in out.stderr and str(foreign).encode() in out.stderr
    )
    assert out.stdout == b""
