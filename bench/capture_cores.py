"""Benchmark of a live capture on this machine's cores (``make bench``, ``python -m bench.run
capture-cores``): how fast ``moonish wal capture --shards 4`` applies a backlog of commands
with ``--processes 1`` and ``--processes 2``.

- A redis-server 7.0 (``--repl-backlog-size 1gb``, no persistence) is followed by a capture
  until it is an online replica that has ACKed the master's offset, then the capture stops
  (SIGTERM: every shard stores its position) and its data directory is kept as the base.
- With no capture connected, ``redis-benchmark`` writes ``MOONISH_BENCH_CORES_COMMANDS``
  commands (default 1,000,000; pipelines of 10 on 10 connections) into the master's
  backlog, in two workloads (a fresh Redis each): its write tests as bench.capture runs them
  (``-t``; random string keys, but every list, set, sorted set and hash command on one key
  each, so the shards holding those four keys do most of the work), and a spread one
  (:data:`SPREAD`: the same kinds of commands on random keys).
- Each round, for each process count in a shuffled order: a fresh copy of the base, then
  ``moonish wal capture ... --processes P`` (not pinned: it may use both cores; Redis only
  serves the backlog) sends ``PSYNC`` and continues from the stored offset; timed from the
  start of the process to the master seeing the ACK of its whole offset (the ACK interval is
  100 ms). The capture is then stopped. Reported: medians of the rounds in commands/s, the
  CPU seconds of the capture's processes, and the median speed-up of ``--processes 2`` over
  ``--processes 1`` measured in the same round.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import redis

from bench.capture import ROOT, SHARDS, TESTS, _stop, _wait_streaming
from bench.cores import elsewhere

ROUNDS = 3
PROCESSES = (1, 2)


SPREAD = [
    "set key:__rand_int__ __rand_int__",
    "incr counter:__rand_int__",
    "lpush list:__rand_int__ __rand_int__",
    "rpop list:__rand_int__",
    "sadd set:__rand_int__ __rand_int__",
    "hset hash:__rand_int__ f__rand_int__ __rand_int__",
    "zadd zset:__rand_int__ __rand_int__ m__rand_int__",
    "mset " + " ".join(f"m{i}:__rand_int__ __rand_int__" for i in range(10)),
]
"""The spread workload: each command on random keys of its own (``-r 10000``)."""


def bench_capture_cores(data: Path) -> list[str]:
    commands = int(os.environ.get("MOONISH_BENCH_CORES_COMMANDS", "1000000"))
    lines = [
        f"capture --shards {SHARDS}, NEW_AND_OLD_IMAGES, {os.cpu_count()} cores, {ROUNDS} rounds; "
        f"a backlog of {commands:,} commands each"
    ]
    for name, write in (("redis-benchmark -t", _write_tests), ("spread", _write_spread)):
        lines += _workload(data, name, commands, write)
    return lines


def _workload(data: Path, name: str, commands: int, write: Callable[[int, int], None]) -> list[str]:
    from tests.support.servers.redis_server import redis_server

    workdir, base = data / "cores-redis", data / "cores-base"
    for path in (workdir, base):
        shutil.rmtree(path, ignore_errors=True)
    workdir.mkdir(parents=True)
    with contextlib.ExitStack() as stack:
        with elsewhere():
            client = stack.enter_context(
                redis_server(
                    workdir, "--repl-backlog-size", "1gb", "--appendonly", "no", "--save", ""
                )
            )
        port = int(client.connection_pool.connection_kwargs["port"])
        first = _start(port, base, 1)
        _wait_streaming(client)
        _stop(first)
        before = int(client.info("replication")["master_repl_offset"])
        write(port, commands)
        backlog = int(client.info("replication")["master_repl_offset"]) - before
        times: dict[int, list[float]] = {count: [] for count in PROCESSES}
        cpus: dict[int, list[float]] = {count: [] for count in PROCESSES}
        for round_ in range(ROUNDS):
            order = list(PROCESSES)
            random.Random(round_).shuffle(order)
            for count in order:
                target = data / f"cores-data-{count}"
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(base, target)
                began = time.monotonic()
                process = _start(port, target, count)
                _caught_up(client, began)
                times[count].append(time.monotonic() - began)
                cpus[count].append(_cpu_of_tree(process.pid))
                _stop(process)
                shutil.rmtree(target)
    lines = [f"**{name}** ({backlog / 2**20:,.0f} MiB of replication stream)"]
    for count in PROCESSES:
        median = statistics.median(times[count])
        rounds = ", ".join(f"{t:.2f}" for t in times[count])
        lines.append(
            f"{name}, --processes {count}: catch-up median {median:.2f} s = "
            f"**{commands / median:,.0f} commands/s** (rounds {rounds}); CPU of its "
            f"processes {statistics.median(cpus[count]):.1f} s"
        )
    ratios = [one / two for one, two in zip(times[1], times[2], strict=True)]
    lines.append(
        f"{name}, --processes 2 against --processes 1: median speed-up "
        f"**{statistics.median(ratios):.2f}x** (rounds {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    return lines


def _start(port: int, target: Path, processes: int) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [
        sys.executable,
        "-m",
        "cli.main",
        "wal",
        "capture",
        f"redis://127.0.0.1:{port}",
        str(target),
        "--shards",
        str(SHARDS),
        "--ack-interval-ms",
        "100",
        "--processes",
        str(processes),
        "--quiet",
    ]
    with _unpinned():
        return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL)


class _unpinned:
    """Within the block, the calling thread may run on every core (its children too)."""

    def __enter__(self) -> None:
        self._mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))

    def __exit__(self, *exc: object) -> None:
        os.sched_setaffinity(0, self._mine)


def _caught_up(client: redis.Redis, since: float) -> None:
    """Until a replica is online and has ACKed the master's whole offset."""
    while True:
        info = client.info("replication")
        replica = info.get("slave0") or {}
        if replica.get("state") == "online" and int(replica["offset"]) >= int(
            info["master_repl_offset"]
        ):
            return
        if time.monotonic() - since > 900:
            raise RuntimeError("the capture did not catch up within 900 s")
        time.sleep(0.02)


def _write_tests(port: int, commands: int) -> None:
    """redis-benchmark's write tests (bench.capture's mix): its lists, sets, sorted sets and
    hash are one key each (``mylist``, ``myset``, ``myzset``, ``myhash``)."""
    per_test = commands // len(TESTS.split(","))
    args = [
        "redis-benchmark",
        "-h",
        "127.0.0.1",
        "-p",
        str(port),
        "-t",
        TESTS,
        "-n",
        str(per_test),
        "-r",
        "1000000",
        "-c",
        "10",
        "-P",
        "10",
        "-q",
    ]
    with elsewhere():
        subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def _write_spread(port: int, commands: int) -> None:
    """:data:`SPREAD`, in equal parts, on random keys out of 10,000 per command."""
    for command in SPREAD:
        args = [
            "redis-benchmark",
            "-h",
            "127.0.0.1",
            "-p",
            str(port),
            "-n",
            str(commands // len(SPREAD)),
            "-r",
            "10000",
            "-c",
            "10",
            "-P",
            "10",
            "-q",
            *command.split(),
        ]
        with elsewhere():
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL)


def _cpu_of_tree(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children still running."""
    total = 0.0
    pids = [pid]
    children = Path(f"/proc/{pid}/task/{pid}/children")
    if children.exists():
        pids += [int(child) for child in children.read_text().split()]
    for each in pids:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total
