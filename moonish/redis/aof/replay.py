"""Replaying AOF files into a data directory's shards (moonish.redis.aof.importer runs it): each
shard from the source position it stored, or, when the files a position names are gone, the
whole AOF into scratch shards and the differences into each shard; and the import's report.

One file's commands go through the per-command loop (moonish.redis.aof.loop); an RDB base file
is loaded key by key (moonish.redis.rdb.contents). A parallel import's workers
(moonish.redis.aof.parallel) run :func:`replay_aof` on their own shards.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from moonish.clock import Clock
from moonish.log.records import ViewType
from moonish.log.writer import FsyncPolicy, WriterOptions
from moonish.redis.aof.files import AofCommands, AofFormatError, starts_with_rdb
from moonish.redis.aof.loop import FileReplay, Resume
from moonish.redis.rdb.contents import read_file_contents
from moonish.redis.routing.keyfilter import NO_FILTER, FilterSpec, KeyFilter, filtered_counts
from moonish.redis.routing.router import Exchange, Router
from moonish.redis.routing.shards import OpenShards, open_shards
from moonish.redis.routing.sources import decode_position, describe, encode_position
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.config import StreamConfig
from moonish.state.keyspace import Keyspace
from moonish.state.load import (
    load_entries,
    load_order,
    loader_for,
    remove_missing,
    set_libraries,
)
from moonish.state.shard import ShardWriter


@dataclass
class ImportReport:
    """What an import did.

    Attributes:
        files: the AOF files replayed, in order.
        bytes: bytes of AOF read.
        commands: Redis write commands replayed (not counting SELECT, MULTI, EXEC, nor
            skipped commands).
        per_command: commands by name (upper case).
        skipped: commands written as ``moonish.skipped`` message records (``skip_unsupported``)
            by name (upper case).
        transactions: MULTI/EXEC blocks replayed.
        records: records appended over all shards.
        per_shard: records appended to each shard.
        lsn_ranges: per shard, the ``[first, last]`` LSNs appended, or ``None``.
        truncated_tail: description of an incomplete tail left out, or ``None``.
        resumed_from: per shard, the source position it had before this run
            (moonish.redis.routing.sources.describe; ``"none"``: it started from the beginning).
        resynced: the positions named AOF files that are gone (Redis rewrote the AOF): the
            shards received the differences (:func:`import_aof`).
        rdb_keys: keys loaded from an RDB base file (``r`` rows written).
        position: the source position reached (``"none"`` for an empty AOF).
        filtered: commands (by rule) and RDB keys (``keys:<rule>``) the source filter left
            out in this run (moonish.redis.routing.keyfilter).
    """

    files: list[str] = field(default_factory=list)
    bytes: int = 0
    commands: int = 0
    per_command: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    transactions: int = 0
    records: int = 0
    per_shard: list[int] = field(default_factory=list)
    lsn_ranges: list[tuple[int, int] | None] = field(default_factory=list)
    truncated_tail: str | None = None
    resumed_from: list[str] = field(default_factory=list)
    resynced: bool = False
    rdb_keys: int = 0
    position: str = "none"
    filtered: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True)
class Setup:
    """What every process of a parallel import needs (moonish.redis.aof.parallel)."""

    paths: list[str]
    shards: int
    log: WriterOptions
    stream: StreamConfig
    clock: Clock
    skip_unsupported: bool
    snapshots: SnapshotPolicy | None = None
    key_filter: FilterSpec = NO_FILTER


def replay_aof(
    paths: list[str],
    writers: list[ShardWriter],
    clock: Clock,
    skip_unsupported: bool,
    progress: Callable[[int], None] | None,
    opened: OpenShards | None = None,
    exchange: Exchange | None = None,
    others: frozenset[int] = frozenset(),
    key_filter: KeyFilter | None = None,
) -> ImportReport:
    """Replay the AOF files ``paths`` into ``writers`` (one per shard) from each shard's
    stored position, mark and sweep every shard, and report. ``opened``: where a resync
    (the positions name files that are gone) makes its scratch shards. A parallel import's
    worker (moonish.redis.aof.parallel; new shards, so no resync) passes ``others``, the shards
    other workers write (they run nothing here), and its ``exchange``. ``key_filter``: the
    source filter, whose counts grow with this run's."""
    report = ImportReport(per_shard=[0] * len(writers))
    router = Router(writers, clock, skip_unsupported, exchange, key_filter)
    positions = [decode_position(writer.source, writer.shard_dir) for writer in writers]
    report.resumed_from = [describe(position) for position in positions]
    names = [os.path.basename(path) for path in paths]
    if any(position and position.get("aof") not in names for position in positions):
        assert opened is not None
        _resync(paths, opened, router, report, progress, clock)
    else:
        resume = [_resume_point(position, names) for position in positions]
        for shard in others:  # as if past every file: skipped
            resume[shard] = (len(paths), 0)
        for index, path in enumerate(paths):
            _replay_file(
                path, index, resume, router, report, progress, clock, last=index == len(paths) - 1
            )
    for shard, writer in enumerate(writers):
        if router.position:  # every shard says how far the AOF is applied
            router.mark(shard, router.position)
        router.records[shard] += writer.sweep_expired()  # as Redis does once loaded
        writer.sync()
    report.commands, report.per_command = router.commands, router.per_command
    report.skipped = router.skipped
    if key_filter is not None:
        report.filtered = filtered_counts(key_filter)
    report.per_shard = list(router.records)
    report.records = sum(router.records)
    report.lsn_ranges = [
        None if first is None else (first, writer.next_lsn - 1)
        for first, writer in zip(router.first_lsn, writers, strict=True)
    ]
    return report


def _resume_point(position: dict[str, Any], names: list[str]) -> Resume:
    if not position:
        return (-1, 0)
    return (names.index(position["aof"]), int(position["offset"]))


def _resync(
    paths: list[str],
    opened: OpenShards,
    router: Router,
    report: ImportReport,
    progress: Callable[[int], None] | None,
    clock: Clock,
) -> None:
    """The files the shards' positions name are gone: replay the whole AOF into scratch
    shards (a temporary directory in ``out_dir``), then give each shard the differences
    between its keyspace and the scratch one, with the final position."""
    report.resynced = True
    shards = len(opened.writers)
    scratch_dir = tempfile.mkdtemp(prefix=".resync-", dir=opened.data_dir)
    try:
        scratch = open_shards(
            scratch_dir,
            shards,
            WriterOptions(fsync=FsyncPolicy.NEVER),
            StreamConfig(view=ViewType.OFF),
            clock,
            SnapshotPolicy.off(),  # removed once the differences are applied
        )
        try:
            scratch_router = Router(
                scratch.writers, clock, router.skip_unsupported, key_filter=router.key_filter
            )
            for index, path in enumerate(paths):
                _replay_file(
                    path,
                    index,
                    [(-1, 0)] * shards,
                    scratch_router,
                    report,
                    progress,
                    clock,
                    last=index == len(paths) - 1,
                )
            final = router.position = scratch_router.position
            router.add_counts(scratch_router)
            for shard, writer in enumerate(opened.writers):
                set_libraries(writer, list(scratch.writers[shard].libraries.values()))
                keyspace = scratch.writers[shard].keyspace
                loader = loader_for(writer, b"RESYNC")
                append = router.appender(shard)
                remove_missing(loader, _has(keyspace), append)  # first: the position goes last
                load_entries(loader, list(keyspace.items()), append, rows=False, source=final)
        finally:
            for writer in scratch.writers:
                writer.close()
    finally:
        shutil.rmtree(scratch_dir, ignore_errors=True)


def _has(keyspace: Keyspace) -> Callable[[int, bytes], bool]:
    return lambda db, key: keyspace.get(db, key) is not None


def _load_rdb_base(
    path: str,
    index: int,
    resume: list[Resume],
    router: Router,
    report: ImportReport,
    clock: Clock,
) -> None:
    """Load the RDB base file ``path`` into the shards that have not loaded it (no position
    yet): its keys as ``r`` rows, the position ``{"aof": name, "offset": size}`` on the last."""
    todo = [shard for shard, point in enumerate(resume) if point < (index, 0)]
    size = os.path.getsize(path)
    position = encode_position({"aof": os.path.basename(path), "offset": size})
    router.position = position
    if not todo:
        return
    contents = read_file_contents(
        path, len(router.writers), now_ms=clock.now_us() // 1000, drop_expired=False
    )
    first, last = load_order(
        [shard in todo and bool(keys) for shard, keys in enumerate(contents.keys)]
    )  # one process, shards in order
    for shard in todo:
        set_libraries(router.writers[shard], contents.functions)
        loader = loader_for(router.writers[shard], b"RDB")
        entries = contents.keys[shard]
        count = load_entries(
            loader,
            entries if router.key_filter is None else router.key_filter.entries(entries),
            router.appender(shard),
            rows=True,
            source=position,
            load_first=shard == first,
            load_last=shard == last,
        )
        report.rdb_keys += count


def _replay_file(
    path: str,
    index: int,
    resume: list[Resume],
    router: Router,
    report: ImportReport,
    progress: Callable[[int], None] | None,
    clock: Clock,
    *,
    last: bool,
) -> None:
    """Replay the file ``path`` (``index`` in the manifest's order): each command or
    MULTI/EXEC block on the shards whose ``resume`` point is before its end. The file is
    read from its start (SELECT must be tracked); a file every shard is past is skipped."""
    if all(point[0] > index for point in resume):
        return
    is_rdb = starts_with_rdb(path)
    name = os.path.basename(path)
    report.files.append(name)
    if is_rdb:
        _load_rdb_base(path, index, resume, router, report, clock)
        size = os.path.getsize(path)
        report.bytes += size
        if progress is not None:
            progress(size)
        return
    commands = AofCommands(path)
    replay = FileReplay(router, resume, index, path, name, progress)
    # Closed here, not left to the garbage collector: compiled by mypyc (docs/build.md), a
    # generator dropped unfinished (a command raised) does not close its file.
    with contextlib.closing(commands.spans()) as spans:
        replay.run(spans)
    report.transactions += replay.transactions
    transaction = replay.transaction
    size = os.path.getsize(path)
    report.bytes += size
    if progress is not None:
        progress(size - replay.done)
    if commands.trailing_bytes or transaction is not None:
        start = replay.transaction_offset if transaction is not None else commands.trailing_offset
        what = (
            f"an unfinished MULTI of {len(transaction)} command(s)"
            if transaction is not None
            else f"an incomplete command of {commands.trailing_bytes} bytes"
        )
        if not last:
            raise AofFormatError(f"{what} before the end of the AOF", path=path, offset=start)
        report.truncated_tail = f"{what} at offset {start} of {path} (not applied, as Redis does)"
    report.position = describe({"aof": name, "offset": commands.trailing_offset})
