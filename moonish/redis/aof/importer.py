"""Importing a Redis 7 append-only file into a sharded moonish data directory, resumably.

``<data_dir>/shard-<k>`` receives the records of the keys whose Redis Cluster hash slot falls in
shard ``k``'s range (``k = slot * shards // 16384``; routing in moonish.redis.routing.router).
Replay follows Redis's loader:

- files in manifest order (base, then incremental files by ``seq``); each file starts in db 0
  and ``SELECT`` switches the db of the records that follow;
- a base file that is an RDB file (``aof-use-rdb-preamble yes``, Redis's default) is loaded
  key by key (moonish.redis.rdb.contents): its keys become ``r`` rows, as Debezium's initial
  snapshot; a plain-RESP base file's commands are commands like any other (``c``/``u``/``d``);
- a ``MULTI`` ... ``EXEC`` block becomes one atomic batch per shard it touches;
- a multi-key command (``DEL k1 k2``, ``MSET``, ``RENAME``) becomes one record per key, as one
  atomic batch per shard (see moonish.redis.routing.commands);
- ``FLUSHDB`` / ``FLUSHALL`` / ``SWAPDB`` and ``FUNCTION`` (function libraries are
  server-wide: every shard keeps them all) go to every shard;
- a command moonish does not implement is an error naming it, the AOF file and its byte
  offset; with ``skip_unsupported`` it is written instead as a ``moonish.skipped`` message
  record holding the command as RESP (as the AOF holds it), in its db, on the shard of its
  first argument (a module command's key, usually; moonish cannot know a module's key specs)
  or on every shard when it has none. Scripts (``EVAL``, ``FCALL``, ...) are always refused:
  Redis 7 never writes them to an AOF;
- an incomplete command or an unfinished ``MULTI`` at the very end of the *last* file is what a
  Redis crash leaves; Redis loads the file without it (``aof-load-truncated yes``) and so do we,
  reporting it in :attr:`ImportReport.truncated_tail`. Anywhere else it is an error.

Resuming (docs/redis-source.md): each shard's log stores, with its records, the AOF position it
has applied (moonish.redis.routing.sources). Running the import again continues every shard
exactly after its position: each command is applied once, whether the first run finished, failed
or was killed, and a run after Redis appended to the AOF adds only what is new. When the files a
position names are gone (Redis rewrote the AOF), the whole AOF is replayed into a scratch
keyspace and each shard receives only the differences (moonish.state.load). The data directory
remembers the AOF directory it follows; another source is refused.

Everything that can be checked is checked before anything is created
(:func:`~moonish.redis.aof.checks.check_import`, moonish.redis.routing.target): the manifest and
its files, the target and the open-file limit. An import that fails before writing a record
removes what it created.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from typing import Final

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.gcpolicy import raised_gc_thresholds
from moonish.log.writer import DEFAULT_SEGMENT_BYTES, FsyncPolicy, WriterOptions
from moonish.redis.aof.checks import check_import
from moonish.redis.aof.files import READ_CHUNK_BYTES, starts_with_rdb
from moonish.redis.aof.parallel import run_workers
from moonish.redis.aof.replay import ImportReport, Setup, replay_aof
from moonish.redis.routing.keyfilter import NO_FILTER, FilterSpec
from moonish.redis.routing.shards import source_shards
from moonish.state.autosnapshot import SnapshotPolicy
from moonish.state.config import StreamConfig

WRITE_BUFFER_BYTES: Final = 256 * 1024
"""Each shard's appends are gathered up to this many bytes and written together (each still
with its own frames and source position: a kill cuts the log at an append's end)."""


def import_aof(
    appendonlydir: str | os.PathLike[str],
    data_dir: str | os.PathLike[str],
    shards: int,
    *,
    progress: Callable[[int], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
    stream: StreamConfig | None = None,
    segment_bytes: int = DEFAULT_SEGMENT_BYTES,
    skip_unsupported: bool = False,
    processes: int = 1,
    snapshots: SnapshotPolicy | None = None,
    on_recovery: Callable[[str, int, int], None] | None = None,
    key_filter: FilterSpec = NO_FILTER,
    retention: Mapping[str, int] | None = None,
) -> ImportReport:
    """Replay a Redis 7 multi-part AOF into ``shards`` moonish shards under ``data_dir``,
    continuing each shard after the position its log stores (see the module docstring).

    Nothing is created unless every check of :func:`check_import` passes. A soft open-file
    limit (``RLIMIT_NOFILE``) below :func:`descriptors_needed` is raised for this process (up
    to what is needed; it stays raised).

    Args:
        appendonlydir: Redis's ``appendonlydir`` (holding the manifest).
        data_dir: the moonish data directory; ``shard-<k>`` directories are created in it.
        shards: number of shards, 1..16384; must match an existing data directory.
        progress: called with the number of AOF bytes consumed since the previous call.
        clock: the commands' time (expiry) and the records' commit time.
        stream: the stream configuration of shards the import creates (existing shards
            keep theirs); default NEW_AND_OLD_IMAGES.
        segment_bytes: the writers rotate to a new segment before one would grow past this
            many bytes (``WriterOptions.segment_bytes``; also when appending to existing
            shards).
        skip_unsupported: write each command moonish does not implement as a
            ``moonish.skipped`` message record (module docstring) instead of failing;
            :attr:`ImportReport.skipped` counts them.
        processes: with more than 1, and shards that hold no record yet (a first import),
            up to this many processes import at once, each writing its share of the shards
            (moonish.redis.aof.parallel); otherwise this process writes every shard.
        snapshots: when the shards' writers take snapshots on their own
            (moonish.state.autosnapshot); ``None``: the default policy.
        on_recovery: called with (the shard directory, the LSN rebuilt up to, the last LSN)
            while existing shards' writers rebuild their keyspaces as they open (after the
            snapshot, then every batch of records replayed); what it raises stops the import
            before anything is written.
        key_filter: the source filter (moonish.redis.routing.keyfilter): keys it leaves out
            never reach the keyspace or the log; must be the data directory's
            (``filter.json``), which a first import stores.
        retention: rules of every shard's retention policy to set as the writers open
            (``RetentionPolicy`` field names: ``max_bytes``, ``max_age_ms``, ...; the others
            keep their stored values).

    Returns:
        An :class:`ImportReport`.

    Raises:
        InvalidArgumentError: anything :func:`check_import` refuses (a missing manifest or
            AOF file, a data directory that is a file, a shard directory or the AOF
            directory, a shard count that differs from the existing data directory, too low
            an open-file limit), ``segment_bytes`` the writer refuses (checked first), or a
            bad SELECT.
        SourceMismatchError: the data directory follows another source, or holds shards
            written without positions.
        FilterMismatchError: ``key_filter`` is not the data directory's.
        FilterConflictError: a command would compute a key the filter keeps from one it
            leaves out (path and offset named).
        ResumeError: a command across shards is in some shards' logs only (an import
            stopped between its appends).
        RdbCorruptionError, RdbUnsupportedError: a damaged or unsupported RDB base file
            (nothing of it was written).
        AofFormatError: bytes that are not RESP commands, or truncation before the last file's
            end (path and byte offset in the error).
        UnsupportedFormatError: an incremental file that is an RDB file, or a command
            moonish does not implement (without ``skip_unsupported``; a script command
            always), named with the file and its byte offset.
        CommandError: a command Redis would have refused (path and offset in the error).
        WriterLockedError: another writer holds one of the shards.
        UnavailableError: a shard could not be opened (too many open files, permissions; the
            path in the error). The writers opened were closed and the shard directories the
            import created removed.
    """
    aof_dir, out_dir = os.fspath(appendonlydir), os.fspath(data_dir)
    log = WriterOptions(
        segment_bytes=segment_bytes, fsync=FsyncPolicy.NEVER, write_buffer_bytes=WRITE_BUFFER_BYTES
    )
    paths = check_import(aof_dir, out_dir, shards)
    location = os.path.realpath(aof_dir)
    stream = stream or StreamConfig()
    with source_shards(
        out_dir,
        shards,
        "aof",
        location,
        log,
        stream,
        clock,
        snapshots,
        on_recovery,
        key_filter=key_filter,
        retention=retention,
    ) as opened:
        first = all(writer.next_lsn == 1 for writer in opened.writers)
        filter_file = opened.filter
        assert filter_file is not None
        if (
            processes > 1
            and shards > 1
            and first
            and key_filter.types is None
            and not any(map(_has_sort, paths))
        ):
            for writer in opened.writers:  # the workers open them again
                writer.close()
            setup = Setup(
                paths, shards, log, stream, clock, skip_unsupported, snapshots, key_filter
            )
            with raised_gc_thresholds():  # (the workers inherit it)
                report = run_workers(setup, out_dir, min(processes, shards), progress)
        else:
            with raised_gc_thresholds():
                report = replay_aof(
                    paths,
                    opened.writers,
                    clock,
                    skip_unsupported,
                    progress,
                    opened,
                    key_filter=filter_file.key_filter,
                )
        filter_file.save(report.filtered)
        return report


_SORT: Final = re.compile(rb"\$4\r\n[sS][oO][rR][tT]\r\n")


def _has_sort(path: str) -> bool:
    """Whether the AOF file ``path`` may hold a ``SORT`` (an argument spelled so counts too),
    which a parallel import cannot run (moonish.redis.aof.parallel). An RDB file holds none."""
    if starts_with_rdb(path):
        return False
    with open(path, "rb") as file:
        tail = b""
        while chunk := file.read(READ_CHUNK_BYTES):
            if _SORT.search(tail + chunk):
                return True
            tail = chunk[-10:]  # a match across two chunks
    return False
