"""Benchmark of live capture (``make bench``, ``python -m bench.run capture``): does
``moonish wal capture`` keep up with a Redis written at 50,000 commands/s?

- A redis-server 7.0 and ``redis-benchmark`` run on the cores the benchmark is not pinned to;
  ``moonish wal capture redis://... --shards 4`` (NEW_AND_OLD_IMAGES, the default sync
  interval of 100 ms, ``--ack-interval-ms 100``) runs pinned to the benchmark's core.
- Load: every second one ``redis-benchmark`` run of 50,000 write commands (its write tests:
  SET, INCR, LPUSH, RPUSH, LPOP, RPOP, SADD, HSET, SPOP, ZADD, ZPOPMIN, MSET of 10 keys;
  random keys from a million, pipelines of 10 on 10 connections), for
  ``MOONISH_BENCH_CAPTURE_S`` seconds (default 60). The rate reached is Redis's own count
  of commands processed.
- Lag, sampled every 50 ms from the master's ``INFO replication``: bytes (the master's
  ``master_repl_offset`` minus the capture's ACKed offset) and seconds (how long ago the
  master's offset was where the capture's ACK is now, interpolated between samples). The
  ACK is at most 100 ms old, so a lag under 0.2 s is within what the ACK period can show.
- Also: the time to catch up after the load stops, the capture's CPU seconds and peak RSS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from bisect import bisect_left
from pathlib import Path

import redis

from bench.cores import elsewhere

RATE = 50_000
TESTS = "set,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,mset"
SAMPLE_S = 0.05
SHARDS = 4
ROOT = Path(__file__).parent.parent


def bench_capture(data: Path) -> list[str]:
    from tests.support.servers.redis_server import redis_server

    seconds = int(os.environ.get("MOONISH_BENCH_CAPTURE_S", "60"))
    workdir, target = data / "capture-redis", data / "capture-data"
    for path in (workdir, target):
        subprocess.run(["rm", "-rf", str(path)], check=True)
    workdir.mkdir(parents=True)
    with contextlib.ExitStack() as stack:
        with elsewhere():
            client = stack.enter_context(
                redis_server(workdir, "--repl-backlog-size", "512mb", "--appendonly", "no")
            )
        port = int(client.connection_pool.connection_kwargs["port"])
        capture = _start_capture(port, target)
        stack.callback(_stop, capture)
        _wait_streaming(client)
        sampler = _Sampler(client)
        before = int(client.info("stats")["total_commands_processed"])
        started = time.monotonic()
        overruns = _load(port, seconds)
        loaded_s = time.monotonic() - started
        sent = int(client.info("stats")["total_commands_processed"]) - before
        caught_up_s = _catch_up(client, time.monotonic())
        sampler.stop()
        cpu_s, rss_mib = _usage(capture.pid)
    lags_b, lags_s = sampler.lags()
    return [
        f"load: {seconds} s of redis-benchmark ({TESTS}), Redis processed "
        f"{sent / loaded_s:,.0f} commands/s ({overruns} of {seconds} one-second runs overran)",
        f"capture (--shards {SHARDS}, NEW_AND_OLD_IMAGES, one core): lag p50 "
        f"{_pct(lags_s, 50):.3f} s / {_pct(lags_b, 50):,.0f} bytes, p99 {_pct(lags_s, 99):.3f} s / "
        f"{_pct(lags_b, 99):,.0f} bytes, max {max(lags_s):.3f} s ({len(lags_s)} samples)",
        f"caught up {caught_up_s:.2f} s after the load stopped; capture CPU "
        f"{cpu_s / max(sent, 1) * 1e6:.1f} µs per command ({cpu_s:.1f} s), peak RSS "
        f"{rss_mib:,.0f} MiB",
    ]


def _start_capture(port: int, target: Path, *, quiet: bool = False) -> subprocess.Popen[bytes]:
    """``moonish wal capture`` of the Redis at ``port`` into ``target``; ``quiet``: its log
    lines (PSYNC answers, resyncs) go nowhere instead of this process's stderr."""
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
        "--quiet",
    ]
    stderr = subprocess.DEVNULL if quiet else None
    return subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=stderr)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(120)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _wait_streaming(client: redis.Redis) -> None:
    """Until the capture is an online replica that has ACKed the master's offset."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = client.info("replication")
        replica = info.get("slave0") or {}
        online = replica.get("state") == "online"
        if online and int(replica["offset"]) >= int(info["master_repl_offset"]):
            return
        time.sleep(0.05)
    raise RuntimeError("the capture did not come online within 60 s")


def _load(port: int, seconds: int) -> int:
    """One redis-benchmark run of RATE writes per second; returns how many overran."""
    per_test = RATE // len(TESTS.split(","))
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
    overruns, start = 0, time.monotonic()
    for second in range(seconds):
        with elsewhere():
            subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
        wait = start + second + 1 - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        else:
            overruns += 1
    return overruns


def _catch_up(client: redis.Redis, since: float) -> float:
    while True:
        info = client.info("replication")
        if int(info["slave0"]["offset"]) >= int(info["master_repl_offset"]):
            return time.monotonic() - since
        if time.monotonic() - since > 600:
            raise RuntimeError("the capture did not catch up within 600 s")
        time.sleep(0.02)


def _usage(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) and peak RSS (MiB) of a running process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu_s = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    status = Path(f"/proc/{pid}/status").read_text()
    peak_kib = next(int(line.split()[1]) for line in status.splitlines() if line[:6] == "VmHWM:")
    return cpu_s, peak_kib / 1024


class _Sampler:
    """``INFO replication`` every SAMPLE_S in a thread: (time, master offset, ACKed offset)."""

    def __init__(self, client: redis.Redis) -> None:
        kwargs = client.connection_pool.connection_kwargs
        self._client = redis.Redis(host=kwargs["host"], port=kwargs["port"])
        self.samples: list[tuple[float, int, int]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.is_set():
            info = self._client.info("replication")
            offset = int(info["slave0"]["offset"]) if "slave0" in info else 0
            self.samples.append((time.monotonic(), int(info["master_repl_offset"]), offset))
            self._done.wait(SAMPLE_S)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._client.close()

    def lags(self) -> tuple[list[int], list[float]]:
        """Per sample: lag in bytes and in seconds."""
        times = [t for t, _, _ in self.samples]
        masters = [m for _, m, _ in self.samples]
        in_bytes, in_seconds = [], []
        for now, master, acked in self.samples:
            in_bytes.append(max(0, master - acked))
            if acked >= master:
                in_seconds.append(0.0)
                continue
            j = bisect_left(masters, acked)  # first sample whose master offset reached it
            if j == 0:
                in_seconds.append(now - times[0])
                continue
            (t0, m0), (t1, m1) = (times[j - 1], masters[j - 1]), (times[j], masters[j])
            reached = t0 + (t1 - t0) * (acked - m0) / max(m1 - m0, 1)
            in_seconds.append(now - reached)
        return in_bytes, in_seconds


def _pct(values: list[float] | list[int], pct: int) -> float:
    ordered = sorted(values)
    return float(ordered[min(len(ordered) - 1, len(ordered) * pct // 100)])
