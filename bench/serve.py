"""The change feed server (``make bench`` section "serve"), over loopback on the 2-core VM.

The server (``moonish serve``) runs in its own process pinned to core 1; the clients (and
the writer of the live parts) run on core 0, as the rest of ``make bench`` does.

1. catch-up: one subscriber reads the >= 1M records of bench.merged's 4 shards from
   ``earliest`` over ``feed=continuous`` (the server reads the log for it: the ring holds
   only what came after it started), against the in-process ``moonish.tail`` of the same data
   directory (``MergedTail`` batches) on the same core as the server. Target: >= 0.8x.
2. live: 100 subscribers on ``feed=continuous`` while a writer process appends 10,000
   records/s (single appends, 4 shards): changes delivered per second in total, and the
   latency from append (the record's commit time) to the client, measured on the first line
   of every chunk a client receives (the oldest change in it: its latency is the chunk's
   worst). Target p99 <= 10 ms.
3. slow: the same, plus one WebSocket subscriber that grants 1,000 rows a second: the other
   subscribers' p99, and the server's RSS across the run (flat: the slow one reads the log on
   its own once it falls behind the ring).
   Parts 2 and 3 run again at 2,000 appends/s (where the server's core is not saturated).
4. idle: 1,000 long-polls waiting at once: server RSS per connection.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import orjson

from bench.merged import merged_data, merged_read
from bench.paths import AOF, DATA, READ_RECORDS

ROOT = Path(__file__).resolve().parent.parent
LIVE_RATE = 10_000
LIVE_SECONDS = 10
SUBSCRIBERS = 100
IDLE_POLLS = 1000
RING_BYTES = 16 * 1024 * 1024
"""The server's ring in these runs (default 64 MiB): full within the first seconds, so the
RSS samples show memory with the ring at its bound."""
WRITER = """
import sys, time
from moonish.log.records import KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
data, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
writers = [WalWriter(f"{data}/shard-{k}", WriterOptions(k, fsync=FsyncPolicy.NEVER))
           for k in range(4)]
value = b"v" * 100
started, n = time.perf_counter(), 0
while (elapsed := time.perf_counter() - started) < seconds:
    due = int(elapsed * rate)
    while n < due:
        writers[n % 4].append(KvCommand(0, (b"SET", b"key:%d" % n, value)))
        n += 1
    time.sleep(0.0002)
for writer in writers:
    writer.close()
print(n)
"""


def _server(data: Path, *extra: str) -> tuple[subprocess.Popen[bytes], str]:
    def on_core_1() -> None:
        os.sched_setaffinity(0, {1})
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from cli.main import entry; entry()",
            "serve",
            str(data),
            "--port",
            "0",
            "--max-subscribers",
            "5000",
            "--ring-bytes",
            str(RING_BYTES),
            *extra,
        ],
        stdout=subprocess.PIPE,
        preexec_fn=on_core_1,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert process.stdout is not None
    url = orjson.loads(process.stdout.readline())["url"]
    process.stdout.close()
    return process, url


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    process.wait(30)


CPU: list[float] = []


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) the process has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# -- 1. catch-up ---------------------------------------------------------------------------


def in_process(data: Path) -> tuple[int, float]:
    """``moonish.tail(data_dir)`` batches, on core 1 (the core the server reads on)."""
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {1})
    try:
        return merged_read(data)
    finally:
        os.sched_setaffinity(0, cores)


async def over_http(url: str) -> tuple[int, float]:
    started = time.perf_counter()
    count = 0
    timeout = aiohttp.ClientTimeout(total=None)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.get(f"{url}/v1/changes?feed=continuous&since=earliest&timeout=1") as response,
    ):
        async for chunk in response.content.iter_any():
            count += chunk.count(b"\n")  # (a row may be split between two reads)
    return count - 1, time.perf_counter() - started  # less the last_seq line


def bench_catch_up(data: Path, rounds: int = 3) -> list[str]:
    process, url = _server(data)
    try:
        ours, theirs, ratios = [], [], []
        in_process(data)  # warm-up: page cache
        for _ in range(rounds):
            count, seconds = in_process(data)
            served, served_seconds = asyncio.run(over_http(url))
            assert served == count, (served, count)
            theirs.append(count / seconds)
            ours.append(count / served_seconds)
            ratios.append(seconds / served_seconds)
    finally:
        _stop(process)
    return [
        f"catch-up from earliest, {count:,} records over 4 shards: in-process MergedTail "
        f"median {statistics.median(theirs):,.0f} events/s; one subscriber over HTTP "
        f"(feed=continuous) median {statistics.median(ours):,.0f} events/s; ratio "
        f"{statistics.median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)}; "
        "target >= 0.8)"
    ]


# -- 2, 3. live ----------------------------------------------------------------------------


class _Feed(asyncio.Protocol):
    """One live subscriber as a bare HTTP/1.1 client on an asyncio protocol: it sends the
    request and looks at the bytes as they arrive (chunk framing and headers need no
    parsing for what it measures). The bench measures the server: aiohttp's client costs more
    per read, and with 100 of them and the writer on one core, the clients' own queueing
    would add to the latencies."""

    def __init__(self, path: str, latencies: list[float], counts: list[int]) -> None:
        self._request = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
        self._latencies, self._counts = latencies, counts
        self.closed = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.write(self._request)

    def data_received(self, data: bytes) -> None:
        now_us = time.time_ns() // 1000
        at = data.find(b'"ts_us":')
        if at >= 0:
            end = data.find(b",", at)
            self._latencies.append((now_us - int(data[at + 8 : end])) / 1000)
        self._counts[0] += data.count(b'{"seq"')

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


async def _subscriber(url: str, latencies: list[float], counts: list[int], stop: float) -> None:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    loop = asyncio.get_running_loop()
    path = "/v1/changes?feed=continuous&since=now&heartbeat=1000"
    transport, feed = await loop.create_connection(
        lambda: _Feed(path, latencies, counts), host, int(port)
    )
    try:
        await asyncio.wait_for(asyncio.shield(feed.closed), max(0.0, stop - time.monotonic()))
    except TimeoutError:
        pass
    finally:
        transport.close()


async def _slow(url: str, stop: float) -> int:
    got = 0
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{url}/v1/ws?since=now", max_msg_size=0) as ws,
    ):
        await ws.receive_json()
        while time.monotonic() < stop:
            await ws.send_json({"request": 100})
            await asyncio.sleep(0.1)  # 1,000 rows a second
            while True:
                try:
                    message = await ws.receive(timeout=0.001)
                except TimeoutError:
                    break
                got += message.data.count(b'{"seq"')
    return got


async def _live(
    url: str, data: Path, pid: int, slow: bool, rate: int
) -> tuple[list[float], int, list[int], int, int]:
    """(latencies ms, changes delivered, server RSS KiB per second, slow rows, appends)."""
    stop = time.monotonic() + LIVE_SECONDS + 2
    latencies: list[float] = []
    counts = [0]
    tasks = [
        asyncio.create_task(_subscriber(url, latencies, counts, stop)) for _ in range(SUBSCRIBERS)
    ]
    slow_task = asyncio.create_task(_slow(url, stop)) if slow else None
    await asyncio.sleep(1)
    writer = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WRITER,
        str(data),
        str(rate),
        str(LIVE_SECONDS),
        stdout=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    rss = []
    cpu0, me0 = _cpu_s(pid), time.process_time()
    for _ in range(LIVE_SECONDS):
        await asyncio.sleep(1)
        rss.append(_rss_kib(pid))
    CPU.append((_cpu_s(pid) - cpu0) / LIVE_SECONDS)
    CPU.append((time.process_time() - me0) / LIVE_SECONDS)
    out, _ = await writer.communicate()
    await asyncio.gather(*tasks)
    slow_rows = await slow_task if slow_task is not None else 0
    return latencies, counts[0], rss, slow_rows, int(out)


def _fresh(root: Path, name: str) -> Path:
    data = root / name
    shutil.rmtree(data, ignore_errors=True)
    script = (
        "import sys\nfrom moonish.log.records import KvCommand\n"
        "from moonish.log.writer import WalWriter, WriterOptions\n"
        "for k in range(4):\n"
        "    with WalWriter(f'{sys.argv[1]}/shard-{k}', WriterOptions(k)) as w:\n"
        "        w.append(KvCommand(0, (b'SET', b'seed', b'v')))\n"
    )
    subprocess.run(
        [sys.executable, "-c", script, str(data)],
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    return data


def bench_live(root: Path, slow: bool, rate: int = LIVE_RATE) -> list[str]:
    data = _fresh(root, "serve-live")
    process, url = _server(data)
    try:
        latencies, delivered, rss, slow_rows, appends = asyncio.run(
            _live(url, data, process.pid, slow, rate)
        )
    finally:
        _stop(process)
    latencies.sort()
    p50 = latencies[len(latencies) // 2]
    p99 = latencies[int(len(latencies) * 0.99)]
    what = "with one WebSocket subscriber reading 1,000 rows/s" if slow else "live"
    line = (
        f"{what}: {SUBSCRIBERS} continuous subscribers, {appends / LIVE_SECONDS:,.0f} "
        f"appends/s for {LIVE_SECONDS} s: {delivered / LIVE_SECONDS:,.0f} changes/s delivered "
        f"in total ({delivered / SUBSCRIBERS / max(appends, 1):.0%} of appends x subscribers); "
        f"append-to-client latency (first change of each received chunk) p50 {p50:.1f} ms, "
        f"p99 {p99:.1f} ms, max {latencies[-1]:.1f} ms over {len(latencies):,} chunks; "
        f"server RSS {rss[0] // 1024}..{max(rss) // 1024} MiB (1 s samples: "
        f"{', '.join(str(r // 1024) for r in rss)})"
    )
    line += f"; CPU: server {CPU[-2]:.0%} of a core, clients {CPU[-1]:.0%}"
    if slow:
        line += f"; the slow subscriber got {slow_rows:,} rows"
    return [line]


# -- 4. idle long-polls --------------------------------------------------------------------


async def _idle(url: str, pid: int) -> tuple[int, int]:
    before = _rss_kib(pid)
    timeout = aiohttp.ClientTimeout(total=None)
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        query = "feed=longpoll&since=now&timeout=120000"
        requests = [
            asyncio.create_task(session.get(f"{url}/v1/changes?{query}")) for _ in range(IDLE_POLLS)
        ]
        while True:
            await asyncio.sleep(0.5)
            async with session.get(f"{url}/v1/info") as response:
                info = await response.json()
            if info["server"]["subscribers"] >= IDLE_POLLS:
                break
        await asyncio.sleep(1)
        after = _rss_kib(pid)
        for task in requests:
            task.cancel()
        await asyncio.gather(*requests, return_exceptions=True)
    return before, after


def bench_idle(root: Path) -> list[str]:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    data = _fresh(root, "serve-idle")
    process, url = _server(data)
    try:
        before, after = asyncio.run(_idle(url, process.pid))
    finally:
        _stop(process)
    return [
        f"{IDLE_POLLS:,} idle long-polls: server RSS {before / 1024:.1f} MiB before, "
        f"{after / 1024:.1f} MiB while they wait: {(after - before) / IDLE_POLLS:.1f} KiB "
        "per connection"
    ]


def bench_serve(root: Path, aof: Path, records: int) -> list[str]:
    lines = bench_catch_up(merged_data(root, aof, records))
    lines += bench_live(root, slow=False)
    lines += bench_live(root, slow=True)
    lines += bench_live(root, slow=False, rate=LIVE_RATE // 5)
    lines += bench_live(root, slow=True, rate=LIVE_RATE // 5)
    lines += bench_idle(root)
    return lines


if __name__ == "__main__":  # python -m bench.serve [catch-up|live|slow|idle]
    os.sched_setaffinity(0, {0})
    parts = {
        "catch-up": lambda: bench_catch_up(merged_data(DATA, AOF, READ_RECORDS)),
        "live": lambda: bench_live(DATA, slow=False),
        "slow": lambda: bench_live(DATA, slow=True),
        "live-2k": lambda: bench_live(DATA, slow=False, rate=LIVE_RATE // 5),
        "slow-2k": lambda: bench_live(DATA, slow=True, rate=LIVE_RATE // 5),
        "idle": lambda: bench_idle(DATA),
    }
    for name in sys.argv[1:] or list(parts):
        for line in parts[name]():
            print(f"- {line}", flush=True)
