"""Benchmarks of the main job's read side (``make bench``, ``python -m bench.run tail poll``).

``tail``: ``moonish cdc tail <shard>`` (a process writing NDJSON to a file) over one shard
holding the AOF that ``redis-benchmark``'s default run makes a redis-server write, imported
with the default view type (NEW_AND_OLD_IMAGES), against a naive pure-Python reader of the
same number of records, side by side, round by round: it mmaps a file of ~100-byte
length-prefixed records, checks each one's crc32c, builds a Debezium-like dict per record,
``orjson.dumps`` it and writes NDJSON to a file. Also ``moonish.tail(...).batches()`` in
process, and the merged stream of the same AOF imported into 4 shards against the sum of
reading the 4 shards one by one.

``poll``: one ``moonish cdc read <shard> <lsn> --limit 10`` near the end of that shard, against
``python -c "import click, orjson, crc32c"`` (the same interpreter), medians of 7 rounds; and
which modules a local read loads.

``tail-memory``: the peak RSS of ``moonish cdc tail`` over a shard of more than 1 GB (the
AOF of ``redis-benchmark -n 300000``, imported with NEW_AND_OLD_IMAGES), from the kernel's
accounting of the finished process (``wait4``).

``follow-memory``: the RSS of ``moonish cdc tail --follow`` (sampled every 5 s from
``/proc/<pid>/status``) while another process appends 2,000 records/s in batches of 20 to a
shard of 4 MiB segments, for ``MOONISH_BENCH_FOLLOW_S`` seconds (default 300; the figure in
docs/benchmarks.md is of 3600): RSS after the first minute, at the end, the peak, and the
least-squares slope over the run after its first minute.
"""

from __future__ import annotations

import os
import shutil
import statistics
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path

import crc32c

from bench.aof_workload import free_port, redis_args, wait_ping
from bench.paths import DATA, MOONISH, ROOT
from moonish.cdc import shard_read
from moonish.cdc.api import tail as moonish_tail
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.redis.aof.importer import import_aof

ROUNDS = 5
POLLS = 7
_RECORD = struct.Struct("<II")  # payload length, crc32c of the payload


def benchmark_aof(root: Path, requests: int | None = None) -> Path:
    """The appendonlydir a redis-server wrote while ``redis-benchmark`` ran its default tests
    against it (``-n requests`` and no AOF rewrite if given, else its default 100,000 per
    test; ``appendonly yes``, ``aof-use-rdb-preamble no``), made once and kept."""
    named = "redis-benchmark" if requests is None else f"redis-benchmark-n{requests}"
    aof = root / named / "appendonlydir"
    if (aof / "appendonly.aof.manifest").exists():
        return aof
    work = aof.parent
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    port = free_port()
    no_rewrite = [] if requests is None else ["--auto-aof-rewrite-percentage", "0"]
    # (the larger run: no AOF rewrite, which would leave a base file of the final state)
    server = subprocess.Popen(redis_args(work, port, *no_rewrite), stdout=subprocess.DEVNULL)
    try:
        wait_ping(port, server)
        subprocess.run(
            ["redis-benchmark", "-p", str(port), "-q"]
            + ([] if requests is None else ["-n", str(requests)]),
            stdout=subprocess.DEVNULL,
            check=True,
        )
        subprocess.run(["redis-cli", "-p", str(port), "shutdown"], check=False)
        server.wait(60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return aof


def imported(root: Path, shards: int, requests: int | None = None) -> Path:
    """The benchmark AOF imported into ``shards`` shards (made once and kept)."""
    data = root / f"redis-benchmark-{shards}" if requests is None else root / f"rb-n{requests}"
    if not (data / "shard-0" / "control.json").exists():
        shutil.rmtree(data, ignore_errors=True)
        import_aof(benchmark_aof(root, requests), data, shards)
    return data


def naive_file(root: Path, records: int) -> Path:
    """``records`` length-prefixed records of 92 to 108 bytes with their crc32c."""
    path = root / f"naive-{records}.bin"
    if path.exists():
        return path
    with open(path, "wb") as out:
        for i in range(records):
            payload = b"SET key:%012d value-%d" % (i, i) + b"x" * (60 + i % 17)
            out.write(_RECORD.pack(len(payload), crc32c.crc32c(payload)) + payload)
    return path


NAIVE = """
import mmap, struct, sys, crc32c, orjson
record = struct.Struct("<II")
with open(sys.argv[1], "rb") as f, open(sys.argv[2], "wb") as out:
    data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    pos, end, lsn, write, dumps, crc = 0, len(data), 0, out.write, orjson.dumps, crc32c.crc32c
    while pos < end:
        length, stored = record.unpack_from(data, pos)
        payload = data[pos + 8 : pos + 8 + length]
        if crc(payload) != stored:
            raise SystemExit("bad crc")
        lsn += 1
        command, key, value = payload.split(b" ", 2)
        write(dumps({
            "before": None,
            "after": {"db": 0, "key": key.decode(), "value": value.decode()},
            "source": {"version": "naive", "connector": "naive", "name": "naive",
                       "ts_ms": 1, "snapshot": "false", "db": 0, "lsn": lsn,
                       "command": command.decode()},
            "op": "u", "ts_ms": 2,
        }) + b"\\n")
        pos += 8 + length
"""


def _timed(command: list[str], out: Path | None = None) -> float:
    """Wall seconds of ``command``, its standard output into ``out`` (else discarded)."""
    with open(out or os.devnull, "wb") as stdout:
        started = time.perf_counter()
        subprocess.run(command, check=True, stdout=stdout)
        return time.perf_counter() - started


def bench_tail(root: Path = DATA) -> list[str]:
    shard = imported(root, 1) / "shard-0"
    count = shard_read.info(shard)["latest_lsn"]
    naive = naive_file(root, count)
    out = root / "tail-out.ndjson"
    ours, naive_rates, ratios, batches = [], [], [], []
    for _ in range(ROUNDS):
        seconds = _timed([*MOONISH, "cdc", "tail", str(shard)], out)
        naive_seconds = _timed([sys.executable, "-c", NAIVE, str(naive), str(out)])
        ours.append(count / seconds)
        naive_rates.append(count / naive_seconds)
        ratios.append(naive_seconds / seconds)
        started, seen = time.perf_counter(), 0
        with moonish_tail(shard, 0) as stream:
            for batch in stream.batches():
                seen += len(batch.envelopes)
        batches.append(seen / (time.perf_counter() - started))
    merged = imported(root, 4)
    whole, parts, merged_ratios = [], [], []
    for _ in range(ROUNDS):
        started, seen = time.perf_counter(), 0
        with moonish_tail(merged, "earliest") as stream:
            for batch in stream.batches():
                seen += len(batch.envelopes)
        whole_seconds = time.perf_counter() - started
        started, one_by_one = time.perf_counter(), 0
        for k in range(4):
            with moonish_tail(merged / f"shard-{k}", 0) as stream:
                for batch in stream.batches():
                    one_by_one += len(batch.envelopes)
        parts_seconds = time.perf_counter() - started
        assert seen == one_by_one, (seen, one_by_one)
        whole.append(seen / whole_seconds)
        parts.append(seen / parts_seconds)
        merged_ratios.append(parts_seconds / whole_seconds)
    median = statistics.median
    return [
        f"records: {count:,} (redis-benchmark's default run, one shard, NEW_AND_OLD_IMAGES, "
        f"{shard_read.info(shard)['bytes'] / 2**20:,.0f} MiB)",
        f"`moonish cdc tail` (a process, NDJSON to a file): median {median(ours):,.0f} events/s",
        f"naive reader (mmap, crc32c, a dict per record, orjson.dumps, NDJSON): median "
        f"{median(naive_rates):,.0f} records/s",
        f"ratio `cdc tail` / naive reader: median {median(ratios):.2f} "
        f"(rounds: {', '.join(f'{r:.2f}' for r in ratios)})",
        f"`moonish.tail(...).batches()` in process: median {median(batches):,.0f} events/s",
        f"merged stream of 4 shards: median {median(whole):,.0f} events/s; the 4 shards read "
        f"one by one: {median(parts):,.0f} events/s; ratio: median {median(merged_ratios):.2f}",
    ]


LOADED = """
import sys
from cli.main import main
main(sys.argv[1:])
heavy = sorted({m.split('.')[0] for m in sys.modules} & {'aiohttp', 'confluent_kafka', 'pyspark',
               'hiredis', 'pyarrow'})
sys.stderr.write(f"loaded: {len([m for m in sys.modules if m.startswith('moonish')])} moonish "
                 f"modules; heavy: {heavy}\\n")
"""


def bench_poll(root: Path = DATA) -> list[str]:
    shard = imported(root, 1) / "shard-0"
    lsn = shard_read.info(shard)["latest_lsn"] - 20
    poll = [*MOONISH, "cdc", "read", str(shard), str(lsn), "--limit", "10"]
    bare = [sys.executable, "-c", "import click, orjson, crc32c"]
    polls, bares, ratios = [], [], []
    for _ in range(POLLS):
        polls.append(_timed(poll))
        bares.append(_timed(bare))
        ratios.append(polls[-1] / bares[-1])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    loaded = (
        subprocess.run(
            [sys.executable, "-c", LOADED, "cdc", "read", str(shard), str(lsn), "--limit", "10"],
            capture_output=True,
            env=env,
            check=True,
        )
        .stderr.decode()
        .strip()
        .splitlines()[-1]
    )
    median = statistics.median
    return [
        f"`moonish cdc read <shard> {lsn} --limit 10`: median {median(polls) * 1000:.0f} ms",
        f'`python -c "import click, orjson, crc32c"`: median {median(bares) * 1000:.0f} ms',
        f"ratio: median {median(ratios):.2f} (rounds: {', '.join(f'{r:.2f}' for r in ratios)})",
        f"a local read {loaded}",
    ]


def bench_tail_memory(root: Path = DATA) -> list[str]:
    shard = imported(root, 1, requests=300_000) / "shard-0"
    info = shard_read.info(shard)
    with open(os.devnull, "wb") as out:
        process = subprocess.Popen([*MOONISH, "cdc", "tail", str(shard)], stdout=out)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0, process.returncode
    return [
        f"`moonish cdc tail` of one shard of {info['bytes'] / 2**30:.2f} GiB "
        f"({info['latest_lsn']:,} records, redis-benchmark -n 300000, NEW_AND_OLD_IMAGES): "
        f"peak RSS {usage.ru_maxrss / 1024:.0f} MiB"
    ]


FOLLOW_APPENDER = """
import sys, time
from moonish.log.records import KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
options = WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=4 << 20)
deadline, i = time.monotonic() + float(sys.argv[2]), 0
with WalWriter(sys.argv[1], options) as writer:
    started = time.monotonic()
    while time.monotonic() < deadline:
        writer.append_batch([KvCommand(0, (b"SET", b"key:%d" % (i + j % 1000),
                                           b"v" * (50 + (i + j) % 250))) for j in range(20)])
        i += 20
        time.sleep(max(0.0, started + i / 2000 - time.monotonic()))
print(i)
"""


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def bench_follow_memory(root: Path = DATA) -> list[str]:
    seconds = float(os.environ.get("MOONISH_BENCH_FOLLOW_S", "300"))
    shard = root / "follow-memory" / "shard-0"
    shutil.rmtree(shard.parent, ignore_errors=True)
    WalWriter(shard, WriterOptions(fsync=FsyncPolicy.NEVER, segment_bytes=4 << 20)).close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    follower = subprocess.Popen(
        [*MOONISH, "cdc", "tail", str(shard), "--follow"], stdout=subprocess.PIPE
    )
    seen = [0]  # envelopes the follower has written

    def count() -> None:
        assert follower.stdout is not None
        for _ in follower.stdout:
            seen[0] += 1

    counter = threading.Thread(target=count, daemon=True)
    counter.start()
    appender = subprocess.Popen(
        [sys.executable, "-c", FOLLOW_APPENDER, str(shard), str(seconds)],
        stdout=subprocess.PIPE,
        env=env,
    )
    samples: list[tuple[float, int]] = []
    started = time.monotonic()
    while appender.poll() is None:
        time.sleep(5)
        samples.append((time.monotonic() - started, _rss_kib(follower.pid)))
    appended = int(appender.communicate()[0])
    deadline = time.monotonic() + 60
    while seen[0] < appended and time.monotonic() < deadline:
        time.sleep(0.1)
    follower.terminate()
    follower.wait()
    counter.join(10)
    assert seen[0] == appended, f"the follower wrote {seen[0]} of {appended} envelopes"
    warm = [(t, kib) for t, kib in samples if t >= 60] or samples
    slope = statistics.linear_regression([t for t, _ in warm], [kib for _, kib in warm]).slope
    mib = 1024
    return [
        f"`moonish cdc tail --follow` for {seconds:.0f} s while {appended:,} records were "
        f"appended (2,000/s, 4 MiB segments, {shard_read.info(shard)['bytes'] / 2**20:,.0f} MiB): "
        f"RSS {warm[0][1] / mib:.1f} MiB after the first minute, {samples[-1][1] / mib:.1f} MiB "
        f"at the end, peak {max(kib for _, kib in samples) / mib:.1f} MiB; slope after the first "
        f"minute {slope * 3600 / mib:+.2f} MiB/hour"
    ]


if __name__ == "__main__":  # python -m bench.tail [tail] [poll] [tail-memory] [follow-memory]
    os.sched_setaffinity(0, {0})
    DATA.mkdir(exist_ok=True)
    parts = {
        "tail": bench_tail,
        "poll": bench_poll,
        "tail-memory": bench_tail_memory,
        "follow-memory": bench_follow_memory,
    }
    for name in sys.argv[1:] or list(parts):
        for line in parts[name]():
            print(f"- {line}", flush=True)
