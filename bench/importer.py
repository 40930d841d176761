"""Benchmark of ``moonish wal import-aof`` against redis-server loading the same AOF (``make
bench`` section "import", ``python -m bench.run import``; docs/benchmarks.md §10).

The AOF: several hundred thousand commands written by a real redis-server
(bench.aof_workload: the mix of the real fixture, ``aof-use-rdb-preamble no``), built once
into ``bench-data/import-aof-<commands>``. Each round, in a shuffled order:

- **redis-server** (pinned to core 0 like the benchmark process) starts with ``appendonly
  yes`` on a fresh copy of the ``appendonlydir`` (copying not timed). Two figures: Redis's own
  load time, from its log line ``DB loaded from append only file: <s> seconds`` (what
  ``loadDataFromDisk`` measures around the load: the figure compared), and the wall time from
  ``exec`` to the first ``+PONG`` (Redis answers ``-LOADING`` until the load is done), which
  adds the process's start.
- **moonish** ``import_aof`` in this process (pinned to one core by bench.run) into a new data
  directory, NEW_AND_OLD_IMAGES, the import's default durability (appends unsynced, every
  shard fdatasynced when the import closes it: ``moonish wal import-aof`` as a user runs it),
  with ``--shards 1`` and ``--shards 4``, and ``--shards 4 --processes 2``
  (moonish.redis.aof.parallel: its workers may use both cores). The time covers opening the
  shards, the replay, the final expiry pass, the syncs and closing: everything but Python's
  start and imports.

One untimed warm-up round first (page cache, allocator arenas). The report gives medians of
the rounds and the median of the per-round ratios moonish time / Redis's load time, and
beside them CPU time (moonish: this process and its workers; redis-server: its CPU time
to the first PONG, from ``/proc``), which other work on a shared core inflates less.
"""

from __future__ import annotations

import gc
import os
import random
import re
import shutil
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from bench.aof_workload import build_aof, free_port, redis_args, wait_ping
from moonish.log.records import ViewType
from moonish.redis.aof.importer import import_aof
from moonish.state.config import StreamConfig

COMMANDS = 600_000
ROUNDS = 5
_LOADED = re.compile(rb"DB loaded from append only file: ([0-9.]+) seconds")


def redis_load(aof: Path, scratch: Path) -> tuple[float, float, float]:
    """(Redis's own load time, wall time to the first PONG, CPU time to then), seconds, of
    redis-server loading a copy of ``aof``."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    shutil.copytree(aof, scratch / "appendonlydir")
    try:
        return timed_load(scratch, _LOADED)
    finally:
        shutil.rmtree(scratch)


def timed_load(workdir: Path, loaded: re.Pattern[bytes], *extra: str) -> tuple[float, float, float]:
    """(Redis's own load time from its log line ``loaded``, wall time to the first PONG, CPU
    time to then), seconds, of a redis-server pinned to core 0 starting in ``workdir``
    (``extra``: more arguments)."""
    port = free_port()
    began = time.perf_counter()
    process = subprocess.Popen(
        [*redis_args(workdir, port), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: os.sched_setaffinity(0, {0}),
    )
    try:
        wait_ping(port, process)
        wall = time.perf_counter() - began
        stat = Path(f"/proc/{process.pid}/stat").read_text().rpartition(")")[2].split()
        cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    found = loaded.search(output)
    assert found, output[-2000:]
    return float(found.group(1)), wall, cpu


def moonish_import(
    aof: Path, out: Path, shards: int, processes: int = 1
) -> tuple[float, float, int, int]:
    """(seconds, CPU seconds of this process and its workers, commands, records) of
    importing ``aof`` into a new ``out``; with ``processes`` > 1 the workers may use every
    core (this process is pinned to one)."""
    shutil.rmtree(out, ignore_errors=True)
    gc.collect()
    pinned = os.sched_getaffinity(0)
    if processes > 1:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))  # the forked workers inherit it
    try:
        began, cpu = time.perf_counter(), _cpu()
        report = import_aof(
            aof, out, shards, stream=StreamConfig(ViewType.NEW_AND_OLD_IMAGES), processes=processes
        )
        seconds, cpu = time.perf_counter() - began, _cpu() - cpu
    finally:
        os.sched_setaffinity(0, pinned)
    shutil.rmtree(out)
    return seconds, cpu, report.commands, report.records


def _cpu() -> float:
    times = os.times()  # children: the workers of --processes, once they have ended
    return times.user + times.system + times.children_user + times.children_system


def bench_import(data: Path, commands: int = COMMANDS, rounds: int = ROUNDS) -> list[str]:
    aof = build_aof(data / f"import-aof-{commands}", commands)
    size = sum(path.stat().st_size for path in aof.iterdir())
    variants: dict[str, Callable[[], float]] = {}
    counts: dict[str, tuple[int, int]] = {}
    redis_own: list[float] = []
    redis_wall: list[float] = []
    cpus: dict[str, list[float]] = {}

    def redis() -> float:
        own, wall, cpu = redis_load(aof, data / "import-redis")
        redis_own.append(own)
        redis_wall.append(wall)
        cpus.setdefault("redis-server", []).append(cpu)
        return own

    variants["redis-server"] = redis
    for shards, processes in ((1, 1), (4, 1), (4, 2)):
        name = f"moonish --shards {shards}" + (f" --processes {processes}" if processes > 1 else "")

        def moonish(shards: int = shards, processes: int = processes, name: str = name) -> float:
            seconds, cpu, done, records = moonish_import(
                aof, data / "import-out", shards, processes
            )
            counts[name] = (done, records)
            cpus.setdefault(name, []).append(cpu)
            return seconds

        variants[name] = moonish
    for measure in variants.values():  # warm-up, not timed
        measure()
    redis_own.clear()
    redis_wall.clear()
    cpus.clear()
    times: dict[str, list[float]] = {name: [] for name in variants}
    order = list(variants)
    for round_number in range(rounds):
        random.Random(round_number).shuffle(order)
        for name in order:
            times[name].append(variants[name]())
    done = counts["moonish --shards 1"][0]
    redis_s = statistics.median(redis_own)
    lines = [
        f"AOF: {done:,} commands ({size / 2**20:,.1f} MiB; redis-server "
        f"{_redis_version()}, aof-use-rdb-preamble no), {rounds} rounds, order shuffled per "
        "round, pinned to core 0 (but the --processes workers)",
        f"redis-server load (its log line): median {redis_s:.3f} s = {done / redis_s:,.0f} "
        f"commands/s (rounds {_list(redis_own)}); exec to first PONG: median "
        f"{statistics.median(redis_wall):.3f} s; CPU time to then: median "
        f"{statistics.median(cpus['redis-server']):.2f} s",
    ]
    for name in variants:
        if name == "redis-server":
            continue
        seconds = statistics.median(times[name])
        ratios = [ours / theirs for ours, theirs in zip(times[name], redis_own, strict=True)]
        lines.append(
            f"{name} (NEW_AND_OLD_IMAGES, {counts[name][1]:,} records): median {seconds:.2f} s"
            f" = **{done / seconds:,.0f} commands/s** (rounds {_list(times[name])}); "
            f"time / redis-server's load: median {statistics.median(ratios):.1f}x "
            f"(rounds {min(ratios):.1f}..{max(ratios):.1f}); CPU time: median "
            f"{statistics.median(cpus[name]):.2f} s = {done / statistics.median(cpus[name]):,.0f}"
            " commands per CPU-second"
        )
    one, two = times["moonish --shards 4"], times["moonish --shards 4 --processes 2"]
    speedups = [a / b for a, b in zip(one, two, strict=True)]
    lines.append(
        f"--processes 2 against one process (--shards 4, same round): median speed-up "
        f"{statistics.median(speedups):.2f}x (rounds {min(speedups):.2f}..{max(speedups):.2f}; "
        f"the workers may use both cores, which other work shares)"
    )
    return lines


def _list(values: list[float]) -> str:
    return ", ".join(f"{value:.3f}" for value in values)


def _redis_version() -> str:
    out = subprocess.run(["redis-server", "--version"], capture_output=True, check=True)
    found = re.search(rb"v=([0-9.]+)", out.stdout)
    return found.group(1).decode() if found else "?"
