"""Benchmarks of the keyspace write path and of reads with images (``make bench``).

- views: the real AOF fixture's 43,896 write commands replayed through a ShardWriter (fsync
  never, no sweep thread) with the stream off and under each view type, in a shuffled order
  per round. The report gives median records/s and the median, over rounds, of each view's
  throughput over KEYS_ONLY's in the same round.
- images: read + encode of >= 1M kv_change records written under NEW_AND_OLD_IMAGES (the AOF
  replayed with its keys renamed per pass), against the bare loop of bench.run.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from pathlib import Path

import moonish.api
from moonish.clock import FixedClock
from moonish.log.records import ViewType
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.redis.aof import AofCommands, read_manifest
from moonish.state.config import StreamConfig
from moonish.state.execute import keys_of
from moonish.state.shard import ShardOptions, ShardWriter

ROUNDS = 9
START_US = 1_795_264_000_000_000  # the fixture's time: its PEXPIREAT times lie ahead of it


def aof_commands(appendonlydir: Path) -> list[tuple[int, list[bytes]]]:
    """The AOF's write commands with their db (SELECT applied; MULTI/EXEC dropped)."""
    commands = []
    for aof_file in read_manifest(str(appendonlydir)):
        db = 0
        for _, argv in AofCommands(str(appendonlydir / aof_file.name)):
            name = argv[0].upper()
            if name == b"SELECT":
                db = int(argv[1])
            elif name not in (b"MULTI", b"EXEC"):
                commands.append((db, argv))
    return commands


def _options(view: ViewType) -> ShardOptions:
    return ShardOptions(WriterOptions(fsync=FsyncPolicy.NEVER), StreamConfig(view),
                        expiry_sweep_ms=0)  # fmt: skip


def replay(
    path: Path, view: ViewType, commands: list[tuple[int, list[bytes]]]
) -> tuple[int, float]:
    """(records, seconds) of running ``commands`` on a new shard at ``path``."""
    shutil.rmtree(path, ignore_errors=True)
    records = 0
    with ShardWriter(path, _options(view), FixedClock(START_US, 10)) as writer:
        began = time.perf_counter()
        for db, argv in commands:
            records += len(writer.execute(db, argv).lsns)
        seconds = time.perf_counter() - began
    shutil.rmtree(path)
    return records, seconds


def bench_views(data: Path, appendonlydir: Path) -> list[str]:
    commands = aof_commands(appendonlydir)
    rates: dict[ViewType, list[float]] = {view: [] for view in ViewType}
    ratios: dict[ViewType, list[float]] = {view: [] for view in ViewType}
    replay(data / "views", ViewType.KEYS_ONLY, commands)  # warm-up
    order = list(ViewType)
    for round_number in range(ROUNDS):
        random.Random(round_number).shuffle(order)  # no view always runs first or last
        for view in order:
            records, seconds = replay(data / "views", view, commands)
            rates[view].append(records / seconds)
        for view in ViewType:
            ratios[view].append(rates[view][-1] / rates[ViewType.KEYS_ONLY][-1])
    lines = [f"{len(commands):,} commands of the real AOF, {records:,} records, {ROUNDS} rounds"]
    for view in ViewType:
        overhead = 1 - statistics.median(ratios[view])
        lines.append(
            f"{view.name}: median {statistics.median(rates[view]):,.0f} records/s "
            f"({statistics.median(rates[view]) * len(commands) / records:,.0f} commands/s); "
            f"vs KEYS_ONLY in the same round: median ratio {statistics.median(ratios[view]):.2f}"
            f" ({overhead:+.0%} overhead)"
        )
    return lines


def images_wal(data: Path, appendonlydir: Path, records: int) -> Path:
    """A shard of >= ``records`` kv_change records under NEW_AND_OLD_IMAGES."""
    shard = data / "images" / "shard-0"
    if shard.exists() and moonish.api.info(shard)["next_lsn"] > records:
        return shard
    shutil.rmtree(shard.parent, ignore_errors=True)
    commands = aof_commands(appendonlydir)
    with ShardWriter(shard, _options(ViewType.NEW_AND_OLD_IMAGES), FixedClock(START_US, 10)) as w:
        rename = 0
        while w.next_lsn <= records:
            prefix = b"p%d:" % rename
            for db, argv in commands:
                keys = set(keys_of(argv))
                w.execute(db, [prefix + a if i and a in keys else a for i, a in enumerate(argv)])
            rename += 1
    return shard
