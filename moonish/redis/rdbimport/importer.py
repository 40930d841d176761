"""``moonish wal import-rdb``: a Redis RDB snapshot seeds a sharded data directory.

Each key of the RDB file goes to the shard of its hash slot as an ``r`` row (Debezium's
snapshot read: ``op: "r"``, ``source.snapshot`` ``first``/``true``/``last``), replayed as the
key's lossless image; reading a shard from LSN 1 yields its whole keyspace. Keys are loaded as
a master loads a snapshot (moonish.redis.rdb.contents): expired keys and empty containers are
left out, and the whole file (its CRC-64 included) is read before anything is written.

Resuming and reloading (docs/redis-source.md): each shard's log stores the identity of the RDB
file it loaded (size and stored CRC-64; moonish.redis.routing.sources) on its last row. Running
the import again with the same file writes nothing; a load cut short writes the keys it had not
written (a key already equal is never written twice); a newer dump at the same path is loaded as
differences: ``c``/``u`` for keys that are new or changed, ``d`` for keys that are gone.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError
from moonish.log.records import KvChange
from moonish.log.writer import DEFAULT_SEGMENT_BYTES, FsyncPolicy, WriterOptions
from moonish.redis.rdb.contents import RdbContents, rdb_identity, read_file_contents
from moonish.redis.rdbimport.parallel import LoadSetup, load_in_processes
from moonish.redis.routing.keyfilter import NO_FILTER, FilterSpec, filtered_counts
from moonish.redis.routing.shards import source_shards
from moonish.redis.routing.sources import check_source, decode_position, describe, encode_position
from moonish.redis.routing.target import check_target
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.config import StreamConfig
from moonish.state.load import (
    load_entries,
    load_order,
    loader_for,
    remove_missing,
    set_libraries,
)
from moonish.state.shard import ShardWriter
from moonish.state.spread import RowOrder


@dataclass
class RdbImportReport:
    """What an RDB import did.

    Attributes:
        rdb: the file's identity (``<size>-<crc64>``).
        version: its RDB version.
        keys_loaded, keys_expired, empty_keys_skipped: as Redis's loader counts them.
        records: records appended over all shards.
        per_shard: records appended to each shard.
        ops: records by op (``r``, ``c``, ``u``, ``d``).
        resumed_from: per shard, its source position before this run (``"none"``).
    """

    rdb: str = ""
    version: int = 0
    keys_loaded: int = 0
    keys_expired: int = 0
    empty_keys_skipped: int = 0
    records: int = 0
    per_shard: list[int] = field(default_factory=list)
    ops: dict[str, int] = field(default_factory=dict)
    resumed_from: list[str] = field(default_factory=list)
    filtered: Counter[str] = field(default_factory=Counter)


def import_rdb(
    rdb_path: str | os.PathLike[str],
    data_dir: str | os.PathLike[str],
    shards: int,
    *,
    clock: Clock = SYSTEM_CLOCK,
    stream: StreamConfig | None = None,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    progress: Callable[[int], None] | None = None,
    processes: int = 1,
    snapshots: SnapshotPolicy | None = None,
    on_recovery: Callable[[str, int, int], None] | None = None,
    key_filter: FilterSpec = NO_FILTER,
    retention: Mapping[str, int] | None = None,
) -> RdbImportReport:
    """Load the RDB file ``rdb_path`` into ``shards`` shards under ``data_dir`` (see the
    module docstring).

    Args:
        rdb_path: a Redis RDB file (versions 9 to 12: Redis 6.2 to 7.4; Valkey 9's 80).
        data_dir: the moonish data directory (created if missing).
        shards: number of shards, 1..16384; must match an existing data directory.
        clock: expiry judgement and the records' commit time.
        stream: the stream configuration of shards the import creates.
        segment_bytes: the writers' segment size.
        progress: called with the number of records appended since the previous call.
        processes: with more than 1 (and more than 1 shard), the shards are loaded by up to
            this many forked processes, each its share, once the file is read
            (moonish.redis.rdbimport.parallel); the logs are the same as with one.
        snapshots: when the shards' writers take snapshots on their own
            (moonish.state.autosnapshot); ``None``: the default policy.
        on_recovery: as for ``import_aof``: progress of existing shards' rebuilds.
        key_filter: the source filter (moonish.redis.routing.keyfilter): keys it leaves out
            are not loaded (counted in ``filtered`` as ``keys:<rule>``); must be the data
            directory's (``filter.json``), which a first import stores.
        retention: rules of every shard's retention policy to set as the writers open
            (``RetentionPolicy`` field names: ``max_bytes``, ``max_age_ms``, ...; the others
            keep their stored values).

    Returns:
        An :class:`RdbImportReport`.

    Raises:
        InvalidArgumentError: a missing or unreadable file, a bad target or shard count
            (as ``wal import-aof``).
        SourceMismatchError: the data directory follows another source.
        FilterMismatchError: ``key_filter`` is not the data directory's.
        RdbCorruptionError, RdbUnsupportedError: a damaged file (a bad CRC-64, truncation),
            module values, an unknown type (file, byte offset and key in the error); nothing
            was written.
        WriterLockedError, UnavailableError: a shard cannot be opened, or a worker died.
    """
    if processes < 1:
        raise InvalidArgumentError(f"processes must be at least 1, got {processes}")
    path, out_dir = os.fspath(rdb_path), os.fspath(data_dir)
    if not os.path.isfile(path):
        raise InvalidArgumentError("the RDB file does not exist or is not a file", path=path)
    check_target(out_dir, shards, source=path)
    location = os.path.realpath(path)
    check_source(out_dir, "rdb", location)  # before reading the file; source_shards again
    identity = rdb_identity(path)
    contents = read_file_contents(
        path, shards, now_ms=clock.now_us() // 1000, drop_expired=True
    )  # all of it, before anything is created
    report = RdbImportReport(
        identity,
        contents.version,
        contents.keys_loaded,
        contents.keys_expired,
        contents.empty_keys_skipped,
        per_shard=[0] * shards,
    )
    log = WriterOptions(segment_bytes=segment_bytes, fsync=FsyncPolicy.NEVER)
    new_stream = stream or StreamConfig()
    with source_shards(
        out_dir,
        shards,
        "rdb",
        location,
        log,
        new_stream,
        clock,
        snapshots,
        on_recovery,
        key_filter=key_filter,
        retention=retention,
    ) as opened:
        filter_file = opened.filter
        assert filter_file is not None
        if key_filter.active:
            kept = filter_file.key_filter
            contents.keys = [list(kept.entries(keys)) for keys in contents.keys]
            report.filtered = filtered_counts(kept)
        position = encode_position({"rdb": identity})
        report.resumed_from = [describe(decode_position(w.source)) for w in opened.writers]

        processes = min(processes, shards)
        # One process loads the shards in order: it knows which hold the whole load's first
        # and last rows (moonish.state.load.load_order); several interleave, and agree on
        # them as they go (moonish.state.spread).
        rows = tuple(bool(contents.keys[k]) and not w.source for k, w in enumerate(opened.writers))
        first: int | None = None
        last: int | None = None
        if processes == 1:
            first, last = load_order(list(rows))

        def load(
            writer: ShardWriter,
            shard: int,
            heard: Callable[[int], None] | None,
            order: RowOrder | None = None,
        ) -> Done:
            marks = (shard == first, shard == last)
            return _load_shard(
                writer, shard, contents, position, identity, clock, heard, marks, order
            )

        if processes > 1:
            for writer in opened.writers:  # the workers open them again
                writer.close()
            setup = LoadSetup(
                out_dir, shards, log, stream or StreamConfig(), clock, contents, snapshots, rows
            )
            done = load_in_processes(setup, processes, load, progress)
        else:
            done = [load(writer, shard, progress) for shard, writer in enumerate(opened.writers)]
            for writer in opened.writers:
                writer.sync()
        filter_file.save(report.filtered)
    for shard, each in enumerate(done):
        report.per_shard[shard] = each["records"]
        report.records += each["records"]
        for op, count in each["ops"].items():
            report.ops[op] = report.ops.get(op, 0) + count
    return report


Done = dict[str, Any]
"""What loading a shard did: ``{"records": n, "ops": {op: n}}``."""


def _load_shard(
    writer: ShardWriter,
    shard: int,
    contents: RdbContents,
    position: bytes,
    identity: str,
    clock: Clock,
    progress: Callable[[int], None] | None,
    marks: tuple[bool, bool] = (False, False),
    order: RowOrder | None = None,
) -> Done:
    """Load one shard's keys: ``r`` rows when it has loaded no RDB yet (or was cut short
    loading this one), differences when it holds another RDB's keys; nothing when it holds
    this one. ``marks``: its rows hold the whole load's first row, its last row; ``order``:
    several processes write the load, and agree on those rows as they go."""
    done: Done = {"records": 0, "ops": {}}
    stored = decode_position(writer.source, writer.shard_dir)
    if stored.get("rdb") == identity:
        return done
    rows = not stored  # never finished a load: the first (or a resumed) snapshot
    set_libraries(writer, contents.functions)  # before the keys: the position goes last
    loader = loader_for(writer, b"RDB")
    ops: dict[str, int] = done["ops"]

    def append(records: list[KvChange], source: bytes, at_least_us: int) -> int:
        writer.append(records, False, max(clock.now_us(), at_least_us), source)
        done["records"] += len(records)
        for record in records:
            ops[record.op] = ops.get(record.op, 0) + 1
        if progress is not None:
            progress(len(records))
        return writer.last_commit_us

    keys = contents.keys[shard]
    if not rows:  # deletions first: the position rides on the last record of the load
        present = {(db, key) for db, key, _ in keys}
        remove_missing(loader, lambda db, key: (db, key) in present, append)
    load_first, load_last = marks
    load_entries(
        loader,
        keys,
        append,
        rows=rows,
        source=position,
        load_first=load_first,
        load_last=load_last,
        order=order,
    )
    return done
