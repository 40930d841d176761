"""Spark ingestion benchmark (``make bench`` section "spark"; docs/benchmarks.md §6).

Input: the >= 1M kv_change records with NEW_AND_OLD_IMAGES of bench.state.images_wal (one
shard; the WAL source splits it into ranges of ``recordsPerPartition``), and the same
records exported once as envelope files (``moonish cdc export``, 50,000 per file).

Each path runs on ``local[2]`` (both cores: this section lifts the one-core pin of the other
sections before Spark starts) in one warm session: a first run of each configuration is not
counted, then ROUNDS runs each. A run is one streaming query with ``availableNow`` from an
empty checkpoint to termination. Each is reported two ways: Spark's processing time (the
micro-batches' ``triggerExecution``, as query progress reports it) and the wall time from
``start()`` to the end of ``awaitTermination()``, which adds starting the query (Spark
starts a Python process for a Python streaming source) and its last check for data.

- WAL source -> no-op sink (``format("noop")``): reading and building the rows;
- WAL source -> the materialized table (``moonish.spark.materialize``): end to end;
- envelope files -> no-op sink, and -> the table, the same way.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

from moonish.cdc.shard_read import info
from moonish.sinks.export import Exporter

ROUNDS = 5


def export_files(shard: Path, out: Path) -> tuple[int, float]:
    """(records, seconds) of exporting ``shard``'s data directory to a new ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    began = time.perf_counter()
    with Exporter(str(shard.parent), str(out)) as exporter:
        stats = exporter.run()
    return stats.records, time.perf_counter() - began


def timed_query(start: Any, work: Path) -> tuple[float, float]:
    """(wall, processing) seconds of the query ``start(checkpoint, table)``: wall from
    ``start()`` to the end of ``awaitTermination()``; processing is Spark's own measure, the
    sum of its micro-batches' ``durationMs.triggerExecution`` (query progress), which leaves
    out starting the query and its source."""
    shutil.rmtree(work, ignore_errors=True)
    began = time.perf_counter()
    query = start(str(work / "checkpoint"), str(work / "table"))
    query.awaitTermination()
    wall = time.perf_counter() - began
    processing = sum(p["durationMs"]["triggerExecution"] for p in query.recentProgress) / 1000
    shutil.rmtree(work)
    return wall, processing


def bench_spark(data: Path, shard: Path) -> list[str]:
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, range(os.cpu_count() or 1))  # local[2]: both cores
    try:
        return _bench_spark(data, shard)
    finally:
        os.sched_setaffinity(0, pinned)


def _bench_spark(data: Path, shard: Path) -> list[str]:
    import moonish.spark
    from moonish.spark import materialize, read_envelope_files

    records = info(shard)["next_lsn"] - 1
    exported, export_seconds = export_files(shard, data / "spark-export")
    assert exported == records, (exported, records)
    spark = moonish.spark.session("local[2]", "moonish-bench", spark__sql__shuffle__partitions="2")

    def wal() -> Any:
        return spark.readStream.format("moonish").load(str(shard.parent))

    def files() -> Any:
        return read_envelope_files(spark, str(data / "spark-export"))

    def noop(source: Any) -> Any:
        return lambda checkpoint, _table: (
            source()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )

    def table(source: Any) -> Any:
        return lambda checkpoint, table_dir: materialize(source(), table_dir, checkpoint)

    runs = [
        ("WAL data source -> no-op sink", noop(wal)),
        ("WAL data source -> materialized table", table(wal)),
        ("envelope files -> no-op sink", noop(files)),
        ("envelope files -> materialized table", table(files)),
    ]
    lines = [
        f"{records:,} kv_change records (NEW_AND_OLD_IMAGES, one shard, "
        f"{sum(p.stat().st_size for p in shard.glob('*.seg')) / 2**20:,.0f} MiB of WAL), "
        f"local[2], warm session, {ROUNDS} timed runs after one untimed, availableNow"
    ]
    lines.append(
        f"`moonish cdc export` (in process, one core) of those records into files of "
        f"50,000: {records / export_seconds:,.0f} envelopes/s"
    )
    try:
        for title, start in runs:
            timed_query(start, data / "spark-run")  # warm-up
            walls, processing = zip(
                *(timed_query(start, data / "spark-run") for _ in range(ROUNDS)), strict=True
            )
            lines.append(
                f"{title}: processing time median {records / statistics.median(processing):,.0f}"
                f" events/s ({_runs(processing)}); wall time from start() median "
                f"{records / statistics.median(walls):,.0f} events/s ({_runs(walls)})"
            )
    finally:
        spark.stop()
    return lines


def _runs(seconds: tuple[float, ...]) -> str:
    return "runs " + ", ".join(f"{s:.2f}" for s in seconds) + " s"
