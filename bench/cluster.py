"""Benchmark of a Redis Cluster capture (``make bench``, ``python -m bench.run cluster``): one
``moonish wal capture`` following a 3-master cluster (a replica each) under
``redis-benchmark --cluster``, and the time a failover costs it.

- The cluster's redis-servers and ``redis-benchmark`` run on the cores the benchmark is not
  pinned to; the capture (``--shards 4``, NEW_AND_OLD_IMAGES, ``--ack-interval-ms 100``) on
  the benchmark's core.
- Load: ``redis-benchmark --cluster`` of its write tests (SET, INCR, LPUSH, SADD, HSET; random
  keys from a million; pipelines of 10 on 10 connections) for ``MOONISH_BENCH_CLUSTER_S``
  seconds (default 30), as fast as the machine lets it: the rate is the masters' own count of
  commands processed.
- Lag, sampled every 50 ms from each master's ``INFO replication``: the master's
  ``master_repl_offset`` minus the offset the capture acknowledged (its replica line), summed
  over the masters; seconds: the longest, per sample, of how long ago each master's offset
  was where the capture's acknowledgement is now.
- Failover: a master SIGKILLed once the capture caught up; the time until the capture's link
  is connected to the promoted replica (``capture.json``), which includes Redis's own
  failure detection (``cluster-node-timeout`` 2,000 ms) and election.

``cluster-catchup`` (``python -m bench.run cluster-catchup``): how fast the capture reads a
cluster's streams when nothing else runs, in one process and in ``--processes 2`` (both
cores): a capture is started and stopped (every link has a position), ``redis-benchmark
--cluster`` then writes ``CATCHUP_RUNS`` runs of the same tests while no capture runs (kept in
the masters' 512 MB backlogs), and the capture is started again: the commands the masters
processed meanwhile, divided by the time from its start until it has acknowledged every
master's offset (its start, ``PSYNC`` ``+CONTINUE`` and the catch-up), in commands/s.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from bisect import bisect_left
from pathlib import Path

import redis

from bench.capture import _pct, _stop, _usage
from bench.cores import elsewhere, on_cores
from tests.support.servers.cluster import Cluster

TESTS = "set,incr,lpush,sadd,hset"
LOAD = ["redis-benchmark", "--cluster", "-h", "127.0.0.1", "-t", TESTS, "-n", "100000"]
LOAD += ["-r", "1000000", "-c", "10", "-P", "10", "-q"]
SAMPLE_S = 0.05
CATCHUP_RUNS = 2
SHARDS = 4
ROOT = Path(__file__).parent.parent


def bench_cluster(data: Path) -> list[str]:
    seconds = int(os.environ.get("MOONISH_BENCH_CLUSTER_S", "30"))
    workdir, target = data / "cluster-redis", data / "cluster-data"
    for path in (workdir, target):
        subprocess.run(["rm", "-rf", str(path)], check=True)
    with contextlib.ExitStack() as stack:
        cluster, masters = _cluster(stack, workdir)
        capture = _start(cluster.url(), target)
        stack.callback(_stop, capture)
        _wait_links(target, 3)
        sampler = _Sampler(cluster, masters)
        before = _processed(masters)
        started = time.monotonic()
        with elsewhere():
            _load(masters[0], seconds)
        loaded_s = time.monotonic() - started
        sent = _processed(masters) - before
        caught_up_s = sampler.catch_up()
        sampler.stop()
        cpu_s, rss_mib = _usage(capture.pid)
        victim = masters[0]
        heir = cluster.replica_of(victim)
        killed = time.monotonic()
        cluster.processes[victim].kill()
        cluster.processes[victim].wait()
        resumed_s = _wait_link_at(target, heir) - killed
    lags_b, lags_s = sampler.lags()
    return [
        f"load: {seconds} s of redis-benchmark --cluster ({TESTS}) on 3 masters with a replica "
        f"each: the masters processed {sent / loaded_s:,.0f} commands/s",
        f"capture (--shards {SHARDS}, NEW_AND_OLD_IMAGES, one core): lag over the masters p50 "
        f"{_pct(lags_s, 50):.3f} s / {_pct(lags_b, 50):,.0f} bytes, p99 {_pct(lags_s, 99):.3f} s"
        f" / {_pct(lags_b, 99):,.0f} bytes, max {max(lags_s):.3f} s ({len(lags_s)} samples)",
        f"caught up {caught_up_s:.2f} s after the load stopped; capture CPU "
        f"{cpu_s / max(sent, 1) * 1e6:.1f} µs per command ({cpu_s:.1f} s), peak RSS "
        f"{rss_mib:,.0f} MiB",
        f"a master SIGKILLed: its link connected to the promoted replica after {resumed_s:.2f} s "
        "(cluster-node-timeout 2,000 ms, then the election, then PSYNC)",
    ]


def bench_cluster_catchup(data: Path) -> list[str]:
    lines = []
    for processes in (1, 2):
        workdir, target = data / "catchup-redis", data / "catchup-data"
        for path in (workdir, target):
            subprocess.run(["rm", "-rf", str(path)], check=True)
        with contextlib.ExitStack() as stack:
            cluster, masters = _cluster(stack, workdir)
            capture = _start(cluster.url(), target)
            _wait_links(target, 3)
            _stop(capture)
            before = _processed(masters)
            every = range(os.cpu_count() or 1)
            with on_cores(every):
                for _ in range(CATCHUP_RUNS):
                    subprocess.run(
                        [*LOAD, "-p", str(masters[0])],
                        check=True,
                        timeout=600,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
            sent = _processed(masters) - before
            sampler = _Sampler(cluster, masters)
            stack.callback(sampler.stop)
            started = time.monotonic()
            with on_cores(every):
                capture = _start(cluster.url(), target, processes)
            stack.callback(_stop, capture)
            sampler.catch_up(600)
            seconds = time.monotonic() - started
        lines.append(
            f"--processes {processes} (both cores, nothing else running): {sent:,} commands "
            f"of redis-benchmark --cluster ({TESTS}) read in {seconds:.2f} s from the start = "
            f"**{sent / seconds:,.0f} commands/s**"
        )
    return lines


def _cluster(stack: contextlib.ExitStack, workdir: Path) -> tuple[Cluster, list[int]]:
    """A 3-master cluster (a replica each) started on the cores the benchmark is not pinned
    to, stopped with ``stack``; its masters' ports, each with a 512 MB backlog."""
    from tests.support.servers.cluster import redis_cluster  # (starts servers: only here)

    with elsewhere():
        cluster = stack.enter_context(redis_cluster(workdir))
    masters = cluster.master_ports()
    for port in masters:
        with contextlib.closing(cluster.client(port)) as client:
            client.config_set("repl-backlog-size", "512mb")
    return cluster, masters


def _start(url: str, target: Path, processes: int = 1) -> subprocess.Popen[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    args = [sys.executable, "-m", "cli.main", "wal", "capture", url, str(target)]
    args += ["--shards", str(SHARDS), "--ack-interval-ms", "100", "--quiet"]
    args += ["--processes", str(processes)]
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _links(target: Path) -> list[dict[str, object]]:
    with contextlib.suppress(FileNotFoundError, ValueError):
        document = json.loads((target / "capture.json").read_text())
        return list(document.get("links") or [])
    return []


def _wait_links(target: Path, count: int) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        links = _links(target)
        if len(links) >= count and all(link["state"] == "connected" for link in links):
            return
        time.sleep(0.05)
    raise RuntimeError("the cluster capture did not connect its links within 120 s")


def _wait_link_at(target: Path, port: int) -> float:
    """When a link is connected to the node at ``port`` (monotonic seconds)."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for link in _links(target):
            if link["address"] == f"127.0.0.1:{port}" and link["state"] == "connected":
                return time.monotonic()
        time.sleep(0.02)
    raise RuntimeError(f"no link reached the promoted node {port} within 120 s")


def _processed(masters: list[int]) -> int:
    total = 0
    for port in masters:
        with contextlib.closing(redis.Redis(host="127.0.0.1", port=port)) as client:
            total += int(client.info("stats")["total_commands_processed"])
    return total


def _load(port: int, seconds: int) -> None:
    """``redis-benchmark --cluster`` runs until ``seconds`` have passed."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        subprocess.run(
            [*LOAD, "-p", str(port)],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=600,
        )


class _Sampler:
    """Every 50 ms, per master: its offset and the capture's acknowledged one."""

    def __init__(self, cluster: Cluster, masters: list[int]) -> None:
        self.ports = masters
        self.known = set(cluster.ports)  # the replicas' lines: not moonish's
        self.clients = [redis.Redis(host="127.0.0.1", port=port) for port in masters]
        self.history: list[list[tuple[float, int]]] = [[] for _ in masters]
        self.samples: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _acked(self, info: dict[str, object]) -> int | None:
        for name, value in info.items():
            ours = isinstance(value, dict) and int(value["port"]) not in self.known
            if name.startswith("slave") and ours:  # (the replicas' ports are known)
                assert isinstance(value, dict)
                return int(value["offset"])
        return None

    def _sample(self) -> tuple[int, float] | None:
        now = time.monotonic()
        total_b, worst_s = 0, 0.0
        for index, client in enumerate(self.clients):
            info = client.info("replication")
            offset, acked = int(info["master_repl_offset"]), self._acked(info)
            history = self.history[index]
            history.append((now, offset))
            if acked is None:
                return None
            total_b += max(0, offset - acked)
            at = bisect_left([o for _, o in history], acked)
            if acked < offset and at < len(history):
                worst_s = max(worst_s, now - history[at][0])
        return total_b, worst_s

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            sample = self._sample()
            if sample is not None:
                self.samples.append(sample)

    def catch_up(self, timeout_s: float = 300) -> float:
        """Seconds until a sample shows no lag (raises after ``timeout_s``)."""
        started = time.monotonic()
        while time.monotonic() - started < timeout_s:
            if self.samples and self.samples[-1][0] == 0:
                return time.monotonic() - started
            time.sleep(SAMPLE_S)
        raise RuntimeError(f"the cluster capture did not catch up within {timeout_s:g} s")

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for client in self.clients:
            client.close()

    def lags(self) -> tuple[list[float], list[float]]:
        return [float(b) for b, _ in self.samples], [s for _, s in self.samples]
