"""Importing a Redis 7 append-only file into a sharded moonish data directory.

``<data_dir>/shard-<k>`` receives the records of the keys whose Redis Cluster hash slot falls in
shard ``k``'s range (``k = slot * shards // 16384``). Replay follows Redis's loader:

- files in manifest order (base, then incremental files by ``seq``); each file starts in db 0
  and ``SELECT`` switches the db of the records that follow;
- a ``MULTI`` ... ``EXEC`` block becomes one atomic batch per shard it touches;
- a multi-key command (``DEL k1 k2``, ``MSET``, ``RENAME``) becomes one record per key, as one
  atomic batch per shard (see moonish.redis.commands);
- ``FLUSHDB`` / ``FLUSHALL`` / ``SWAPDB`` and ``FUNCTION`` (function libraries are
  server-wide: every shard keeps them all) go to every shard;
- a command moonish does not implement is an error naming it, the AOF file and its byte
  offset; with ``skip_unsupported`` it is written instead as a message record with prefix
  :data:`SKIPPED_PREFIX` whose content is the command as RESP (as the AOF holds it), in its
  db, on the shard of its first argument (a module command's key, usually; moonish cannot
  know a module's key specs) or on every shard when it has none. Scripts (``EVAL``,
  ``FCALL``, ...) are always refused: Redis 7 never writes them to an AOF;
- an incomplete command or an unfinished ``MULTI`` at the very end of the *last* file is what a
  Redis crash leaves; Redis loads the file without it (``aof-load-truncated yes``) and so do we,
  reporting it in :attr:`ImportReport.truncated_tail`. Anywhere else it is an error.

Running an import again appends to the existing shards; their LSNs continue.

Everything that can be checked is checked before anything is created
(moonish.redis.import_checks, :func:`check_import`): the manifest and its files, the target
and the open-file limit. If opening the shards still fails, the writers opened are closed and
the shard directories this import created are removed again.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import (
    CommandError,
    MoonishError,
    UnavailableError,
    UnsupportedFormatError,
)
from moonish.log.control import CONTROL_NAME
from moonish.log.format import (
    LOCK_NAME,
    SEGMENT_HEADER_BYTES,
)
from moonish.log.heartbeat import HEARTBEAT_NAME
from moonish.log.lock import lock_shard
from moonish.log.records import MAX_DB, KvChange, Message, Replay
from moonish.log.segment import index_path, segment_path
from moonish.log.writer import DEFAULT_SEGMENT_BYTES, FsyncPolicy, WriterOptions
from moonish.redis.aof import AofCommands, AofFormatError, resp_command
from moonish.redis.commands import ALL_KEYS, KEYLESS
from moonish.redis.import_checks import check_descriptors, check_import
from moonish.redis.slots import shard_of_key
from moonish.state.cmd_sort import reads_patterns
from moonish.state.config import CONFIG_NAME, StreamConfig
from moonish.state.execute import SCRIPTS, execute, keys_of
from moonish.state.shard import Prepared, ShardOptions, ShardWriter


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


SKIPPED_PREFIX = "moonish.skipped"
"""The prefix of the message records of commands an import skipped (``skip_unsupported``)."""

Entry = tuple[int, list[bytes], int]
"""A command of the AOF: (db, argv, byte offset in its file)."""


class _Router:
    """Runs replayed commands on the shards' keyspaces and appends their records."""

    def __init__(
        self, writers: list[ShardWriter], report: ImportReport, clock: Clock, skip: bool
    ) -> None:
        self.writers = writers
        self.report = report
        self.clock = clock
        self.skip = skip
        self.first_lsn: list[int | None] = [None] * len(writers)

    def apply(self, entries: list[Entry], transaction: bool, path: str) -> None:
        """Run ``entries`` and append their records: per shard one atomic batch when they
        come from MULTI/EXEC or make more than one record, else a plain append.

        Raises:
            CommandError: Redis would have refused a command (so it cannot be in a valid AOF).
            UnsupportedFormatError: a command moonish does not implement (and may not skip).
            Both name ``path`` and the command's offset.
        """
        now_us = self.clock.now_us()
        per_shard: list[list[KvChange | Message]] = [[] for _ in self.writers]
        for db, argv, offset in entries:
            try:  # an unsupported command raises before any shard ran it
                results = self._run(db, argv, now_us)
            except UnsupportedFormatError as exc:
                script = argv[0].upper() in SCRIPTS
                if script or not self.skip:
                    hint = "" if script else (
                        "; --skip-unsupported (skip_unsupported=True) writes it as a "
                        f"{SKIPPED_PREFIX} message record instead"
                    )  # fmt: skip
                    raise UnsupportedFormatError(
                        exc.message + hint, path=path, offset=offset
                    ) from None
                self._skip(db, argv, per_shard)
                continue
            except CommandError as exc:
                raise CommandError(exc.message, path=path, offset=offset) from None
            name = argv[0].upper().decode(errors="replace")
            self.report.commands += 1
            self.report.per_command[name] += 1
            for shard, prepared in results:
                if isinstance(prepared.reply, CommandError):
                    raise CommandError(prepared.reply.message, path=path, offset=offset)
                self._append(shard, prepared.expired, False, now_us)
                per_shard[shard] += prepared.records
        for shard, records in enumerate(per_shard):
            self._append(shard, records, transaction or len(records) > 1, now_us)

    def _skip(self, db: int, argv: list[bytes], per_shard: list[list[KvChange | Message]]) -> None:
        """Queue the ``moonish.skipped`` record of ``argv`` on the shard of its first argument
        (every shard when it has none, or is a keyless command's: FUNCTION KILL)."""
        message = Message(SKIPPED_PREFIX, resp_command(argv), db)
        count = len(self.writers)
        keyed = len(argv) > 1 and argv[0].upper() not in KEYLESS
        for shard in [shard_of_key(argv[1], count)] if keyed else range(count):
            per_shard[shard].append(message)
        self.report.skipped[argv[0].upper().decode(errors="replace")] += 1

    def _append(
        self, shard: int, records: Sequence[KvChange | Message], atomic: bool, now_us: int
    ) -> None:
        lsns = self.writers[shard].append(records, atomic, now_us)
        if lsns and self.first_lsn[shard] is None:
            self.first_lsn[shard] = lsns[0]
        self.report.per_shard[shard] += len(lsns)
        self.report.records += len(lsns)

    def _run(self, db: int, argv: list[bytes], now_us: int) -> list[tuple[int, Prepared]]:
        shards = len(self.writers)
        name = argv[0].upper()
        if name in KEYLESS:
            parts = [(shard, argv) for shard in range(shards)]
        else:
            groups: dict[int, list[bytes]] = {}
            for key in keys_of(argv):
                groups.setdefault(shard_of_key(key, shards), []).append(key)
            if name == b"SORT" and shards > 1 and reads_patterns(argv):
                return self._across(db, argv, now_us, sorted(groups))  # BY/GET keys: anywhere
            if len(groups) <= 1:
                parts = [(next(iter(groups), 0), argv)]
            elif name in ALL_KEYS:
                parts = [(shard, [argv[0], *keys]) for shard, keys in groups.items()]
            elif name == b"MSET":
                pairs = dict(zip(argv[1::2], argv[2::2], strict=True))
                parts = [
                    (shard, [argv[0], *[x for key in keys for x in (key, pairs[key])]])
                    for shard, keys in groups.items()
                ]
            else:
                return self._across(db, argv, now_us, sorted(groups))
        return [
            (shard, self.writers[shard].prepare(db, sub, now_us, loading=True))
            for shard, sub in parts
        ]

    def _across(
        self, db: int, argv: list[bytes], now_us: int, shards: list[int]
    ) -> list[tuple[int, Prepared]]:
        """A command whose keys live in several shards (RENAME, COPY, SMOVE, LMOVE, MSETNX
        across shards): run once on all their keyspaces; each shard logs its keys' new
        values (``Replay.STATE``), since no shard can replay the command alone."""
        count = len(self.writers)
        writers = self.writers

        def route(key: bytes) -> int:
            return shard_of_key(key, count)

        acc = writers[shards[0]].access(
            now_us // 1000, lambda key: writers[route(key)].keyspace, loading=True
        )
        acc.keyspaces = [writer.keyspace for writer in writers]
        try:
            reply = execute(acc, db, argv)
        except CommandError as exc:
            reply = exc
        results = []
        for shard in shards:
            writer = writers[shard]
            expired = [
                writer.expiry_record(key_db, key, entry)
                for key_db, key, entry in acc.expired
                if route(key) == shard
            ]
            records: list[KvChange | Message] = []
            records += writer.records(acc, argv, Replay.STATE, owns=_owned_by(route, shard))
            results.append((shard, Prepared(reply, expired, records)))
        return results


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
) -> ImportReport:
    """Replay a Redis 7 multi-part AOF into ``shards`` moonish shards under ``data_dir``.

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

    Returns:
        An :class:`ImportReport`.

    Raises:
        InvalidArgumentError: anything :func:`check_import` refuses (a missing manifest or
            AOF file, a data directory that is a file, a shard directory or the AOF
            directory, a shard count that differs from the existing data directory, too low
            an open-file limit), ``segment_bytes`` the writer refuses (checked first), or a
            bad SELECT.
        AofFormatError: bytes that are not RESP commands, or truncation before the last file's
            end (path and byte offset in the error).
        UnsupportedFormatError: an RDB-preamble AOF file, or a command moonish does not
            implement (without ``skip_unsupported``; a script command always), named with
            the file and its byte offset.
        CommandError: a command Redis would have refused (path and offset in the error).
        WriterLockedError: another writer holds one of the shards.
        UnavailableError: a shard could not be opened (too many open files, permissions; the
            path in the error). The writers opened were closed and the shard directories the
            import created removed.
    """
    aof_dir, out_dir = os.fspath(appendonlydir), os.fspath(data_dir)
    log = WriterOptions(segment_bytes=segment_bytes, fsync=FsyncPolicy.NEVER)
    paths = check_import(aof_dir, out_dir, shards)
    check_descriptors(shards, raise_soft=True)
    report = ImportReport(per_shard=[0] * shards)
    writers = _open_writers(out_dir, shards, log, stream or StreamConfig(), clock)
    try:
        router = _Router(writers, report, clock, skip_unsupported)
        for number, path in enumerate(paths):
            _replay_file(path, router, report, progress, last=number == len(paths) - 1)
            report.files.append(os.path.basename(path))
        for shard, writer in enumerate(writers):  # as Redis does once loaded: expire keys
            expired = writer.sweep_expired()
            report.per_shard[shard] += expired
            report.records += expired
            writer.sync()
    finally:
        for writer in writers:
            writer.close()
    report.lsn_ranges = [
        None if first is None else (first, writer.next_lsn - 1)
        for first, writer in zip(router.first_lsn, writers, strict=True)
    ]
    return report


def _open_writers(
    out_dir: str, shards: int, log: WriterOptions, stream: StreamConfig, clock: Clock
) -> list[ShardWriter]:
    """A writer per shard, with ``log``'s options and its shard id. If one cannot be opened,
    the others are closed, the directories this call created are removed again
    (:func:`_remove_created`) and the error is raised, an ``OSError`` as
    :class:`UnavailableError`."""
    created = []  # directories this call creates: the data directory and missing parents
    missing = os.path.abspath(out_dir)
    while not os.path.lexists(missing):
        created.append(missing)
        missing = os.path.dirname(missing)
    shard_dirs = [os.path.join(out_dir, f"shard-{shard}") for shard in range(shards)]
    new = {path for path in shard_dirs if not os.path.lexists(path)}
    writers: list[ShardWriter] = []
    try:
        for shard, shard_dir in enumerate(shard_dirs):
            options = ShardOptions(replace(log, shard_id=shard), stream, expiry_sweep_ms=0)
            try:
                writers.append(ShardWriter(shard_dir, options, clock))
            except OSError as exc:
                raise _open_error(exc, shard, shards, shard_dir) from exc
    except BaseException:
        for writer in writers:
            writer.close()
        tried = shard_dirs[: len(writers) + 1]
        _remove_created([path for path in tried if path in new], created)
        raise
    return writers


def _open_error(exc: OSError, shard: int, shards: int, shard_dir: str) -> UnavailableError:
    path = exc.filename if isinstance(exc.filename, str) else shard_dir
    reason = exc.strerror or str(exc)
    if exc.errno in (errno.EMFILE, errno.ENFILE):
        return UnavailableError(
            f"cannot open shard {shard} of {shards}: {reason}; nothing was imported (raise "
            "the open-file limit, ulimit -n, or import into fewer shards)",
            path=path,
        )
    return UnavailableError(
        f"cannot open shard {shard} of {shards}: {reason}; nothing was imported", path=path
    )


def _remove_created(shard_dirs: list[str], created: list[str]) -> None:
    """Best effort: remove ``shard_dirs`` (created by this import) when they hold nothing but
    what opening a new shard writes, under the shard's lock, then the directories in
    ``created`` (deepest first) that are empty."""
    for shard_dir in reversed(shard_dirs):
        try:
            lock_fd = lock_shard(shard_dir)
        except (MoonishError, OSError):
            lock_fd = -1  # gone, never made, or another writer has it: leave it alone
        if lock_fd >= 0:
            try:
                names = os.listdir(shard_dir)
                if all(_fresh(shard_dir, name) for name in names):
                    for name in sorted(names, key=lambda name: name == LOCK_NAME):
                        os.unlink(os.path.join(shard_dir, name))
            except OSError:
                pass
            finally:
                os.close(lock_fd)
        _rmdir(shard_dir)
    for directory in created:
        _rmdir(directory)


def _fresh(shard_dir: str, name: str) -> bool:
    """Whether ``name`` in ``shard_dir`` is a file a new, empty shard holds."""
    if name in (LOCK_NAME, CONTROL_NAME, CONFIG_NAME, HEARTBEAT_NAME) or name.endswith(".tmp"):
        return True
    try:
        if name == os.path.basename(segment_path(shard_dir, 1)):
            return os.path.getsize(os.path.join(shard_dir, name)) <= SEGMENT_HEADER_BYTES
        if name == os.path.basename(index_path(shard_dir, 1)):
            return os.path.getsize(os.path.join(shard_dir, name)) == 0
    except OSError:
        return False
    return False


def _rmdir(path: str) -> None:
    with contextlib.suppress(OSError):  # not empty (someone else's files), or already gone
        os.rmdir(path)


def _replay_file(
    path: str,
    router: _Router,
    report: ImportReport,
    progress: Callable[[int], None] | None,
    *,
    last: bool,
) -> None:
    commands = AofCommands(path)
    db = 0
    transaction: list[Entry] | None = None
    transaction_offset = 0
    done = 0
    for offset, argv in commands:
        if progress is not None and offset - done >= 1 << 16:
            progress(offset - done)
            done = offset
        name = argv[0].upper()
        if name == b"SELECT":
            db = _select(argv, path, offset)
        elif name == b"MULTI":
            if transaction is not None:
                raise AofFormatError("MULTI inside MULTI", path=path, offset=offset)
            transaction, transaction_offset = [], offset
        elif name == b"EXEC":
            if transaction is None:
                raise AofFormatError("EXEC without MULTI", path=path, offset=offset)
            router.apply(transaction, True, path)
            report.transactions += 1
            transaction = None
        elif transaction is not None:
            transaction.append((db, argv, offset))
        else:
            router.apply([(db, argv, offset)], False, path)
    size = os.path.getsize(path)
    report.bytes += size
    if progress is not None:
        progress(size - done)
    if commands.trailing_bytes or transaction is not None:
        start = transaction_offset if transaction is not None else commands.trailing_offset
        what = (
            f"an unfinished MULTI of {len(transaction)} command(s)"
            if transaction is not None
            else f"an incomplete command of {commands.trailing_bytes} bytes"
        )
        if not last:
            raise AofFormatError(f"{what} before the end of the AOF", path=path, offset=start)
        report.truncated_tail = f"{what} at offset {start} of {path} (not applied, as Redis does)"


def _owned_by(route: Callable[[bytes], int], shard: int) -> Callable[[bytes], bool]:
    return lambda key: route(key) == shard


def _select(argv: list[bytes], path: str, offset: int) -> int:
    try:
        db = int(argv[1])
    except (IndexError, ValueError):
        db = -1
    if not 0 <= db <= MAX_DB:
        raise AofFormatError(f"bad SELECT {argv[1:]!r}", path=path, offset=offset)
    return db
