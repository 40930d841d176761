"""Benchmarks of the keyspace write path and of reads with images (``make bench``).

- views: the real AOF fixture's 43,896 write commands replayed through one ShardWriter per
  view type (fsync never, no sweep thread), stream off and each view type, interleaved in
  blocks of 500 commands (``replay_interleaved``). The report gives median records/s and the
  median, over rounds, of each view's throughput over KEYS_ONLY's in the same round.
- images: read + encode of >= 1M kv_change records written under NEW_AND_OLD_IMAGES (the AOF
  replayed with its keys renamed per pass), against the bare loop of bench.run.
"""

from __future__ import annotations

import random
import shutil
import statistics
import time
from pathlib import Path

from moonish.cdc import shard_read
from moonish.clock import FixedClock
from moonish.log.records import ViewType
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.redis.aof.files import AofCommands, read_manifest
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.commands.execute import keys_of
from moonish.state.config import StreamConfig
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
    """A benchmark's writer: no fsync, no sweep, and no snapshots of its own (their
    checkpoint records would be records the readers measured here leave out)."""
    return ShardOptions(
        WriterOptions(fsync=FsyncPolicy.NEVER),
        StreamConfig(view),
        expiry_sweep_ms=0,
        snapshots=SnapshotPolicy.off(),
    )


BLOCK = 500  # commands per timed block


def replay_interleaved(
    data: Path, views: list[ViewType], commands: list[tuple[int, list[bytes]]], seed: int
) -> tuple[int, dict[ViewType, float]]:
    """(records per view, seconds per view) of running ``commands`` on one new shard per
    view, in blocks of BLOCK commands taken by each view in turn (a shuffled order per block),
    so that the machine's speed changing over time (a shared VM's CPU varies from one second
    to the next) falls on every view alike."""
    shuffle = random.Random(seed).shuffle
    seconds = dict.fromkeys(views, 0.0)
    records = dict.fromkeys(views, 0)
    writers = {}
    for view in views:
        shutil.rmtree(data / view.name, ignore_errors=True)
        writers[view] = ShardWriter(data / view.name, _options(view), FixedClock(START_US, 10))
    try:
        order = list(views)
        for first in range(0, len(commands), BLOCK):
            block = commands[first : first + BLOCK]
            shuffle(order)
            for view in order:
                execute = writers[view].execute
                count = 0
                began = time.perf_counter()
                for db, argv in block:
                    count += len(execute(db, argv).lsns)
                seconds[view] += time.perf_counter() - began
                records[view] += count
    finally:
        for view, writer in writers.items():
            writer.close()
            shutil.rmtree(data / view.name)
    counts = set(records.values())
    assert len(counts) == 1, records  # every view writes the same records
    return counts.pop(), seconds


def bench_views(data: Path, appendonlydir: Path) -> list[str]:
    commands = aof_commands(appendonlydir)
    views = list(ViewType)
    rates: dict[ViewType, list[float]] = {view: [] for view in views}
    ratios: dict[ViewType, list[float]] = {view: [] for view in views}
    replay_interleaved(data / "views", views, commands, -1)  # warm-up
    for round_number in range(ROUNDS):
        records, seconds = replay_interleaved(data / "views", views, commands, round_number)
        for view in views:
            rates[view].append(records / seconds[view])
            ratios[view].append(seconds[ViewType.KEYS_ONLY] / seconds[view])
    lines = [
        f"{len(commands):,} commands of the real AOF, {records:,} records per view, "
        f"{ROUNDS} rounds; views interleaved in blocks of {BLOCK} commands"
    ]
    for view in views:
        overhead = 1 - statistics.median(ratios[view])
        lines.append(
            f"{view.name}: median {statistics.median(rates[view]):,.0f} records/s "
            f"({statistics.median(rates[view]) * len(commands) / records:,.0f} commands/s); "
            f"vs KEYS_ONLY in the same round: median ratio {statistics.median(ratios[view]):.2f}"
            f" ({overhead:+.0%} overhead; rounds {min(ratios[view]):.2f}..{max(ratios[view]):.2f})"
        )
    return lines


def images_wal(data: Path, appendonlydir: Path, records: int, name: str = "images") -> Path:
    """A shard of >= ``records`` kv_change records under NEW_AND_OLD_IMAGES, in
    ``data/<name>/shard-0``."""
    shard = data / name / "shard-0"
    if shard.exists() and shard_read.info(shard)["next_lsn"] > records:
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
