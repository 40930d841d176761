"""Delta table micro-batch cost (``make bench`` section "delta"; docs/benchmarks.md §6).

The cost of applying one micro-batch of 1,000 changed keys (updates of existing keys) to a
moonish Delta table of 10,000 and of 1,000,000 keys: ``moonish.spark.delta.merge_batch`` (one
delta-rs MERGE with its ``txn``), after ``moonish.spark.tablerows.merge_rows``, which is the
driver's part of a micro-batch; Spark's part (the latest change per key of the micro-batch)
does not depend on the table's size and is not in it. Each table is built once (one MERGE of
all its keys, then compaction, so each bucket is one file), then ROUNDS batches of 1,000
random keys are timed; the report gives medians, the files each MERGE removed, and the ratio.
Both tables use BUCKETS buckets.
"""

from __future__ import annotations

import datetime
import random
import shutil
import statistics
import time
from pathlib import Path

ROUNDS = 7
CHANGES = 1_000
BUCKETS = 1024
EPOCH = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)


def latest(keys: list[bytes], lsn: int) -> object:
    """A micro-batch's latest change per key, as Spark's ``latest_changes`` collects it."""
    import orjson
    import pyarrow as pa

    images = [
        orjson.dumps(
            {
                "db": 0,
                "key": k.decode(),
                "type": "hash",
                "value": [["f", lsn], ["g", "x" * 40]],
                "expire_at_ms": None,
            }
        ).decode()
        for k in keys
    ]
    n = len(keys)
    return pa.table(
        {
            "db": pa.array([0] * n, pa.int32()),
            "key": pa.array(keys, pa.binary()),
            "shard": pa.array([0] * n, pa.int32()),
            "lsn": pa.array([lsn] * n, pa.int64()),
            "commit_ts": pa.array([EPOCH] * n, pa.timestamp("us", tz="UTC")),
            "deleted": pa.array([False] * n),
            "image": pa.array(images, pa.string()),
        }
    )


def batch_cost(table: Path, size: int) -> tuple[float, float]:
    """(median seconds, median files removed) of a 1,000-change MERGE into ``size`` keys."""
    from moonish.spark.delta import compact, create_table, merge_batch
    from moonish.spark.tablerows import merge_rows

    shutil.rmtree(table, ignore_errors=True)
    create_table(str(table), BUCKETS)
    keys = [b"user:%d" % n for n in range(size)]
    merge_batch(str(table), merge_rows(latest(keys, 1), BUCKETS), "bench", 0)
    compact(str(table))
    rng = random.Random(size)
    seconds, removed = [], []
    for round_ in range(1, ROUNDS + 1):
        rows = merge_rows(latest(rng.sample(keys, CHANGES), round_ + 1), BUCKETS)
        began = time.perf_counter()
        result = merge_batch(str(table), rows, "bench", round_)
        seconds.append(time.perf_counter() - began)
        removed.append(result.metrics["num_target_files_removed"])
    shutil.rmtree(table)
    return statistics.median(seconds), statistics.median(removed)


def bench_delta(data: Path) -> list[str]:
    small, small_files = batch_cost(data / "delta-10k", 10_000)
    large, large_files = batch_cost(data / "delta-1m", 1_000_000)
    return [
        f"| table keys | MERGE of {CHANGES:,} changes, median of {ROUNDS} | files rewritten |",
        "|---|---:|---:|",
        f"| 10,000 | {small * 1000:.0f} ms | {small_files:.0f} |",
        f"| 1,000,000 | {large * 1000:.0f} ms | {large_files:.0f} |",
        "",
        f"ratio 1M / 10K: {large / small:.2f} (target <= 3), {BUCKETS} buckets",
    ]


if __name__ == "__main__":
    print("\n".join(bench_delta(Path("bench-data"))))
