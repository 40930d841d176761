"""Envelope files for Spark's file source: ``moonish cdc export``.

An export turns the shards of a data directory into NDJSON files of envelopes (one envelope per
line, as ``cdc read`` prints them) in one output directory that Spark Structured Streaming's
file source can watch (``moonish.spark.read_envelope_files``).

Contract:

- **A file is complete or absent.** It is written under ``.<name>.tmp`` (Spark's file source
  ignores names starting with ``.`` or ``_``), fsynced, renamed, and the directory fsynced.
- **Names carry the shard and the LSN range** the file accounts for, inclusive, zero-padded
  decimal so that names sort by position: ``shard-0003-00000000000000000001-
  00000000000000050000.ndjson``. Ranges of one shard are contiguous; a range may hold fewer
  envelopes than LSNs where records written with the stream off were passed over.
- **The export's cursor is committed after the file is in place**, in
  ``_moonish_export.json`` (written atomically): ``{"format": "moonish-export", "version": 2,
  "source": {"path": <realpath of the source>, "shards": <count>}, "shards": {"<shard id>":
  <next LSN>}}``. On start, files already in place past the committed cursor (a crash between
  rename and commit) are taken as written, so a restart neither loses nor repeats a change:
  the complete files hold every change exactly once.
- **An export directory holds the export of one source.** The state records it (the data
  directory's absolute path with symlinks resolved, and its shard count); an export of another
  source (or of the same path with another shard count) into it is refused before anything in
  it changes. Version 1 state (no source) is read, its source taken to be the current one, and
  rewritten as version 2.
- One export per output directory at a time (``flock`` on ``_moonish_export.lock``).

Files are cut at ``max_records_per_file`` envelopes, at the end of the log (without
``follow``), and, with ``follow``, once the oldest envelope waiting for a file has waited
``max_file_age_ms``. Memory: at most ``max_records_per_file`` + 1024 envelopes per shard.

Example::

    from moonish.sinks.export import ExportOptions, Exporter

    with Exporter("data", "export", ExportOptions(max_records_per_file=10_000)) as exporter:
        stats = exporter.run()          # until the end of every shard's log
"""

from __future__ import annotations

import fcntl
import os
import re
from dataclasses import dataclass, field

import orjson

from moonish.cdc.envelope import CONNECTOR
from moonish.cdc.follow import ChangeSignal
from moonish.cdc.shard_read import Tail, existing_shard_dirs
from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.datadir import consumers
from moonish.errors import (
    CorruptionError,
    InvalidArgumentError,
    MoonishError,
    UnavailableError,
    UnsupportedFormatError,
)
from moonish.fileio import replace_atomically
from moonish.log.reader import ShardReader

STATE_NAME = "_moonish_export.json"
LOCK_NAME = "_moonish_export.lock"
STATE_FORMAT, STATE_VERSION = "moonish-export", 2
STATE_VERSIONS = (1, 2)
"""State versions read; only :data:`STATE_VERSION` is written (version 1 had no source)."""
FILE_NAME = re.compile(r"^shard-(\d{4,})-(\d{20})-(\d{20})\.ndjson$")


def file_name(shard: int, first_lsn: int, last_lsn: int) -> str:
    """The name of the export file of ``shard`` accounting for LSNs ``first..last``."""
    return f"shard-{shard:04d}-{first_lsn:020d}-{last_lsn:020d}.ndjson"


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """How an export cuts files.

    Attributes:
        max_records_per_file: most envelopes in one file (1..10,000,000).
        max_file_age_ms: with ``follow``, longest time an envelope waits for its file.
        poll_ms: with ``follow``, longest wait without a file-system event.
        name: ``source.name`` in the envelopes.
        consumer: register the export as this named consumer of the source
            (``moonish.datadir.consumers``), moved to its committed cursor as each file is in
            place, so retention keeps what the export has not written; ``None``: none.
        messages: also export checkpoints and message records (``op: "m"``); without it
            they are passed over (the committed cursors still move past them).
    """

    max_records_per_file: int = 50_000
    max_file_age_ms: int = 1000
    poll_ms: int = 1000
    name: str = CONNECTOR
    consumer: str | None = None
    messages: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.max_records_per_file <= 10_000_000:
            raise InvalidArgumentError(
                f"max_records_per_file must be 1..10000000, got {self.max_records_per_file}"
            )
        if self.max_file_age_ms < 0 or self.poll_ms < 1:
            raise InvalidArgumentError("max_file_age_ms must be >= 0 and poll_ms >= 1")


@dataclass(frozen=True, slots=True)
class ExportSource:
    """What an export directory holds the export of.

    Attributes:
        path: the source directory (a data directory or one shard), absolute, symlinks
            resolved (``os.path.realpath``).
        shards: its number of shards.
    """

    path: str
    shards: int

    def __str__(self) -> str:
        return f"{self.path} ({self.shards} shard{'' if self.shards == 1 else 's'})"


@dataclass(slots=True)
class ExportStats:
    """What a run did: files and envelopes written, and each shard's committed cursor."""

    files: int = 0
    records: int = 0
    cursors: dict[int, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Shard:
    """One shard's export state: the committed cursor and the envelopes waiting for a file."""

    shard: int
    tail: Tail
    first_lsn: int  # committed cursor: the first LSN the next file accounts for
    envelopes: list[bytes] = field(default_factory=list)
    lsns: list[int] = field(default_factory=list)
    waiting_since_us: int | None = None


class Exporter:
    """Exports every shard under ``source`` (a data directory or one shard) to ``out_dir``.

    Args:
        source: a data directory (``shard-<k>`` subdirectories) or a shard directory.
        out_dir: the export directory (created if missing).
        options: file cutting and envelope name.
        clock: time for file ages and the envelopes' processing time.

    Raises:
        InvalidArgumentError: ``source`` is not a directory of shards; the export directory
            holds the export of another source (its state names both, :class:`ExportSource`);
            its cursor is past a shard's end; files in it do not continue the cursor.
        UnsupportedFormatError: the export state file is of another format or version (not
            JSON, or JSON of another shape).
        CorruptionError: the export state file says it is one, but its fields are not an
            export state's.
        UnavailableError: another export holds ``out_dir``.
        ConsumerLostError: ``options.consumer`` is ``lost`` (reset it with ``moonish
            consumer seek``); also from :meth:`run` when retention marks it lost meanwhile.
    """

    def __init__(
        self,
        source: str | os.PathLike[str],
        out_dir: str | os.PathLike[str],
        options: ExportOptions | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.options = options or ExportOptions()
        self.out_dir = os.fspath(out_dir)
        self._clock = clock
        shard_paths = existing_shard_dirs(source)
        self.source = ExportSource(os.path.realpath(source), len(shard_paths))
        self._source_dir = os.fspath(source)
        os.makedirs(self.out_dir, exist_ok=True)
        self._lock_fd = _lock(self.out_dir)
        self._shards: list[_Shard] = []
        self._signal: ChangeSignal | None = None
        self._closed = False
        try:
            self._open(shard_paths)
        except BaseException:
            self.close()
            raise
        self._shard_paths = shard_paths

    def _open(self, shard_paths: list[str]) -> None:
        recorded, committed = _load_state(self.out_dir)
        if recorded is not None and recorded != self.source:
            raise InvalidArgumentError(
                f"the export directory holds the export of {recorded}, not of {self.source}: "
                "export each data directory into a directory of its own",
                path=self.out_dir,
            )
        placed = _placed_files(self.out_dir)
        for path in shard_paths:
            shard = _shard_id(path)
            cursor = _continue(shard, committed.get(shard, 1), placed.get(shard, []), path)
            tail = Tail(
                path,
                cursor,
                name=self.options.name,
                clock=self._clock,
                messages=self.options.messages,
            )
            self._shards.append(_Shard(shard, tail, cursor))
        for entry in os.listdir(self.out_dir):  # what a crash left half-written
            if entry.startswith(".shard-") and entry.endswith(".tmp"):
                os.unlink(os.path.join(self.out_dir, entry))
        if self.options.consumer is not None:  # the files are the truth: the consumer follows
            consumers.register_sink(
                self._source_dir,
                self.options.consumer,
                self._positions(),
                owner="export",
                authoritative=True,
            )
        self._commit()

    @property
    def cursors(self) -> dict[int, int]:
        """Each shard's committed cursor: the first LSN not yet in a complete file."""
        return {state.shard: state.first_lsn for state in self._shards}

    def run(self, follow: bool = False) -> ExportStats:
        """Export until every shard's log is exhausted (or, with ``follow``, until
        :meth:`close` is called from another thread or signal handler).

        Returns:
            the files and envelopes this call wrote and the committed cursors.

        Raises:
            CorruptionError: damage in a shard's log, after every file before it is in place.
            LsnNotRetainedError: a shard no longer holds the export's cursor.
        """
        stats = ExportStats()
        if follow and self._signal is None:
            self._signal = ChangeSignal(self._shard_paths, self.options.poll_ms)
        while not self._closed:
            if self._signal is not None:
                self._signal.clear()
            try:
                pulls = [self._pull(state) for state in self._shards]
            except MoonishError:
                for state in self._shards:  # every valid change before the damage, in files
                    self._cut(state, stats, flush=True)
                raise
            for state, (_, at_end) in zip(self._shards, pulls, strict=True):
                self._cut(state, stats, flush=at_end and not follow)
            if all(at_end for _, at_end in pulls):
                if not follow:
                    break
                if not any(got for got, _ in pulls):
                    self._signal.wait(self._next_deadline_ms())  # type: ignore[union-attr]
        stats.cursors = self.cursors
        return stats

    def _pull(self, state: _Shard) -> tuple[int, bool]:
        """Move envelopes from the shard's log into its waiting list, until a file's worth
        waits; returns how many came and whether the end of the log was reached."""
        got, room = 0, self.options.max_records_per_file
        for batch in state.tail.batches():
            if state.waiting_since_us is None:
                state.waiting_since_us = self._clock.now_us()
            state.envelopes += batch.envelopes
            state.lsns += [frame.lsn for frame in batch.frames]
            got += len(batch)
            if len(state.envelopes) >= room:
                return got, False
        return got, True

    def _cut(self, state: _Shard, stats: ExportStats, flush: bool) -> None:
        """Write the files that are due: every full file, then the rest if flushing or aged."""
        size = self.options.max_records_per_file
        while len(state.envelopes) >= size:
            self._write(state, size, state.lsns[size - 1], stats)
        if not state.envelopes:
            if state.tail.cursor.lsn > state.first_lsn and flush:
                state.first_lsn = state.tail.cursor.lsn  # only passed-over records: no file
                self._commit()
            return
        aged = (
            state.waiting_since_us is not None
            and self._clock.now_us() - state.waiting_since_us >= self.options.max_file_age_ms * 1000
        )
        if flush or aged:
            self._write(state, len(state.envelopes), state.tail.cursor.lsn - 1, stats)

    def _write(self, state: _Shard, count: int, last_lsn: int, stats: ExportStats) -> None:
        envelopes = state.envelopes[:count]
        name = file_name(state.shard, state.first_lsn, last_lsn)
        replace_atomically(os.path.join(self.out_dir, name), [b"\n".join(envelopes), b"\n"])
        del state.envelopes[:count], state.lsns[:count]
        state.first_lsn = last_lsn + 1
        state.waiting_since_us = self._clock.now_us() if state.envelopes else None
        self._commit()
        stats.files += 1
        stats.records += count

    def _next_deadline_ms(self) -> int | None:
        waiting = [s.waiting_since_us for s in self._shards if s.waiting_since_us is not None]
        if not waiting:
            return None
        due_us = min(waiting) + self.options.max_file_age_ms * 1000 - self._clock.now_us()
        return max(0, due_us // 1000)

    def _commit(self) -> None:
        state = {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "source": {"path": self.source.path, "shards": self.source.shards},
            "shards": {str(shard.shard): shard.first_lsn for shard in self._shards},
        }
        replace_atomically(os.path.join(self.out_dir, STATE_NAME), [orjson.dumps(state)])
        if self.options.consumer is not None:  # after the files and the cursor are in place
            consumers.ack(self._source_dir, self.options.consumer, self._positions())

    def _positions(self) -> list[int]:
        """The committed cursor as a consumer's positions (last LSN in a file, per shard)."""
        return [state.first_lsn - 1 for state in self._shards]

    def close(self) -> None:
        """Stop a running :meth:`run` (from another thread) and release the directory. What
        waits for a file is not written; the next run reads it again from the log."""
        self._closed = True
        if self._signal is not None:
            self._signal.close()
        for state in self._shards:
            state.tail.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def __enter__(self) -> Exporter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _lock(out_dir: str) -> int:
    fd = os.open(os.path.join(out_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise UnavailableError(
            "another export is writing to this directory", path=out_dir
        ) from None
    return fd


def _shard_id(shard_dir: str) -> int:
    reader = ShardReader(shard_dir)
    try:
        reader.seek(0)
        if reader.shard_id is None:
            raise InvalidArgumentError("shard has no segment", path=shard_dir)
        return reader.shard_id
    finally:
        reader.close()


def _load_state(out_dir: str) -> tuple[ExportSource | None, dict[int, int]]:
    """The recorded source (``None`` for a new export or version 1 state) and the committed
    cursor of each shard."""
    path = os.path.join(out_dir, STATE_NAME)
    try:
        with open(path, "rb") as file:
            state = orjson.loads(file.read())
    except FileNotFoundError:
        return None, {}
    except orjson.JSONDecodeError as error:
        raise UnsupportedFormatError(f"export state is not JSON: {error}", path=path) from error
    if (
        not isinstance(state, dict)
        or state.get("format") != STATE_FORMAT
        or state.get("version") not in STATE_VERSIONS
    ):
        raise UnsupportedFormatError(
            f"export state is not {STATE_FORMAT} version {' or '.join(map(str, STATE_VERSIONS))}",
            path=path,
        )
    try:
        source = state.get("source")
        recorded = (
            None if source is None else ExportSource(str(source["path"]), int(source["shards"]))
        )
        cursors = {int(shard): int(lsn) for shard, lsn in state["shards"].items()}
    except (AttributeError, KeyError, TypeError, ValueError) as error:
        raise CorruptionError(f"bad export state fields: {error!r}", path=path) from None
    return recorded, cursors


def _placed_files(out_dir: str) -> dict[int, list[tuple[int, int]]]:
    """Complete export files by shard: sorted ``(first_lsn, last_lsn)`` ranges."""
    placed: dict[int, list[tuple[int, int]]] = {}
    for entry in os.listdir(out_dir):
        match = FILE_NAME.match(entry)
        if match:
            shard, first, last = map(int, match.groups())
            placed.setdefault(shard, []).append((first, last))
    for ranges in placed.values():
        ranges.sort()
    return placed


def _continue(shard: int, cursor: int, ranges: list[tuple[int, int]], shard_dir: str) -> int:
    """The committed cursor moved past files placed after it (renamed, then a crash before
    the commit); any other file at or past the cursor means the directory is not this
    export's."""
    for first, last in ranges:
        if last < cursor:
            continue
        if first != cursor:
            raise InvalidArgumentError(
                f"export file {file_name(shard, first, last)} does not continue the export "
                f"cursor {cursor} of shard {shard}: the directory holds another export",
                path=shard_dir,
                lsn=cursor,
            )
        cursor = last + 1
    return cursor
