"""Benchmarks of what one write command costs as its collection grows (``make bench`` sections
"families" and "import-benchmark"; docs/benchmarks.md §13).

- families: per command family, the CPU cost of one command on a collection of 1,000 and of
  1,000,000 elements, through one ShardWriter (NEW_AND_OLD_IMAGES, the default image limit,
  fsync never, no sweep thread): the commands Redis documents as O(1) or O(log n) per element.
  Each family's commands come in pairs that leave the collection's size as it was (a push and
  a pop, an add and a remove), so the size holds over the timed commands. The collections are
  filled through the writer as a client would fill them (variadic RPUSH, HSET, SADD, ZADD; one
  XADD per entry). Rounds alternate the two sizes; the report gives the median microseconds per
  command at each size and the median of the per-round ratios (1,000,000 over 1,000); the
  target is a ratio of at most 2.
- import-benchmark: ``wal import-aof`` (in process, ``--shards 1``, NEW_AND_OLD_IMAGES) of the
  AOF redis-benchmark's default run makes a redis-server write (bench.tail.benchmark_aof: its
  LPUSH/RPUSH tests push 100,000 elements each onto one ``mylist``), beside redis-server's own
  load of the same file (bench.importer.redis_load), in alternating rounds: commands/s and the
  ratio of the times. Targets: at least 150,000 commands/s on one core, within 10x of Redis.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from bench.importer import moonish_import, redis_load
from bench.tail import benchmark_aof
from moonish.log.records import ViewType
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.state.config import StreamConfig
from moonish.state.shard import ShardOptions, ShardWriter

SIZES = (1_000, 1_000_000)
PAIRS = 5_000  # timed pairs of commands per family, size and round
ROUNDS = 5
FILL_BATCH = 1_000  # elements per variadic command while filling

Argv = list[bytes]
Fill = Callable[[int], list[Argv]]
Pair = Callable[[int], tuple[Argv, Argv]]


def _variadic(command: bytes, per: Callable[[int], list[bytes]]) -> Fill:
    """Commands that add ``size`` elements to key ``k``, FILL_BATCH at a time."""

    def fill(size: int) -> list[Argv]:
        out = []
        for start in range(0, size, FILL_BATCH):
            args = [b"k"]
            for i in range(start, min(size, start + FILL_BATCH)):
                args += per(i)
            out.append([command, *args])
        return out

    return fill


def _stream_fill(size: int) -> list[Argv]:
    return [[b"XADD", b"k", b"%d-0" % (i + 1), b"f", b"v%d" % i] for i in range(size)]


_LIST_FILL = _variadic(b"RPUSH", lambda i: [b"e%d" % i])
FAMILIES: dict[str, tuple[Fill, Pair]] = {
    "LPUSH + RPOP (a queue)": (
        _LIST_FILL,
        lambda i: ([b"LPUSH", b"k", b"n%d" % i], [b"RPOP", b"k"]),
    ),
    "RPUSH + LPOP": (_LIST_FILL, lambda i: ([b"RPUSH", b"k", b"n%d" % i], [b"LPOP", b"k"])),
    "LMOVE k k (rotate)": (
        _LIST_FILL,
        lambda i: ([b"LMOVE", b"k", b"k", b"LEFT", b"RIGHT"], [b"RPOPLPUSH", b"k", b"k"]),
    ),
    "LSET at either end": (
        _LIST_FILL,
        lambda i: ([b"LSET", b"k", b"0", b"h%d" % i], [b"LSET", b"k", b"-1", b"t%d" % i]),
    ),
    "HSET + HDEL": (
        _variadic(b"HSET", lambda i: [b"f%d" % i, b"v"]),
        lambda i: ([b"HSET", b"k", b"new%d" % i, b"v"], [b"HDEL", b"k", b"new%d" % i]),
    ),
    "SADD + SREM": (
        _variadic(b"SADD", lambda i: [b"m%d" % i]),
        lambda i: ([b"SADD", b"k", b"new%d" % i], [b"SREM", b"k", b"new%d" % i]),
    ),
    "ZADD + ZREM": (
        _variadic(b"ZADD", lambda i: [b"%d" % (i * 7 % 1_000_003), b"m%d" % i]),
        lambda i: (
            [b"ZADD", b"k", b"%d" % (i * 13 % 999_983), b"new%d" % i],
            [b"ZREM", b"k", b"new%d" % i],
        ),
    ),
    "ZINCRBY (a member moves)": (
        _variadic(b"ZADD", lambda i: [b"%d" % (i * 7 % 1_000_003), b"m%d" % i]),
        lambda i: (
            [b"ZINCRBY", b"k", b"3", b"m%d" % (i % 1000)],
            [b"ZINCRBY", b"k", b"-3", b"m%d" % (i % 1000)],
        ),
    ),
    "XADD + XDEL": (
        _stream_fill,
        lambda i: (
            [b"XADD", b"k", b"%d-0" % (10_000_000 + i), b"f", b"v"],
            [b"XDEL", b"k", b"%d-0" % (10_000_000 + i)],
        ),
    ),
    "XADD MAXLEN = (a capped stream)": (
        _stream_fill,
        lambda i: (
            [b"XADD", b"k", b"MAXLEN", b"=", b"SIZE", b"%d-0" % (20_000_000 + 2 * i), b"f", b"v"],
            [b"XADD", b"k", b"MAXLEN", b"=", b"SIZE", b"%d-0" % (20_000_001 + 2 * i), b"f", b"v"],
        ),
    ),
}


def _writer(shard: Path) -> ShardWriter:
    shutil.rmtree(shard, ignore_errors=True)
    options = ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER),
        StreamConfig(ViewType.NEW_AND_OLD_IMAGES),
        expiry_sweep_ms=0,
    )
    return ShardWriter(shard, options)


def _sized(argv: Argv, size: int) -> Argv:
    return [b"%d" % size if arg == b"SIZE" else arg for arg in argv]


def _per_command_us(writer: ShardWriter, pair: Pair, size: int, first: int) -> float:
    commands = []
    for i in range(first, first + PAIRS):
        one, two = pair(i)
        commands += [_sized(one, size), _sized(two, size)]
    execute = writer.execute
    began = time.process_time()
    for argv in commands:
        execute(0, argv)
    return (time.process_time() - began) / len(commands) * 1e6


def bench_families(root: Path) -> list[str]:
    lines = [
        f"per command family: CPU microseconds per command at {SIZES[0]:,} and {SIZES[1]:,} "
        f"elements (NEW_AND_OLD_IMAGES, images up to the default 4,096 bytes), {PAIRS * 2:,} "
        f"commands per size and round, {ROUNDS} rounds alternating the sizes; target: ratio <= 2"
    ]
    for name, (fill, pair) in FAMILIES.items():
        writers = {}
        for size in SIZES:
            writer = writers[size] = _writer(root / f"families-{size}")
            for argv in fill(size):
                writer.execute(0, argv)
        try:
            costs: dict[int, list[float]] = {size: [] for size in SIZES}
            for round_number in range(ROUNDS):
                order = SIZES if round_number % 2 == 0 else SIZES[::-1]
                for size in order:
                    first = round_number * PAIRS
                    costs[size].append(_per_command_us(writers[size], pair, size, first))
        finally:
            for size, writer in writers.items():
                writer.close()
                shutil.rmtree(root / f"families-{size}", ignore_errors=True)
        small, large = costs[SIZES[0]], costs[SIZES[1]]
        ratios = [b / a for a, b in zip(small, large, strict=True)]
        lines.append(
            f"{name}: {statistics.median(small):.1f} µs at {SIZES[0]:,}, "
            f"{statistics.median(large):.1f} µs at {SIZES[1]:,}: ratio median "
            f"**{statistics.median(ratios):.2f}** (rounds {min(ratios):.2f}..{max(ratios):.2f})"
        )
    return lines


IMPORT_ROUNDS = 5


def bench_import_benchmark_aof(root: Path) -> list[str]:
    aof = benchmark_aof(root)
    size = sum(path.stat().st_size for path in aof.iterdir())
    moonish_import(aof, root / "import-benchmark-out", 1)  # warm-up, not timed
    ours: list[float] = []
    theirs: list[float] = []
    cpus: list[float] = []
    commands = 0
    for round_number in range(IMPORT_ROUNDS):
        steps = ["redis", "moonish"] if round_number % 2 == 0 else ["moonish", "redis"]
        for step in steps:
            if step == "redis":
                theirs.append(redis_load(aof, root / "import-benchmark-redis")[0])
            else:
                seconds, cpu, commands, _ = moonish_import(aof, root / "import-benchmark-out", 1)
                ours.append(seconds)
                cpus.append(cpu)
    ratios = [a / b for a, b in zip(ours, theirs, strict=True)]
    seconds = statistics.median(ours)
    return [
        f"AOF of redis-benchmark's default run: {commands:,} commands, {size / 2**20:,.1f} MiB, "
        f"{IMPORT_ROUNDS} rounds alternating moonish and redis-server, pinned to core 0",
        f"redis-server's load (its log line): median {statistics.median(theirs):.3f} s",
        f"moonish wal import-aof --shards 1 (NEW_AND_OLD_IMAGES): median {seconds:.2f} s = "
        f"**{commands / seconds:,.0f} commands/s**, CPU {commands / statistics.median(cpus):,.0f} "
        f"commands per CPU-second; time / redis-server's load: median "
        f"**{statistics.median(ratios):.1f}x** (rounds {min(ratios):.1f}..{max(ratios):.1f})",
    ]
