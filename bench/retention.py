"""Benchmarks of retention and of named consumers (``make bench``).

- prune: the cost of retention over a 1 GB log of 256 segments of 4 MiB (plain kv records of
  1 KiB, written once to bench-data/retention/ and reused): a plan that reads nothing but the
  directory (``max_bytes``), a plan that reads the newest record of every segment
  (``max_age_ms``), and a prune that removes half the log (128 segments, each unlinked and the
  directory fsynced), each on a fresh hard-linked copy so that the template stays whole.
- consumer list: ``moonish consumer list`` over a data directory of 4 shards (100,000 records
  each) with 1,000 consumers at random positions: the library call (``lag_table``) and the
  whole command in a new process.
"""

from __future__ import annotations

import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from moonish.cdc import lag
from moonish.clock import FixedClock
from moonish.datadir import consumers
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import plan, prune
from moonish.log.records import KvCommand
from moonish.log.segment import list_segments
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions

ROUNDS = 5
LOG_BYTES = 1 << 30
SEGMENT_BYTES = 4 << 20
START_US = 1_795_264_000_000_000
MOONISH = [sys.executable, "-c", "from cli.main import entry; entry()"]


def _write(shard: Path, records: int, value_bytes: int, segment_bytes: int, shard_id: int) -> None:
    """``records`` plain kv records of ``value_bytes``, in batches of 100, one ms apart."""
    options = WriterOptions(
        shard_id=shard_id, fsync=FsyncPolicy.NEVER, segment_bytes=segment_bytes, heartbeat_ms=None
    )
    value = b"v" * value_bytes
    with WalWriter(shard, options, FixedClock(START_US)) as writer:
        for first in range(0, records, 100):
            batch = [
                KvCommand(0, (b"SET", b"key:%d" % i, value))
                for i in range(first, min(first + 100, records))
            ]
            writer.append_batch(batch, START_US + first * 1000)


def prune_log(data: Path) -> Path:
    """A 1 GB shard of 4 MiB segments (made once, reused)."""
    shard = data / "retention" / "template" / "shard-0"
    if shard.exists() and len(list_segments(str(shard))) >= LOG_BYTES // SEGMENT_BYTES:
        return shard
    shutil.rmtree(shard.parent, ignore_errors=True)
    _write(shard, LOG_BYTES // 1100, 1024, SEGMENT_BYTES, 0)
    return shard


def _copy(template: Path, to: Path) -> Path:
    """A hard-linked copy of ``template`` (the pruner unlinks names, not the files' data)."""
    shutil.rmtree(to.parent, ignore_errors=True)
    to.parent.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(template), str(to)], check=True)
    return to


def _median_ms(measure: Callable[[], float]) -> float:
    return statistics.median(measure() for _ in range(ROUNDS)) * 1000


def bench_prune(data: Path) -> list[str]:
    """Plan and prune over a 1 GB log of 256 segments; medians of ROUNDS runs."""
    template = prune_log(data)
    bases = list_segments(str(template))
    total = sum((template / f"{base:016x}.seg").stat().st_size for base in bases)
    now_ms = START_US // 1000 + 10**9

    def timed_plan(policy: RetentionPolicy) -> Callable[[], float]:
        def run() -> float:
            started = time.perf_counter()
            plan(str(template), policy, now_ms=now_ms)
            return time.perf_counter() - started

        return run

    def timed_prune() -> float:
        shard = _copy(template, data / "retention" / "work" / "shard-0")
        started = time.perf_counter()
        report = prune(str(shard), RetentionPolicy(max_bytes=total // 2))
        seconds = time.perf_counter() - started
        assert len(report.deleted) >= len(bases) // 2 - 1
        return seconds

    size_ms = _median_ms(timed_plan(RetentionPolicy(max_bytes=total // 2)))
    age_ms = _median_ms(timed_plan(RetentionPolicy(max_age_ms=0)))
    prune_ms = _median_ms(timed_prune)
    shutil.rmtree(data / "retention" / "work", ignore_errors=True)
    return [
        f"log: {total / 2**30:.2f} GiB in {len(bases)} segments of {SEGMENT_BYTES >> 20} MiB",
        f"plan by max_bytes (a directory listing): {size_ms:.1f} ms",
        f"plan by max_age_ms (the newest record of each of {len(bases) - 1} sealed segments "
        f"read): {age_ms:.1f} ms",
        f"prune to half (about {len(bases) // 2} segments unlinked, the directory fsynced "
        f"after each): {prune_ms:.1f} ms",
    ]


def consumer_data(data: Path, count: int = 1000) -> Path:
    """4 shards of 100,000 records (values of 100 bytes) and
    ``count`` consumers at random positions (made once, reused)."""
    root = data / "consumers" / "data"
    if root.exists() and len(consumers.list_consumers(root)) == count:
        return root
    shutil.rmtree(root, ignore_errors=True)
    for k in range(4):
        _write(root / f"shard-{k}", 100_000, 100, 16 << 20, k)
    rng = random.Random(1000)
    for i in range(count):
        positions = [rng.randrange(0, 100_001) for _ in range(4)]
        consumers.create(root, f"consumer-{i:04d}", positions, owner="bench")
    return root


def bench_consumer_list(data: Path) -> list[str]:
    """``consumer list`` on 1,000 consumers of 4 shards; medians of ROUNDS runs."""
    root = consumer_data(data)

    def in_process() -> float:
        started = time.perf_counter()
        table = lag.lag_table(root)
        seconds = time.perf_counter() - started
        assert len(table) == 1000
        return seconds

    def command() -> float:
        started = time.perf_counter()
        subprocess.run(
            [*MOONISH, "consumer", "list", str(root)], check=True, stdout=subprocess.DEVNULL
        )
        return time.perf_counter() - started

    library_ms = _median_ms(in_process)
    command_ms = _median_ms(command)
    return [
        f"lag table of 1,000 consumers x 4 shards (4,000 rows; 100,000 records a shard), "
        f"in process: {library_ms:.0f} ms",
        f"`moonish consumer list` (a new process, the table printed): {command_ms:.0f} ms",
    ]
