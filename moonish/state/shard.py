"""``ShardWriter``: a shard's WAL plus its keyspace, so that every record says what a write
did to its key (``c``/``u``/``d``) with images per the shard's stream view type.

Write path of one command: lazy expiry of the keys it touches (each expired key becomes a
``d`` record marked as an expiry, appended first, as Redis propagates a ``DEL``), then the
command runs on the keyspace with Redis's semantics (moonish.state.commands.execute), then one
``kv_change`` record per key it wrote (moonish.state.changes) is appended: alone when there is
one, else as an atomic batch. A command Redis would refuse raises :class:`CommandError` and
writes nothing.

Hash fields that a command finds expired are removed likewise, as one record per hash
(moonish.state.expiry). Keys with an expiry time, and hash fields with one, are also removed by
an active sweep (every ``expiry_sweep_ms`` on a background thread, or by calling
:meth:`ShardWriter.sweep_expired`), as Redis's active expire cycle does.

Retention: when the log rotates to a new segment, the shard's retention policy (its stream
configuration, moonish.datadir.retention) is applied once the append has returned. If a snapshot
is what holds the policy back, a checkpoint is written first. A failure there never fails the
append (its records are written): it is kept in :attr:`ShardWriter.retention_error` and the
policy is tried again at the next rotation.

Recovery (moonish.state.rebuild): opening a shard loads the newest snapshot at or below the end
of the log and replays the records after it (moonish.log.payloads, "kv_change", ``replay``; the
``moonish.function`` messages), so the keyspace and the function libraries are exactly what the
log says. Time comes from the injected clock; a command's time is also its records' commit time,
which replay uses for relative TTLs and stream IDs.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.datadir.policy import RetentionPolicy
from moonish.datadir.retention import PruneReport, prune
from moonish.errors import CommandError, MoonishError, UnavailableError
from moonish.log.records import Checkpoint, KvChange, Message, Replay
from moonish.log.writer import WalWriter
from moonish.state.autosnapshot import AutoSnapshots, BackgroundSnapshot
from moonish.state.changes import COMMAND, STATE, change_records
from moonish.state.commands.execute import execute
from moonish.state.config import StreamConfig, load_config, store_config, upgrade_config
from moonish.state.expiry import field_expiry_record, key_expiry_record, sweep
from moonish.state.keyspace import Access, Keyspace
from moonish.state.libraries import Libraries
from moonish.state.options import ExecResult as ExecResult
from moonish.state.options import Prepared as Prepared
from moonish.state.options import ShardOptions as ShardOptions
from moonish.state.rebuild import rebuild
from moonish.state.requests import RequestServer
from moonish.state.snapshot import list_snapshots, write_snapshot
from moonish.values.model import Entry

Command = Sequence[bytes | str]


def _argv(command: Command) -> list[bytes]:
    return [arg.encode() if isinstance(arg, str) else bytes(arg) for arg in command]


class ShardWriter:
    """A shard's writer with keyspace state (one per shard, enforced by the WAL lock).

    Args:
        shard_dir: the shard directory (created if missing).
        options: see :class:`ShardOptions`.
        clock: command time (expiry, TTLs, stream IDs) and commit time.

    Raises:
        WriterLockedError: another writer holds the shard.
        CorruptionError: the log or the newest snapshot is damaged, or the records the
            keyspace needs were removed without a snapshot covering them.
        UnsupportedFormatError: the shard holds plain kv records (written without keyspace
            tracking), which cannot rebuild a keyspace.
    """

    def __init__(
        self,
        shard_dir: str | os.PathLike[str],
        options: ShardOptions | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.options = options or ShardOptions()
        self._clock = clock
        self._rotated = False
        self.retention_error: BaseException | None = None
        """What the last retention pass after a rotation raised (``None`` once one passes)."""
        self.last_prune: PruneReport | None = None
        """What the last retention pass after a rotation removed."""
        chained = self.options.log.on_rotate

        def rotated(base_lsn: int) -> None:
            self._rotated = True
            if chained is not None:
                chained(base_lsn)

        log_options = dataclasses.replace(self.options.log, on_rotate=rotated)
        self._log = WalWriter(shard_dir, log_options, clock)
        self.shard_dir = self._log.shard_dir
        self.keyspace = Keyspace()
        keyspace = self.keyspace
        self._resolve: Callable[[bytes], Keyspace] = lambda key: keyspace  # one keyspace
        self._spare: Access | None = None  # prepare's access, kept for the next command
        self.source = b""
        """The source position of the last record that carried one (KvChange.source), kept
        by appends and recovery and stored in snapshots; ``b""`` when none did."""
        self.libraries = Libraries()
        """The function libraries (name -> code; moonish.state.libraries)."""
        self.live_source = False
        """Commands come from a live master as it runs them (a replica's stream), so a
        command's time is when it ran there: a delete of a key whose expiry time had passed
        is the master's expiry, and its record is marked so (:meth:`records`). Off for an
        AOF, whose commands carry no time."""
        self._lock = threading.RLock()
        self._stop = threading.Event()
        try:
            stored = load_config(self.shard_dir)
            if stored is None:
                store_config(self.shard_dir, self.options.stream)
            else:
                upgrade_config(self.shard_dir)  # an older file gets its checksum
            self._use(stored or self.options.stream)
            if self.options.rebuild:
                self.source = rebuild(
                    self.shard_dir,
                    self._log.next_lsn - 1,
                    self.keyspace,
                    self.libraries,
                    self.options.on_recovery,
                )
        except BaseException:
            self._log.close()
            raise
        self._requests: RequestServer | None = None
        if self.options.requests and self.options.rebuild:
            try:
                self._requests = RequestServer(self)
            except OSError:  # (the name is taken only by a writer of this shard: the lock)
                self._log.close()
                raise
        taken = [lsn for lsn in list_snapshots(self.shard_dir) if lsn < self._log.next_lsn]
        self.snapshots = AutoSnapshots(self.options.snapshots, taken[-1] if taken else 0)
        """Snapshots taken on their own, by ``options.snapshots``."""
        self._sweeper: threading.Thread | None = None
        self._sweep_error: BaseException | None = None
        self._broken: BaseException | None = None
        if not self.options.rebuild:
            self._broken = UnavailableError("opened without its keyspace (rebuild=False)")
        if self.options.expiry_sweep_ms > 0 and self.options.rebuild:
            self._sweeper = threading.Thread(target=self._sweep_loop, daemon=True)
            self._sweeper.start()

    # -- configuration -------------------------------------------------------------------

    @property
    def stream(self) -> StreamConfig:
        """The stream configuration in force."""
        return self._config

    def set_stream(self, config: StreamConfig) -> None:
        """Change the stream configuration; records appended from now on follow it."""
        with self._lock:
            store_config(self.shard_dir, config)
            self._use(config)

    def _use(self, config: StreamConfig) -> None:
        self._config = config
        self._facts = (config.view, config.max_value_bytes, config.old_images, config.new_images)
        """What the write path reads of the configuration: (view, image limit, old images,
        new images)."""

    def set_retention(self, policy: RetentionPolicy) -> None:
        """Change the retention policy (stored in the stream configuration); it is applied
        from the next rotation on."""
        self.set_stream(dataclasses.replace(self._config, retention=policy))

    @property
    def next_lsn(self) -> int:
        return self._log.next_lsn

    @property
    def last_commit_us(self) -> int:
        """The commit time (µs) of the last record appended (or the closed time, if later)."""
        return self._log.last_commit_us

    # -- writing -------------------------------------------------------------------------

    def execute(self, db: int, command: Command) -> ExecResult:
        """Run one write command (``["HSET", "k", "f", "v"]``; str or bytes) in database
        ``db`` and append its records.

        Raises:
            CommandError: Redis would refuse it (``WRONGTYPE``, bad argument, arity);
                nothing was written (keys that had expired are still removed and logged).
            UnsupportedFormatError: a command moonish does not implement.
            UnavailableError: the background expiry sweep failed (its error chained).
        """
        with self._lock:
            self._check_sweep()
            now_us = self._clock.now_us()
            prepared = self.prepare(db, _argv(command), now_us)
            lsns = self.append(prepared.expired, False, now_us)
            lsns += self.append(prepared.records, len(prepared.records) > 1, now_us)
            if isinstance(prepared.reply, CommandError):
                raise prepared.reply
            return ExecResult(prepared.reply, lsns)

    def load_function(self, code: bytes, *, replace: bool = False) -> ExecResult:
        """Load a function library, as ``FUNCTION LOAD [REPLACE] <code>`` (an RDB file's
        FUNCTION2 item, moonish.redis.rdb.reader ``RdbFunction``): the reply is the library's name,
        the LSN is its ``moonish.function`` message record's.

        Raises:
            CommandError: as FUNCTION LOAD (a bad shebang; without ``replace``, a library of
                that name exists); nothing was written.
            UnavailableError: as :meth:`execute`.
        """
        return self.execute(0, [b"FUNCTION", b"LOAD", *([b"REPLACE"] * replace), code])

    def transaction(self, commands: Sequence[tuple[int, Command]]) -> ExecResult:
        """Run ``(db, command)`` pairs as Redis runs ``MULTI``/``EXEC``: in order, a refused
        command changes nothing and its :class:`CommandError` takes its place in the
        replies, and the records of all others form one atomic batch.

        Raises:
            UnsupportedFormatError: a command moonish does not implement (nothing written).
            UnavailableError: the background expiry sweep failed (its error chained).
        """
        with self._lock:
            self._check_sweep()
            now_us = self._clock.now_us()
            replies, expired, records = [], [], []
            for db, command in commands:
                prepared = self.prepare(db, _argv(command), now_us)
                replies.append(prepared.reply)
                expired += prepared.expired
                records += prepared.records
            lsns = self.append(expired, False, now_us) + self.append(records, True, now_us)
            return ExecResult(replies, lsns)

    def prepare(
        self, db: int, argv: list[bytes], now_us: int, *, loading: bool = False
    ) -> Prepared:
        """Run ``argv`` on the keyspace and build its records without appending them (the
        router, moonish.redis.routing.router, groups records of several shards). Call with the
        lock held. A refused command's :class:`CommandError` is returned as the reply.
        ``loading``: Redis's AOF loading semantics (see :class:`Access`)."""
        # (tuple.__new__: without Prepared.__new__)
        return tuple.__new__(Prepared, self.prepare_parts(db, argv, now_us, loading))

    def prepare_parts(
        self, db: int, argv: list[bytes], now_us: int, loading: bool
    ) -> tuple[Any, list[KvChange], list[KvChange | Message]]:
        """:meth:`prepare`'s (reply, expired, records) as a plain tuple, which compiled code
        makes without a call (the router's path for one command on one shard)."""
        acc = self._spare  # the last command's access, reused (Access.reset)
        self._spare = None  # (a prepare that raises, or one within this one, makes its own)
        if acc is None:
            acc = self.access(now_us // 1000, loading=loading)
        else:
            _, limit, old, _ = self._facts
            acc.reset(now_us // 1000, not loading, old, limit)
            acc.libraries = self.libraries
        try:
            reply: Any = execute(acc, db, argv)
        except CommandError as exc:
            reply = exc
        expired: list[KvChange] = []
        if acc.expired or acc.expired_fields:
            expired = [self.expiry_record(db_, key, entry) for db_, key, entry in acc.expired]
            expired += [field_expiry_record(self._config, *lazy) for lazy in acc.expired_fields]
        replay = STATE if acc.by_value else COMMAND
        records = self.records(acc, acc.log_argv or argv, replay)
        if acc.messages:
            records += acc.messages
        self._spare = acc
        return reply, expired, records

    def access(
        self,
        now_ms: int,
        resolve: Callable[[bytes], Keyspace] | None = None,
        *,
        loading: bool = False,
    ) -> Access:
        """An :class:`Access` on this shard's keyspace with its view's image settings."""
        _, limit, old, _ = self._facts
        acc = Access(
            resolve or self._resolve, now_ms, expire=not loading, images=old, max_value_bytes=limit
        )
        acc.keyspaces = [self.keyspace]
        if resolve is None:
            acc.home = self.keyspace
        acc.libraries = self.libraries
        return acc

    def records(
        self,
        acc: Access,
        argv: list[bytes],
        replay: Replay,
        owns: Callable[[bytes], bool] | None = None,
    ) -> list[KvChange | Message]:
        """One record per key ``acc`` wrote (of this shard, per ``owns``) whose existence
        or value changed: ``c``/``u``/``d`` with images per the view type
        (moonish.state.changes, ``change_records``). With :attr:`live_source`, a ``d`` of a
        key whose expiry time had passed at the command's time (``acc.overdue``: the master's
        ``DEL``/``UNLINK`` of a key it expired) is marked as an expiry."""
        return change_records(self._facts, self.keyspace, self.live_source, acc, argv, replay, owns)

    def expiry_record(self, db: int, key: bytes, entry: Entry) -> KvChange:
        """The ``d`` record, marked as an expiry, of a key removed because it expired."""
        return key_expiry_record(self._config, db, key, entry)

    def append(
        self,
        records: Sequence[KvChange | Message],
        atomic: bool,
        commit_us: int,
        source: bytes = b"",
    ) -> list[int]:
        """Append prepared records: each alone, or all as one atomic batch. A ``source``
        position rides on the last record (a kv_change or a message), so it is in the log
        exactly when the records are.

        Raises:
            UnavailableError: the log refused an append. The keyspace already holds the
                command's effect, which the log now lacks: this writer stops (every later
                call raises it); a new one rebuilds the keyspace from the log.
        """
        if not records:
            return []
        if not atomic and len(records) > 1:
            return self._append_each(records, commit_us, source)
        first = self.append_first(records, atomic, commit_us, source)
        return list(range(first, first + len(records)))

    def append_first(
        self,
        records: Sequence[KvChange | Message],
        atomic: bool,
        commit_us: int,
        source: bytes = b"",
    ) -> int:
        """:meth:`append`, returning the first record's LSN instead of the list of them (0
        when ``records`` is empty): the router counts records and keeps the first LSN."""
        if not records:
            return 0
        if not atomic and len(records) > 1:
            return self._append_each(records, commit_us, source)[0]
        if self._broken is not None:
            self._check_sweep()
        try:  # source or None: without a source, the last record keeps its own
            first = self._log.append_records(records, atomic, commit_us, source or None)
        except (UnavailableError, OSError) as error:
            self._broken = error
            raise
        self._appended(source)
        return first

    def _append_each(
        self, records: Sequence[KvChange | Message], commit_us: int, source: bytes
    ) -> list[int]:
        """Each of ``records`` appended on its own, ``source`` on the last; their LSNs."""
        if self._broken is not None:
            self._check_sweep()
        stored = source or None
        append, last = self._log.append, records[-1]
        try:
            lsns = [append(record, commit_us) for record in records[:-1]]
            lsns.append(append(last, commit_us, source=stored))
        except (UnavailableError, OSError) as error:
            self._broken = error
            raise
        self._appended(source)
        return lsns

    def _appended(self, source: bytes) -> None:
        """After an append: keep its source position, apply retention after a rotation,
        let the snapshot policy look."""
        if source:
            self.source = source
        if self._rotated:
            self._apply_retention()
        self.snapshots.after_append(self)

    def _apply_retention(self) -> None:
        """Apply the retention policy after a rotation; write a snapshot first when that is
        what holds the policy back. Never raises: the records are appended, and an error
        here would say they were not. A failure is kept in :attr:`retention_error` (and
        the policy is tried again at the next rotation)."""
        self._rotated = False
        policy = self._config.retention
        if not policy.deletes:
            return
        try:
            report = prune(self.shard_dir, policy, clock=self._clock)
            if report.snapshot_blocked:
                self.checkpoint("retention")
                report = prune(self.shard_dir, policy, clock=self._clock)
        except (MoonishError, OSError) as error:
            self.retention_error = error
            return
        self.retention_error, self.last_prune = None, report

    # -- expiry --------------------------------------------------------------------------

    def sweep_expired(self) -> int:
        """Remove every key whose expiry time has passed (each a ``d`` record marked as an
        expiry), then every hash field whose time has (a record per hash); returns how many
        records.

        Raises:
            UnavailableError: this writer stopped.
        """
        with self._lock:
            if self._broken is not None:
                self._check_sweep()
            now_us = self._clock.now_us()
            records = sweep(self.keyspace, self._config, now_us // 1000)
            self.append(records, False, now_us)
            return len(records)

    def _sweep_loop(self) -> None:
        while not self._stop.wait(self.options.expiry_sweep_ms / 1000):
            try:
                self.sweep_expired()
            except BaseException as exc:  # the disk failed: the next call raises it
                self._sweep_error = exc
                return

    def _check_sweep(self) -> None:
        """Raise what stopped the sweep thread, if anything did (nothing is dropped quietly),
        or what stopped this writer."""
        if self._broken is not None:
            raise UnavailableError(
                f"the writer stopped: {self._broken}; open a new one", path=self.shard_dir
            ) from self._broken
        if self._sweep_error is not None:
            raise UnavailableError(
                f"the expiry sweep failed: {self._sweep_error!r}", path=self.shard_dir
            ) from self._sweep_error

    # -- snapshots -----------------------------------------------------------------------

    def checkpoint(self, label: str = "") -> tuple[str, int]:
        """Write the keyspace as a snapshot at the last LSN, then a checkpoint record.

        The log is synced first, so the snapshot never covers records a crash could lose; a
        snapshot being written in the background is waited for and finished first.

        Returns:
            (snapshot path, the snapshot's LSN).

        Raises:
            UnavailableError: this writer stopped (a keyspace the log lacks is never
                written as a snapshot).
        """
        with self._lock:
            self._check_sweep()
            self.snapshots.wait(self)  # a child writing the same LSN's file is done first
            self._log.sync()
            lsn = self._log.next_lsn - 1
            path = write_snapshot(
                self.shard_dir,
                self._log.shard_id,
                lsn,
                self.keyspace,
                self._clock.now_us(),
                self.libraries,
                self.source,
            )
            self._log.append(Checkpoint(lsn, label or os.path.basename(path)))
            self.snapshots.taken_at(lsn)
            return path, lsn

    def snapshot_in_background(self, reason: str = "asked", label: str = "") -> BackgroundSnapshot:
        """Start a snapshot at the last LSN, written by a child process while appends go on
        (moonish.state.autosnapshot); its checkpoint record is appended once it is in place
        (:meth:`wait_snapshot`, or an append after it ends).

        Raises:
            UnavailableError: this writer stopped.
            OSError: the fork failed.
        """
        with self._lock:
            self._check_sweep()
            return self.snapshots.start(self, reason, label)

    def wait_snapshot(self, poll_s: float = 0.01) -> BackgroundSnapshot | None:
        """Wait for the background snapshot that runs, if any, and append its checkpoint
        record; returns it (its ``error`` says why it failed). Appends go on meanwhile: the
        child is looked at every ``poll_s`` seconds, the writer's lock held only then."""
        while True:
            with self._lock:
                running = self.snapshots.running
                if running is None or self.snapshots.finish_if_ended(self) is not None:
                    return running
            time.sleep(poll_s)

    def snapshot_facts(self) -> tuple[int, int]:
        """(shard id, bytes of log appended since this writer opened)."""
        return self._log.shard_id, self._log.appended_bytes

    def snapshot_time_us(self) -> int:
        return self._clock.now_us()

    def append_checkpoint(self, lsn: int, label: str) -> None:
        """Append the checkpoint record of the snapshot at ``lsn``."""
        self._log.append(Checkpoint(lsn, label))

    def _snapshot_on_close(self) -> None:
        snapshots = self.snapshots
        if not snapshots.policy.on_close_records or not self._log.appended_bytes:
            return  # a writer that appended nothing leaves the log as it found it
        try:
            # counted from a running child's LSN: few records after it, and it is the one the
            # next open starts from (it is waited for); many, and one of our own is written
            due = snapshots.policy.due_on_close(
                self._log.next_lsn - 1 - snapshots.lsn, len(self.keyspace)
            )
            if snapshots.running is not None and not due:
                snapshots.wait(self)
            elif due:
                snapshots.close(self)
                self.checkpoint("auto:close")
        except (OSError, MoonishError) as exc:
            snapshots.error = f"the snapshot at close failed: {exc!r}"

    # -- closing -------------------------------------------------------------------------

    def sync(self) -> None:
        self._log.sync()

    def sync_descriptor(self) -> tuple[int, int]:
        """The log's newest segment opened for another process to sync, and the last LSN
        (moonish.log.writer ``WalWriter.sync_descriptor``)."""
        return self._log.sync_descriptor()

    def flush(self) -> None:
        """Write the appends the log gathered (``WriterOptions.write_buffer_bytes``)."""
        self._log.flush()

    def close(self) -> None:
        """Stop the sweep thread, write the snapshot a clean close is due
        (``SnapshotPolicy.on_close_records``; only by a writer that appended records), and
        close the log. Idempotent.

        A snapshot that fails here loses nothing (the log holds every record): the close goes
        on, and ``snapshots.error`` says why."""
        self._stop.set()
        if self._sweeper is not None and self._sweeper is not threading.current_thread():
            self._sweeper.join()
        with self._lock:
            if self._broken is None and self._sweep_error is None and self._log.usable:
                self._snapshot_on_close()
            self.snapshots.close(self if self._broken is None else None)
        if self._requests is not None:
            self._requests.close()
        with self._lock:
            self._log.close()

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
