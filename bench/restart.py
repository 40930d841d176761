"""Benchmark of a capture's restart (``make bench`` section "restart"; docs/benchmarks.md §13):
the time from starting ``moonish wal capture`` again to its ``PSYNC`` being answered, after
20,000 and after 2,000,000 commands captured, with the default snapshot rules. Target: after
2M within 2x of after 20K (a restart replays a bounded part of the history).

For each size: a redis-server (FLUSHALL between the sizes), a capture (``--shards 4``,
defaults) started on the empty master, ``size`` commands sent pipelined (``SET`` of 50,000
keys round robin), the capture caught up and killed with SIGKILL (a crash); one restart timed
from there (it replays what the snapshot rules left), stopped with SIGTERM (a clean close,
which writes its snapshot when due); then ROUNDS restarts, each timed from ``exec`` until the
master's ``INFO replication`` shows the capture online (its ``PSYNC`` answered with
``+CONTINUE``), then stopped again with SIGTERM. The target is on the clean restarts.
"""

from __future__ import annotations

import contextlib
import statistics
import subprocess
import time
from pathlib import Path

import redis

from bench.aof_workload import _send
from bench.capture import _start_capture, _stop, _wait_streaming

SIZES = (20_000, 2_000_000)
ROUNDS = 5
KEYS = 50_000


def _online(client: redis.Redis) -> bool:
    replica = client.info("replication").get("slave0") or {}
    return replica.get("state") == "online"


def _no_replica(client: redis.Redis) -> None:
    deadline = time.monotonic() + 30
    while int(client.info("replication")["connected_slaves"]) and time.monotonic() < deadline:
        time.sleep(0.01)


def _restart(client: redis.Redis, port: int, target: Path) -> float:
    """Seconds from starting the capture until the master shows it online; then stopped
    with SIGTERM."""
    began = time.monotonic()
    capture = _start_capture(port, target, quiet=True)
    while not _online(client):
        if time.monotonic() - began > 600:
            raise RuntimeError("the capture did not come online within 600 s")
        time.sleep(0.002)
    took = time.monotonic() - began
    _stop(capture)
    _no_replica(client)
    return took


def bench_restart(data: Path) -> list[str]:
    from tests.support.servers.redis_server import redis_server

    workdir = data / "restart-redis"
    subprocess.run(["rm", "-rf", str(workdir)], check=True)
    workdir.mkdir(parents=True)
    medians: dict[int, float] = {}
    lines = [
        f"capture --shards 4, default snapshot rules; SET of {KEYS:,} keys round robin; "
        f"{ROUNDS} restarts per size, each from exec to the PSYNC answered"
    ]
    with contextlib.ExitStack() as stack:
        client = stack.enter_context(
            redis_server(workdir, "--repl-backlog-size", "64mb", "--appendonly", "no")
        )
        port = int(client.connection_pool.connection_kwargs["port"])
        for size in SIZES:
            target = data / f"restart-data-{size}"
            subprocess.run(["rm", "-rf", str(target)], check=True)
            client.flushall()
            capture = _start_capture(port, target, quiet=True)
            _wait_streaming(client)
            commands = [[b"SET", b"key:%06d" % (i % KEYS), b"value-%09d" % i] for i in range(size)]
            _send(port, commands)
            _wait_streaming(client)  # caught up: the ACKed offset is the master's
            capture.kill()
            capture.wait()
            _no_replica(client)
            crashed = _restart(client, port, target)
            times = [_restart(client, port, target) for _ in range(ROUNDS)]
            snapshots = sorted(p.name for p in (target / "shard-0").glob("*.snap"))
            medians[size] = statistics.median(times)
            lines.append(
                f"after {size:,} commands: restart to PSYNC after a crash (SIGKILL) "
                f"{crashed:.2f} s; after a clean stop median **{medians[size]:.2f} s** "
                f"(rounds {', '.join(f'{t:.2f}' for t in times)}); shard-0's snapshots: "
                f"{snapshots or 'none'}"
            )
    ratio = medians[SIZES[1]] / medians[SIZES[0]]
    lines.append(
        f"clean restarts, after {SIZES[1]:,} / after {SIZES[0]:,}: **{ratio:.2f}x** (target <= 2)"
    )
    return lines
