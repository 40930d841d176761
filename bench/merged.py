"""Merged reads (``make bench`` section "merged"): one stream over 4 shards against reading
the 4 shards one after another, over the same >= 1M records.

The data directory is written the way a live source writes it: the real AOF's commands, each
appended to the shard of its key's hash slot by 4 writers sharing the system clock, so commit
times interleave across shards at microsecond grain (the hardest case for the merge). Rounds
alternate the two reads; the report gives medians and the median of the per-round ratios
(target: merged >= 0.9x of one by one).
"""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from bench.state import aof_commands
from moonish.cdc import shard_read
from moonish.cdc.merged import Resolved
from moonish.cdc.merged_read import MergedTail, read_merged
from moonish.log.records import KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.redis.routing.commands import split_command
from moonish.slots import shard_of_key

SHARDS = 4
ROUNDS = 7


def merged_data(root: Path, aof: Path, records: int) -> Path:
    """>= ``records`` plain kv records over 4 shards, by hash slot, commit times interleaved."""
    data = root / "merged"
    shards = [data / f"shard-{k}" for k in range(SHARDS)]
    if (
        all(s.exists() for s in shards)
        and sum(shard_read.info(s)["next_lsn"] - 1 for s in shards) >= records
    ):
        return data
    shutil.rmtree(data, ignore_errors=True)
    commands = aof_commands(aof)
    writers = [
        WalWriter(s, WriterOptions(k, fsync=FsyncPolicy.NEVER, heartbeat_ms=None))
        for k, s in enumerate(shards)
    ]
    try:
        written = 0
        while written < records:
            for db, argv in commands:
                parts = [KvCommand(db, part, pos) for _, part, pos in split_command(argv)]
                key = parts[0].argv[parts[0].key_pos] if parts[0].key_pos else b""
                writer = writers[shard_of_key(key, SHARDS)]
                if len(parts) == 1:
                    writer.append(parts[0])
                else:
                    writer.append_batch(parts)
                written += len(parts)
    finally:
        for writer in writers:
            writer.close()
    return data


def merged_read(data: Path) -> tuple[int, float]:
    started = time.perf_counter()
    count = 0
    with MergedTail(data) as stream:
        for batch in stream.batches():
            if not isinstance(batch, Resolved):
                count += len(batch.envelopes)
    return count, time.perf_counter() - started


def one_by_one(data: Path) -> tuple[int, float]:
    started = time.perf_counter()
    count = 0
    for k in range(SHARDS):
        with shard_read.tail(data / f"shard-{k}", 0) as stream:
            for batch in stream.batches():
                count += len(batch.envelopes)
    return count, time.perf_counter() - started


def paged(data: Path, limit: int = 10_000) -> tuple[int, float]:
    """``moonish cdc read <data_dir> <token> --limit 10000`` in process, page after page."""
    started = time.perf_counter()
    count, token = 0, "earliest"
    while True:
        result = read_merged(data, token, limit)
        if not result.events:
            return count, time.perf_counter() - started
        count += len(result.events)
        token = str(result.token)


def bench_merged(root: Path, aof: Path, records: int) -> list[str]:
    data = merged_data(root, aof, records)
    merged_read(data)  # warm-up, not timed
    one_by_one(data)
    merged, single, pages, ratios = [], [], [], []
    for _ in range(ROUNDS):
        count, seconds = merged_read(data)
        single_count, single_seconds = one_by_one(data)
        page_count, page_seconds = paged(data)
        assert count == single_count == page_count
        merged.append(count / seconds)
        single.append(count / single_seconds)
        pages.append(count / page_seconds)
        ratios.append(single_seconds / seconds)
    return [
        f"records: {count:,} plain kv records over {SHARDS} shards by hash slot, commit "
        "times interleaved",
        f"merged stream (MergedTail batches, as `cdc tail <data_dir>`): median "
        f"{statistics.median(merged):,.0f} events/s",
        f"the 4 shards one after another (Tail batches): median "
        f"{statistics.median(single):,.0f} events/s",
        f"ratio merged / one by one (same round): median {statistics.median(ratios):.2f} "
        f"(rounds: {', '.join(f'{x:.2f}' for x in ratios)})",
        f"merged pages of 10,000 from a token (`cdc read <data_dir> <token>`): median "
        f"{statistics.median(pages):,.0f} events/s",
    ]
