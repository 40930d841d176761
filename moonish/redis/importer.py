"""Importing a Redis 7 append-only file into a sharded moonish data directory.

``<data_dir>/shard-<k>`` receives the records of the keys whose Redis Cluster hash slot falls in
shard ``k``'s range (``k = slot * shards // 16384``). Replay follows Redis's loader:

- files in manifest order (base, then incremental files by ``seq``); each file starts in db 0
  and ``SELECT`` switches the db of the records that follow;
- a ``MULTI`` ... ``EXEC`` block becomes one atomic batch per shard it touches;
- a multi-key command (``DEL k1 k2``, ``MSET``, ``RENAME``) becomes one record per key, as one
  atomic batch per shard (see moonish.redis.commands);
- ``FLUSHDB`` / ``FLUSHALL`` go to every shard;
- an incomplete command or an unfinished ``MULTI`` at the very end of the *last* file is what a
  Redis crash leaves; Redis loads the file without it (``aof-load-truncated yes``) and so do we,
  reporting it in :attr:`ImportReport.truncated_tail`. Anywhere else it is an error.

Running an import again appends to the existing shards; their LSNs continue.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import InvalidArgumentError
from moonish.log.records import MAX_DB, KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.redis.aof import AofCommands, AofFormatError, read_manifest
from moonish.redis.commands import split_command
from moonish.redis.slots import SLOT_COUNT, shard_of_key

MAX_SHARDS = SLOT_COUNT
"""Every shard owns at least one hash slot."""


@dataclass
class ImportReport:
    """What an import did.

    Attributes:
        files: the AOF files replayed, in order.
        bytes: bytes of AOF read.
        commands: Redis write commands replayed (not counting SELECT, MULTI, EXEC).
        per_command: commands by name (upper case).
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
    transactions: int = 0
    records: int = 0
    per_shard: list[int] = field(default_factory=list)
    lsn_ranges: list[tuple[int, int] | None] = field(default_factory=list)
    truncated_tail: str | None = None


def _check_shard_count(data_dir: str, shards: int) -> None:
    if not 1 <= shards <= MAX_SHARDS:
        raise InvalidArgumentError(f"--shards must be between 1 and {MAX_SHARDS}, got {shards}")
    if os.path.isdir(data_dir):
        existing = [name for name in os.listdir(data_dir) if name.startswith("shard-")]
        if existing and len(existing) != shards:
            raise InvalidArgumentError(
                f"the data directory has {len(existing)} shards; importing with {shards} would "
                "route keys to different shards",
                path=data_dir,
            )


class _Router:
    """Turns replayed commands into per-shard records and appends them."""

    def __init__(self, writers: list[WalWriter], report: ImportReport) -> None:
        self.writers = writers
        self.report = report
        self.first_lsn: list[int | None] = [None] * len(writers)

    def apply(self, entries: list[tuple[int, list[bytes]]], transaction: bool) -> None:
        """Route ``entries`` (db, argv) to shards. They form an atomic batch per shard when
        they come from MULTI/EXEC or make more than one record; otherwise a plain append."""
        shards = len(self.writers)
        per_shard: list[list[KvCommand]] = [[] for _ in range(shards)]
        for db, argv in entries:
            for key, record_argv, key_pos in split_command(argv):
                record = KvCommand(db, record_argv, key_pos)
                if key is None:
                    for records in per_shard:
                        records.append(record)
                else:
                    per_shard[shard_of_key(key, shards)].append(record)
        atomic = transaction or sum(map(len, per_shard)) > 1
        for shard, records in enumerate(per_shard):
            if not records:
                continue
            writer = self.writers[shard]
            lsns = writer.append_batch(records) if atomic else [writer.append(records[0])]
            if self.first_lsn[shard] is None:
                self.first_lsn[shard] = lsns[0]
            self.report.per_shard[shard] += len(records)
            self.report.records += len(records)


def import_aof(
    appendonlydir: str | os.PathLike[str],
    data_dir: str | os.PathLike[str],
    shards: int,
    *,
    progress: Callable[[int], None] | None = None,
    clock: Clock = SYSTEM_CLOCK,
) -> ImportReport:
    """Replay a Redis 7 multi-part AOF into ``shards`` moonish shards under ``data_dir``.

    Args:
        appendonlydir: Redis's ``appendonlydir`` (holding the manifest).
        data_dir: the moonish data directory; ``shard-<k>`` directories are created in it.
        shards: number of shards, 1..16384; must match an existing data directory.
        progress: called with the number of AOF bytes consumed since the previous call.
        clock: commit timestamps of the appended records.

    Returns:
        An :class:`ImportReport`.

    Raises:
        InvalidArgumentError: missing manifest, a shard count that differs from the existing
            data directory, a bad SELECT.
        AofFormatError: bytes that are not RESP commands, or truncation before the last file's
            end (path and byte offset in the error).
        UnsupportedFormatError: an RDB-preamble base file, or a command moonish cannot route.
        WriterLockedError: another writer holds one of the shards.
    """
    aof_dir, out_dir = os.fspath(appendonlydir), os.fspath(data_dir)
    files = read_manifest(aof_dir)
    _check_shard_count(out_dir, shards)
    report = ImportReport(per_shard=[0] * shards)
    writers: list[WalWriter] = []
    try:
        for shard in range(shards):
            options = WriterOptions(shard_id=shard, fsync=FsyncPolicy.NEVER)
            writers.append(WalWriter(os.path.join(out_dir, f"shard-{shard}"), options, clock))
        router = _Router(writers, report)
        for number, aof_file in enumerate(files):
            path = os.path.join(aof_dir, aof_file.name)
            _replay_file(path, router, report, progress, last=number == len(files) - 1)
            report.files.append(aof_file.name)
    finally:
        for writer in writers:
            writer.close()
    report.lsn_ranges = [
        None if first is None else (first, writer.next_lsn - 1)
        for first, writer in zip(router.first_lsn, writers, strict=True)
    ]
    return report


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
    transaction: list[tuple[int, list[bytes]]] | None = None
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
            router.apply(transaction, transaction=True)
            report.transactions += 1
            transaction = None
        else:
            report.commands += 1
            report.per_command[name.decode(errors="replace")] += 1
            if transaction is not None:
                transaction.append((db, argv))
            else:
                router.apply([(db, argv)], transaction=False)
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
        if transaction is not None:
            report.commands -= len(transaction)
            for _, argv in transaction:
                report.per_command[argv[0].upper().decode(errors="replace")] -= 1
        report.truncated_tail = f"{what} at offset {start} of {path} (not applied, as Redis does)"


def _select(argv: list[bytes], path: str, offset: int) -> int:
    try:
        db = int(argv[1])
    except (IndexError, ValueError):
        db = -1
    if not 0 <= db <= MAX_DB:
        raise AofFormatError(f"bad SELECT {argv[1:]!r}", path=path, offset=offset)
    return db
