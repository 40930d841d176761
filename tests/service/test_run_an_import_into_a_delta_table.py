"""``moonish run`` with ``[source] aof`` and ``[spark]``: the import runs once, then the Spark
part keeps the Delta table at the latest state of every key (``spark materialize --follow``
as a supervised part), and SIGTERM stops it cleanly; the table holds exactly the data
directory's keys."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("pyspark")
deltalake = pytest.importorskip("deltalake")

from tests.support.moonish_run import running  # noqa: E402
from tests.support.redis.aof import SLICE  # noqa: E402
from tests.support.redis.capture import our_state, wait_for  # noqa: E402

pytestmark = pytest.mark.spark


def table_keys(table: Path) -> set[tuple[int, bytes]] | None:
    if not (table / "_delta_log").is_dir():
        return None
    rows = deltalake.DeltaTable(str(table)).to_pyarrow_table(columns=["db", "key"]).to_pylist()
    return {(row["db"], bytes(row["key"])) for row in rows}


def test_an_import_then_the_spark_part_keeps_the_table(tmp_path: Path) -> None:
    pipeline = tmp_path / "pipeline.toml"
    pipeline.write_text(
        'data_dir = "data"\n\n'
        f'[source]\naof = "{SLICE}"\nshards = 2\n\n'
        '[spark]\ntable_dir = "table"\ncheckpoint = "checkpoint"\nmaster = "local[1]"\n\n'
        "[supervisor]\nstop_timeout_ms = 60000\n"
    )
    with running(pipeline) as run:
        wait_for(lambda: run.events("source", "finished"), "the import", 120)
        (stopped,) = run.events("source", "finished")
        assert stopped["exit_code"] == 0
        keys = set(our_state(tmp_path / "data"))
        assert keys
        wait_for(lambda: table_keys(tmp_path / "table") == keys, "the table", 240)
        assert run.stop_all()["spark"] == 0
        assert not run.events("spark", "restarting")
