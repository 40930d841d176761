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
"""

from __future__ import annotations

import os
import shutil
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

import crc32c

from bench.paths import DATA, MOONISH, ROOT
from moonish.cdc import shard_read
from moonish.cdc.api import tail as moonish_tail
from moonish.redis.aof.importer import import_aof

ROUNDS = 5
POLLS = 7
REDIS_PORT = 6399
_RECORD = struct.Struct("<II")  # payload length, crc32c of the payload


def benchmark_aof(root: Path) -> Path:
    """The appendonlydir a redis-server wrote while ``redis-benchmark`` ran its default tests
    against it (``appendonly yes``, ``aof-use-rdb-preamble no``), made once and kept."""
    aof = root / "redis-benchmark" / "appendonlydir"
    if (aof / "appendonly.aof.manifest").exists():
        return aof
    work = aof.parent
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(REDIS_PORT),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(work),
            "--appendonly",
            "yes",
            "--aof-use-rdb-preamble",
            "no",
            "--appendfsync",
            "no",
            "--save",
            "",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(100):
            ping = subprocess.run(
                ["redis-cli", "-p", str(REDIS_PORT), "ping"], capture_output=True, check=False
            )
            if ping.stdout.strip() == b"PONG":
                break
            time.sleep(0.1)
        subprocess.run(
            ["redis-benchmark", "-p", str(REDIS_PORT), "-q"],
            stdout=subprocess.DEVNULL,
            check=True,
        )
        subprocess.run(["redis-cli", "-p", str(REDIS_PORT), "shutdown"], check=False)
        server.wait(60)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    return aof


def imported(root: Path, shards: int) -> Path:
    """The benchmark AOF imported into ``shards`` shards (made once and kept)."""
    data = root / f"redis-benchmark-{shards}"
    if not (data / "shard-0").exists():
        import_aof(benchmark_aof(root), data, shards)
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


if __name__ == "__main__":  # python -m bench.tail [tail] [poll]
    os.sched_setaffinity(0, {0})
    DATA.mkdir(exist_ok=True)
    parts = {"tail": bench_tail, "poll": bench_poll}
    for name in sys.argv[1:] or list(parts):
        for line in parts[name]():
            print(f"- {line}", flush=True)
