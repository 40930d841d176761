"""Importing a Redis 7 append-only file into a sharded moonish data directory, resumably.

``<data_dir>/shard-<k>`` receives the records of the keys whose Redis Cluster hash slot falls in
shard ``k``'s range (``k = slot * shards // 16384``; routing in moonish.redis.router). Replay
follows Redis's loader:

- files in manifest order (base, then incremental files by ``seq``); each file starts in db 0
  and ``SELECT`` switches the db of the records that follow;
- a base file that is an RDB file (``aof-use-rdb-preamble yes``, Redis's default) is loaded
  key by key (moonish.redis.rdb_load): its keys become ``r`` rows, as Debezium's initial
  snapshot; a plain-RESP base file's commands are commands like any other (``c``/``u``/``d``);
- a ``MULTI`` ... ``EXEC`` block becomes one atomic batch per shard it touches;
- a multi-key command (``DEL k1 k2``, ``MSET``, ``RENAME``) becomes one record per key, as one
  atomic batch per shard (see moonish.redis.commands);
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
has applied (moonish.redis.source). Running the import again continues every shard exactly
after its position: each command is applied once, whether the first run finished, failed or was
killed, and a run after Redis appended to the AOF adds only what is new. When the files a
position names are gone (Redis rewrote the AOF), the whole AOF is replayed into a scratch
keyspace and each shard receives only the differences (moonish.state.load). The data directory
remembers the AOF directory it follows; another source is refused.

Everything that can be checked is checked before anything is created
(moonish.redis.import_checks, :func:`check_import`): the manifest and its files, the target
and the open-file limit. An import that fails before writing a record removes what it created.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.hotloop import raised_gc_thresholds
from moonish.log.records import ViewType
from moonish.log.writer import DEFAULT_SEGMENT_BYTES, FsyncPolicy, WriterOptions
from moonish.redis.aof import READ_CHUNK_BYTES, AofCommands, AofFormatError, starts_with_rdb
from moonish.redis.import_checks import check_import
from moonish.redis.import_shards import OpenShards, open_shards, source_shards
from moonish.redis.rdb_load import read_file_contents
from moonish.redis.replay import FileReplay, Resume
from moonish.redis.router import Exchange, Router
from moonish.redis.source import decode_position, describe, encode_position
from moonish.state.config import StreamConfig
from moonish.state.keyspace import Keyspace
from moonish.state.load import load_entries, loader_for, remove_missing, set_libraries
from moonish.state.shard import ShardWriter

WRITE_BUFFER_BYTES: Final = 256 * 1024
"""Each shard's appends are gathered up to this many bytes and written together (each still
with its own frames and source position: a kill cuts the log at an append's end)."""


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
            (moonish.redis.source.describe; ``"none"``: it started from the beginning).
        resynced: the positions named AOF files that are gone (Redis rewrote the AOF): the
            shards received the differences (:func:`import_aof`).
        rdb_keys: keys loaded from an RDB base file (``r`` rows written).
        position: the source position reached (``"none"`` for an empty AOF).
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
            (moonish.redis.parallel); otherwise this process writes every shard.

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
    log = WriterOptions(segment_bytes=segment_bytes, fsync=FsyncPolicy.NEVER,
                        write_buffer_bytes=WRITE_BUFFER_BYTES)  # fmt: skip
    paths = check_import(aof_dir, out_dir, shards)
    location = os.path.realpath(aof_dir)
    stream = stream or StreamConfig()
    with source_shards(out_dir, shards, "aof", location, log, stream, clock) as opened:
        first = all(writer.next_lsn == 1 for writer in opened.writers)
        if processes > 1 and shards > 1 and first and not any(map(_has_sort, paths)):
            from moonish.redis.parallel import run_workers  # it imports this module

            for writer in opened.writers:  # the workers open them again
                writer.close()
            setup = Setup(paths, shards, log, stream, clock, skip_unsupported)
            with raised_gc_thresholds():  # (the workers inherit it)
                return run_workers(setup, out_dir, min(processes, shards), progress)
        with raised_gc_thresholds():
            return replay_aof(paths, opened.writers, clock, skip_unsupported, progress, opened)


_SORT: Final = re.compile(rb"\$4\r\n[sS][oO][rR][tT]\r\n")


def _has_sort(path: str) -> bool:
    """Whether the AOF file ``path`` may hold a ``SORT`` (an argument spelled so counts too),
    which a parallel import cannot run (moonish.redis.parallel). An RDB file holds none."""
    if starts_with_rdb(path):
        return False
    with open(path, "rb") as file:
        tail = b""
        while chunk := file.read(READ_CHUNK_BYTES):
            if _SORT.search(tail + chunk):
                return True
            tail = chunk[-10:]  # a match across two chunks
    return False


@dataclass(frozen=True)
class Setup:
    """What every process of a parallel import needs (moonish.redis.parallel)."""

    paths: list[str]
    shards: int
    log: WriterOptions
    stream: StreamConfig
    clock: Clock
    skip_unsupported: bool


def replay_aof(
    paths: list[str], writers: list[ShardWriter], clock: Clock, skip_unsupported: bool,
    progress: Callable[[int], None] | None, opened: OpenShards | None = None,
    exchange: Exchange | None = None, others: frozenset[int] = frozenset(),
) -> ImportReport:  # fmt: skip
    """Replay the AOF files ``paths`` into ``writers`` (one per shard) from each shard's
    stored position, mark and sweep every shard, and report. ``opened``: where a resync
    (the positions name files that are gone) makes its scratch shards. A parallel import's
    worker (moonish.redis.parallel; new shards, so no resync) passes ``others``, the shards
    other workers write (they run nothing here), and its ``exchange``."""
    report = ImportReport(per_shard=[0] * len(writers))
    router = Router(writers, clock, skip_unsupported, exchange)
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
            _replay_file(path, index, resume, router, report, progress, clock,
                         last=index == len(paths) - 1)  # fmt: skip
    for shard, writer in enumerate(writers):
        if router.position:  # every shard says how far the AOF is applied
            router.mark(shard, router.position)
        router.records[shard] += writer.sweep_expired()  # as Redis does once loaded
        writer.sync()
    report.commands, report.per_command = router.commands, router.per_command
    report.skipped = router.skipped
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
    paths: list[str], opened: OpenShards, router: Router, report: ImportReport,
    progress: Callable[[int], None] | None, clock: Clock,
) -> None:  # fmt: skip
    """The files the shards' positions name are gone: replay the whole AOF into scratch
    shards (a temporary directory in ``out_dir``), then give each shard the differences
    between its keyspace and the scratch one, with the final position."""
    report.resynced = True
    shards = len(opened.writers)
    scratch_dir = tempfile.mkdtemp(prefix=".resync-", dir=opened.data_dir)
    try:
        scratch = open_shards(
            scratch_dir, shards, WriterOptions(fsync=FsyncPolicy.NEVER),
            StreamConfig(view=ViewType.OFF), clock,
        )  # fmt: skip
        try:
            scratch_router = Router(scratch.writers, clock, router.skip_unsupported)
            for index, path in enumerate(paths):
                _replay_file(path, index, [(-1, 0)] * shards, scratch_router, report, progress,
                             clock, last=index == len(paths) - 1)  # fmt: skip
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
    path: str, index: int, resume: list[Resume], router: Router, report: ImportReport,
    clock: Clock,
) -> None:  # fmt: skip
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
    for shard in todo:
        set_libraries(router.writers[shard], contents.functions)
        loader = loader_for(router.writers[shard], b"RDB")
        count = load_entries(loader, contents.keys[shard], router.appender(shard),
                             rows=True, source=position)  # fmt: skip
        report.rdb_keys += count


def _replay_file(
    path: str, index: int, resume: list[Resume], router: Router, report: ImportReport,
    progress: Callable[[int], None] | None, clock: Clock, *, last: bool,
) -> None:  # fmt: skip
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
