"""Benchmark of ``moonish wal import-rdb`` on this machine's cores (``make bench``, ``python -m
bench.run import-rdb``): one process against ``--processes 2``, beside redis-server loading
the same dump.

The dump: a redis-server written by ``redis-benchmark`` (bench.capture_cores ``SPREAD``: every
type, random keys) and ``SAVE``d, once, into ``bench-data/import-rdb``.
Each of :data:`ROUNDS` rounds, in a shuffled order: redis-server started on a copy of the
dump (its load time from its log line ``DB loaded from disk: <s> seconds``), and
``import_rdb`` into a new data directory, ``--shards 4``, NEW_AND_OLD_IMAGES, with
``processes`` 1 and 2, each in a new process on both cores. The time covers reading the file,
loading the shards, the syncs and closing (not Python's start, nor freeing the keys at exit).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import statistics
import subprocess
import sys
from pathlib import Path

from bench.aof_workload import free_port, redis_args, wait_ping
from bench.capture_cores import SPREAD
from bench.importer import timed_load

ROUNDS = 3
SHARDS = 4
KEY_COMMANDS = 2_000_000
KEYS = 200_000
_LOADED = re.compile(rb"DB loaded from disk: ([0-9.]+) seconds")


def bench_import_rdb(data: Path) -> list[str]:
    dump = _build_dump(data)
    times: dict[str, list[float]] = {"redis-server": [], "1": [], "2": []}
    keys = records = 0
    for round_number in range(ROUNDS):
        order = list(times)
        random.Random(round_number).shuffle(order)
        for name in order:
            if name == "redis-server":
                times[name].append(_redis_load(dump, data / "import-rdb-redis"))
                continue
            out = data / "import-rdb-out"
            shutil.rmtree(out, ignore_errors=True)
            seconds, keys, records = _import(dump, out, int(name))
            times[name].append(seconds)
            shutil.rmtree(out)
    redis = statistics.median(times["redis-server"])
    lines = [
        f"dump: {keys:,} keys ({dump.stat().st_size / 2**20:,.1f} MiB; redis-server 7.0 SAVE after "
        f"{KEY_COMMANDS:,} redis-benchmark writes of every type), {ROUNDS} rounds, order "
        "shuffled per round",
        f"redis-server load (its log line): median {redis:.3f} s (rounds "
        f"{', '.join(f'{t:.3f}' for t in times['redis-server'])})",
    ]
    for name in ("1", "2"):
        median = statistics.median(times[name])
        lines.append(
            f"moonish --shards {SHARDS} --processes {name} ({records:,} records): median "
            f"{median:.2f} s = **{keys / median:,.0f} keys/s** (rounds "
            f"{', '.join(f'{t:.2f}' for t in times[name])}); {median / redis:.1f}x redis-server"
        )
    ratios = [one / two for one, two in zip(times["1"], times["2"], strict=True)]
    lines.append(
        f"--processes 2 against 1: median speed-up **{statistics.median(ratios):.2f}x** "
        f"(rounds {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    return lines


_CHILD = """
import json, sys, time
from moonish.log.records import ViewType
from moonish.redis.rdbimport.importer import import_rdb
from moonish.state.config import StreamConfig
began = time.perf_counter()
report = import_rdb(sys.argv[1], sys.argv[2], int(sys.argv[3]), processes=int(sys.argv[4]),
                    stream=StreamConfig(ViewType.NEW_AND_OLD_IMAGES))
print(json.dumps([time.perf_counter() - began, report.keys_loaded, report.records]))
"""


def _import(dump: Path, out: Path, processes: int) -> tuple[float, int, int]:
    """(seconds, keys, records) of ``import_rdb`` in a new process on every core (a fresh
    heap each time: an earlier import's freed objects slow the next one's)."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent))
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, str(dump), str(out), str(SHARDS), str(processes)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        preexec_fn=lambda: os.sched_setaffinity(0, range(os.cpu_count() or 1)),
    )
    seconds, keys, records = json.loads(run.stdout.splitlines()[-1])
    return float(seconds), int(keys), int(records)


def _build_dump(data: Path) -> Path:
    """``bench-data/import-rdb/dump.rdb``: the keyspace of :data:`KEY_COMMANDS` commands of
    bench.capture_cores ``SPREAD`` (strings, counters, lists, sets, hashes, sorted sets, MSET)
    on random keys out of :data:`KEYS` per command, saved by redis-server (built once)."""
    workdir = data / "import-rdb"
    dump = workdir / "dump.rdb"
    if dump.exists():
        return dump
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    port = free_port()
    args = [*redis_args(workdir, port), "--appendonly", "no"]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    try:
        wait_ping(port, process)
        for command in SPREAD:
            subprocess.run(
                [
                    "redis-benchmark",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(port),
                    "-n",
                    str(KEY_COMMANDS // len(SPREAD)),
                    "-r",
                    str(KEYS),
                    "-c",
                    "10",
                    "-P",
                    "10",
                    "-q",
                    *command.split(),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"*1\r\n$4\r\nSAVE\r\n")
            assert sock.recv(64).startswith(b"+OK")
    finally:
        process.terminate()
        process.wait(60)
    return dump


def _redis_load(dump: Path, scratch: Path) -> float:
    """redis-server's own load time of a copy of ``dump`` (seconds, from its log line)."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    shutil.copy(dump, scratch / "dump.rdb")
    try:
        return timed_load(scratch, _LOADED, "--appendonly", "no")[0]
    finally:
        shutil.rmtree(scratch)
