"""Benchmark of the snapshots a writer takes on its own (``make bench`` section "snapshots";
docs/benchmarks.md §13; moonish.state.autosnapshot).

One ShardWriter (NEW_AND_OLD_IMAGES, fsync never, no sweep thread) holding 100,000 and then
1,000,000 string keys (filled with MSET), per size:

- the writer's pause: the wall time of the whole ``snapshot_in_background`` call (the fork;
  the child syncs the log), and
  how long the child takes to write the snapshot, medians of ROUNDS;
- the latency of single SET commands while a child writes, against the same commands with no
  child (p50 and p99 of each command's wall time, both sets in the same round).
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from moonish.log.records import ViewType
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.config import StreamConfig
from moonish.state.shard import ShardOptions, ShardWriter

SIZES = (100_000, 1_000_000)
ROUNDS = 5
COMMANDS = 5_000  # timed SETs per round, with and without a child


def _fill(writer: ShardWriter, keys: int) -> None:
    for start in range(0, keys, 1000):
        args = []
        for i in range(start, min(keys, start + 1000)):
            args += [b"key:%09d" % i, b"value-%014d" % i]
        writer.execute(0, [b"MSET", *args])


def _latencies(writer: ShardWriter, first: int) -> list[float]:
    out = []
    execute, clock = writer.execute, time.perf_counter
    for i in range(first, first + COMMANDS):
        began = clock()
        execute(0, [b"SET", b"key:%09d" % i, b"changed"])
        out.append(clock() - began)
    return out


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def bench_snapshots(root: Path) -> list[str]:
    lines = [
        f"one writer (NEW_AND_OLD_IMAGES, fsync never), string keys of 25-byte values; "
        f"{ROUNDS} rounds; latencies of {COMMANDS:,} single SETs with and without a child"
    ]
    for size in SIZES:
        shard = root / f"snapshots-{size}"
        shutil.rmtree(shard, ignore_errors=True)
        options = ShardOptions(
            WriterOptions(fsync=FsyncPolicy.NEVER),
            StreamConfig(ViewType.NEW_AND_OLD_IMAGES),
            expiry_sweep_ms=0,
            snapshots=SnapshotPolicy.off(),
        )
        pauses, children, busy, idle = [], [], [], []
        with ShardWriter(shard, options) as writer:
            _fill(writer, size)
            for round_number in range(ROUNDS):
                idle += _latencies(writer, round_number * COMMANDS)
                began = time.perf_counter()
                alone = writer.snapshot_in_background()  # timed alone
                pauses.append(time.perf_counter() - began)
                writer.wait_snapshot()
                assert alone.error is None, alone.error
                children.append(time.monotonic() - alone.started)
                began = time.perf_counter()
                running = writer.snapshot_in_background()  # the SETs while a child writes
                pauses.append(time.perf_counter() - began)
                busy += _latencies(writer, round_number * COMMANDS)
                writer.wait_snapshot()
                assert running.error is None, running.error
        shutil.rmtree(shard, ignore_errors=True)
        lines.append(
            f"{size:,} keys: pause (the call) median **{statistics.median(pauses) * 1e3:.1f} "
            f"ms** (max {max(pauses) * 1e3:.1f} ms); the child wrote the snapshot in a median "
            f"{statistics.median(children):.2f} s; SET latency p50/p99 while it wrote "
            f"{_p(busy, 0.5) * 1e6:.0f}/{_p(busy, 0.99) * 1e6:.0f} µs, without a child "
            f"{_p(idle, 0.5) * 1e6:.0f}/{_p(idle, 0.99) * 1e6:.0f} µs"
        )
    return lines
