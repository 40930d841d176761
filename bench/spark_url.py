"""The Spark data source over a server's URL against the same source over the directory
(``make bench`` section "spark-url"; docs/benchmarks.md §6).

Input: bench.spark's (the >= 1M kv_change records with NEW_AND_OLD_IMAGES of
bench.state.images_wal, one shard, so two tasks of ``recordsPerPartition`` = 500,000 records
each for either source). The server is ``moonish serve`` over that data directory in a
process of its own on 127.0.0.1, not pinned: on this 2-core machine it shares the cores with
Spark's two tasks, which is the cost of the URL path (the server reads the WAL and encodes
envelopes; the tasks parse them).

Both run on ``local[2]`` in one warm session into the no-op sink (``format("noop")``),
``availableNow`` from an empty checkpoint, a first run of each not counted, then ROUNDS runs
each, alternating; events/s from Spark's processing time and from wall time as in
bench.spark, and the ratio of the medians (directory / URL).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
from pathlib import Path
from typing import Any

import orjson

from bench.paths import MOONISH, ROOT
from bench.spark import timed_query
from moonish.cdc.shard_read import info

ROUNDS = 5


def _serve(data: Path) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(
        [*MOONISH, "serve", str(data), "--port", "0"],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    url = orjson.loads(process.stdout.readline())["url"]
    process.stdout.close()
    return process, url


def bench_spark_url(data: Path, shard: Path) -> list[str]:
    pinned = os.sched_getaffinity(0)
    os.sched_setaffinity(0, range(os.cpu_count() or 1))  # local[2]: both cores
    server, url = _serve(shard.parent)
    try:
        return _bench(data, shard, url)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        os.sched_setaffinity(0, pinned)


def _bench(data: Path, shard: Path, url: str) -> list[str]:
    import moonish.spark

    records = info(shard)["next_lsn"] - 1
    spark = moonish.spark.session("local[2]", "moonish-bench", spark__sql__shuffle__partitions="2")

    def noop(reader: Any) -> Any:
        return lambda checkpoint, _table: (
            reader()
            .writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )

    runs = {
        "directory": noop(lambda: spark.readStream.format("moonish").load(str(shard.parent))),
        "URL": noop(lambda: spark.readStream.format("moonish").option("url", url).load()),
    }
    measured: dict[str, list[tuple[float, float]]] = {name: [] for name in runs}
    try:
        for start in runs.values():
            timed_query(start, data / "spark-url-run")  # warm-up
        for _ in range(ROUNDS):
            for name, start in runs.items():
                measured[name].append(timed_query(start, data / "spark-url-run"))
    finally:
        spark.stop()
    lines = [
        f"{records:,} kv_change records (NEW_AND_OLD_IMAGES, one shard), local[2], warm "
        f"session, no-op sink, {ROUNDS} timed runs each after one untimed, alternating; the "
        "server (`moonish serve`, 127.0.0.1) in a process of its own on the same 2 cores"
    ]
    medians = {}
    for name, pairs in measured.items():
        walls, processing = zip(*pairs, strict=True)
        medians[name] = statistics.median(processing), statistics.median(walls)
        lines.append(
            f"{name} source: processing time median {records / medians[name][0]:,.0f} events/s"
            f" (runs {', '.join(f'{s:.2f}' for s in processing)} s); wall time median "
            f"{records / medians[name][1]:,.0f} events/s"
        )
    lines.append(
        f"directory / URL: {medians['URL'][0] / medians['directory'][0]:.2f}x (processing "
        f"time), {medians['URL'][1] / medians['directory'][1]:.2f}x (wall time)"
    )
    return lines
