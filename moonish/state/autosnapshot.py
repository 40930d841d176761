"""Snapshots a writer takes on its own, written by a forked child (docs/images.md, "Snapshots").

As Redis writes its RDB in the background (``rdbSaveBackground`` in Redis's src/rdb.c): the
writer forks, and the child writes the keyspace as it was at the fork (the kernel shares the
pages copy-on-write) while the writer goes on appending. A snapshot never claims records the
log could lose: the child first syncs the log's newest segment up to the snapshot's LSN (on a
descriptor the writer opened for it, ``WalWriter.sync_descriptor``), so the writer's pause is
the ``fork`` alone (the page tables: milliseconds per GiB of heap; docs/benchmarks.md §14),
not the disk's sync. The child writes to a temporary name, syncs and renames
(moonish.state.snapshot); the
writer, polling the child between appends, then appends the checkpoint record and drops
snapshots older than the ones kept. A child the writer kills (the writer closes first) leaves
no snapshot, only its temporary file, which is removed.

Memory: pages either side writes while the child runs are copied; the child reads every key,
and CPython's reference counts are writes, so in the worst case the child's pages grow to the
keyspace's size (the collector is off in the child, which keeps it from touching every
object once more).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import time
from dataclasses import dataclass
from typing import Protocol

from moonish.errors import InvalidArgumentError, MoonishError, UnavailableError
from moonish.state.config import (
    DEFAULT_SNAPSHOT_EVERY_BYTES,
    DEFAULT_SNAPSHOT_EVERY_RECORDS,
    DEFAULT_SNAPSHOT_EVERY_S,
    DEFAULT_SNAPSHOT_ON_CLOSE_RECORDS,
)
from moonish.state.keyspace import Keyspace
from moonish.state.libraries import Libraries
from moonish.state.snapshot import drop_old_snapshots, snapshot_path, write_snapshot


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When a writer takes a snapshot on its own: whichever comes first of

    - ``every_records`` records since the last snapshot, or as many records as the keyspace
      holds keys when that is more (a snapshot costs one write per key, so it is taken at most
      once per keyspace's worth of records, and a restart replays at most that many);
    - ``every_bytes`` bytes of log since the last snapshot;
    - ``every_s`` seconds since the last snapshot (or since the writer opened), when any
      record was appended since.

    0 turns a rule off; all three 0 (:meth:`off`): never (snapshots are then taken only when
    asked for, ``moonish wal checkpoint``, or when retention needs one).

    And when a writer that appended records closes (a shutdown checkpoint, as PostgreSQL's):
    a snapshot is written then, in the foreground, when at least ``on_close_records``
    records came since the last one and at least an eighth as many as the keyspace holds
    keys (writing a key costs about an eighth of replaying a record), so the next open
    replays none; 0: never.

    Raises:
        InvalidArgumentError: a negative value.
    """

    every_records: int = DEFAULT_SNAPSHOT_EVERY_RECORDS
    every_bytes: int = DEFAULT_SNAPSHOT_EVERY_BYTES
    every_s: float = DEFAULT_SNAPSHOT_EVERY_S
    on_close_records: int = DEFAULT_SNAPSHOT_ON_CLOSE_RECORDS

    def __post_init__(self) -> None:
        for name in ("every_records", "every_bytes", "every_s", "on_close_records"):
            if getattr(self, name) < 0:
                raise InvalidArgumentError(
                    f"snapshot {name} must be >= 0, got {getattr(self, name)}"
                )

    @classmethod
    def off(cls) -> SnapshotPolicy:
        return cls(0, 0, 0, 0)

    @property
    def enabled(self) -> bool:
        return bool(self.every_records or self.every_bytes or self.every_s)

    def due(self, records: int, log_bytes: int, seconds: float, keys: int) -> str | None:
        """Why a snapshot is due after ``records`` records and ``log_bytes`` bytes of log in
        ``seconds`` since the last one, with ``keys`` keys in the keyspace (``"records"``,
        ``"bytes"``, ``"time"``), or ``None``."""
        if self.every_records and records >= max(self.every_records, keys):
            return "records"
        if self.every_bytes and log_bytes >= self.every_bytes:
            return "bytes"
        if self.every_s and records and seconds >= self.every_s:
            return "time"
        return None

    def due_on_close(self, records: int, keys: int) -> bool:
        """Whether a closing writer writes a snapshot, ``records`` records after the last
        one with ``keys`` keys in the keyspace."""
        return bool(self.on_close_records) and records >= max(self.on_close_records, keys // 8)


class BackgroundSnapshot:
    """A snapshot being written by a child process (see the module docstring).

    Attributes:
        lsn: the snapshot's LSN (the child syncs the log up to it before it writes).
        path: the snapshot file it writes.
        reason: why it was taken (``"records"``, ``"bytes"``, ``"time"``, ``"asked"``).
        label: its checkpoint record's label (``auto:<reason>`` unless given).
        pause_s: how long the fork kept the writer (seconds).
        finished: the writer is done with it: in place with its checkpoint record appended,
            or failed or killed (then :attr:`error` says why).
    """

    def __init__(
        self,
        shard_dir: str,
        shard: int,
        lsn: int,
        keyspace: Keyspace,
        created_us: int,
        libraries: Libraries,
        source: bytes,
        reason: str,
        label: str = "",
        sync_fd: int = -1,
    ) -> None:
        """``sync_fd``: a descriptor of the log's newest segment the child syncs before it
        writes anything (-1: none); this process closes it once the child has it."""
        self.lsn, self.reason = lsn, reason
        self.label = label or f"auto:{reason}"
        self.finished = False
        self.path = snapshot_path(shard_dir, lsn)
        self.started = time.monotonic()
        try:
            self._error_read, error_write = os.pipe()
        except OSError:
            if sync_fd >= 0:
                os.close(sync_fd)
            raise
        began = time.perf_counter()
        self.pid = -1
        try:
            self.pid = os.fork()
        except OSError:
            os.close(self._error_read)
            raise
        finally:
            if self.pid != 0:  # (the child closes them when it is done)
                os.close(error_write)
                if sync_fd >= 0:
                    os.close(sync_fd)
        if self.pid == 0:  # the child: sync, write, report, exit without running any cleanup
            args = (shard_dir, shard, lsn, keyspace, created_us, libraries, source)
            _child(error_write, sync_fd, args)
        self.pause_s = time.perf_counter() - began
        self._status: int | None = None
        self.error: str | None = None
        """Why the child failed (its exception, or how it ended), once :meth:`poll` says so."""

    def poll(self) -> bool:
        """Whether the child has ended (then :attr:`error` is ``None`` when the snapshot is
        in place). Never blocks."""
        if self._status is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == 0:
                return False
            self._finish(status)
        return True

    def wait(self) -> None:
        """Block until the child has ended."""
        if self._status is None:
            self._finish(os.waitpid(self.pid, 0)[1])

    def kill(self) -> None:
        """Stop the child if it runs, and remove its temporary file."""
        if self._status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
            self.wait()
        directory, name = os.path.split(self.path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(directory, f".{name}.tmp"))

    def _finish(self, status: int) -> None:
        self._status = status
        with os.fdopen(self._error_read, "rb") as pipe:
            said = pipe.read().decode(errors="replace")
        if os.waitstatus_to_exitcode(status) != 0:
            code = os.waitstatus_to_exitcode(status)
            ended = f"exit code {code}" if code >= 0 else f"signal {-code}"
            self.error = said or f"the snapshot process ended with {ended}"


def _child(
    error_write: int,
    sync_fd: int,
    args: tuple[str, int, int, Keyspace, int, Libraries, bytes],
) -> None:
    code = 1
    try:
        gc.disable()
        # Nothing of the parent's stays open here: not the shard's lock (a writer that
        # starts after the parent died must not wait for this child), segments or sockets;
        # standard streams neither: a pipe the parent writes into ends when the parent does.
        low = 3
        for keep in sorted({error_write, sync_fd} - {-1}):
            os.closerange(low, keep)
            low = keep + 1
        os.closerange(low, os.sysconf("SC_OPEN_MAX"))
        null = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(null, stream)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C is the parent's
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        shard_dir, shard, lsn, keyspace, created_us, libraries, source = args
        if sync_fd >= 0:
            try:
                os.fdatasync(sync_fd)  # the log up to ``lsn`` is durable before the snapshot
            except OSError as error:
                raise UnavailableError(
                    f"the log could not be synced up to LSN {lsn} ({error.strerror}); no "
                    "snapshot was written",
                    path=shard_dir,
                    lsn=lsn,
                ) from error
            os.close(sync_fd)
        write_snapshot(
            shard_dir, shard, lsn, keyspace, created_us, libraries, source, drop_older=False
        )
        code = 0
    except BaseException as exc:  # reported to the parent, which decides
        with contextlib.suppress(OSError):
            os.write(error_write, repr(exc).encode())
    finally:
        os._exit(code)


CHECK_EVERY_APPENDS = 32
"""Appends between two looks at the policy and the child (a look costs a clock read and, while
a child runs, a ``waitpid``)."""


class SnapshotHost(Protocol):
    """What :class:`AutoSnapshots` needs of its writer (moonish.state.shard.ShardWriter)."""

    shard_dir: str
    keyspace: Keyspace
    libraries: Libraries
    source: bytes

    @property
    def next_lsn(self) -> int: ...

    def snapshot_facts(self) -> tuple[int, int]:
        """(shard id, bytes of log appended since the writer opened)."""
        ...

    def snapshot_time_us(self) -> int:
        """The snapshot's creation time, µs since the Unix epoch (read only when one starts)."""
        ...

    def sync_descriptor(self) -> tuple[int, int]:
        """The log's newest segment opened for the child to sync, and the last LSN."""
        ...

    def append_checkpoint(self, lsn: int, label: str) -> None: ...


class AutoSnapshots:
    """A writer's snapshots by :class:`SnapshotPolicy`, one child at a time.

    Attributes:
        running: the snapshot being written, or ``None``.
        last: the last snapshot taken in the background that is in place, or ``None``.
        error: why the last one failed (``None`` once one succeeds). A failed snapshot loses
            nothing (the log holds every record); the next is tried when the policy says so
            again, counting from the failed one.
        taken: background snapshots in place since the writer opened.
    """

    def __init__(self, policy: SnapshotPolicy, snapshot_lsn: int) -> None:
        self.policy = policy
        self.running: BackgroundSnapshot | None = None
        self.last: BackgroundSnapshot | None = None
        self.error: str | None = None
        self.taken = 0
        self._lsn = snapshot_lsn  # the LSN of the newest snapshot (0: none)
        self._bytes_at = 0
        self._since = time.monotonic()
        self._countdown = CHECK_EVERY_APPENDS

    def after_append(self, host: SnapshotHost) -> None:
        """Look at the child and the policy every :data:`CHECK_EVERY_APPENDS` appends: append
        the checkpoint of a finished snapshot, or start one that is due."""
        self._countdown -= 1
        if self._countdown > 0:
            return
        self._countdown = CHECK_EVERY_APPENDS
        if self.running is not None:
            if self.running.poll():
                self._finish(host)
            return
        if not self.policy.enabled:
            return
        _, appended = host.snapshot_facts()
        reason = self.policy.due(
            host.next_lsn - 1 - self._lsn,
            appended - self._bytes_at,
            time.monotonic() - self._since,
            len(host.keyspace),
        )
        if reason is not None:
            try:
                self.start(host, reason)
            except (OSError, MoonishError) as exc:  # the records are appended: not a failure
                # of this append (a log that failed to sync refuses the next one itself)
                self.error = f"the snapshot could not start: {exc!r}"

    def start(self, host: SnapshotHost, reason: str, label: str = "") -> BackgroundSnapshot:
        """Fork the child that syncs the log and writes the snapshot at the last LSN (a
        running one is first waited for).

        Raises:
            OSError: the fork failed (the writer goes on; nothing is lost).
            UnavailableError: the writer stopped on a failure.
        """
        if self.running is not None:
            self.wait(host)
        shard, appended = host.snapshot_facts()
        now_us = host.snapshot_time_us()
        sync_fd, lsn = host.sync_descriptor()  # (BackgroundSnapshot owns it from here)
        self._lsn, self._bytes_at, self._since = lsn, appended, time.monotonic()
        self.running = BackgroundSnapshot(
            host.shard_dir,
            shard,
            lsn,
            host.keyspace,
            now_us,
            host.libraries,
            host.source,
            reason,
            label,
            sync_fd,
        )
        return self.running

    def wait(self, host: SnapshotHost) -> BackgroundSnapshot | None:
        """Wait for the running child, if any, and finish it; returns it."""
        snapshot = self.running
        if snapshot is not None:
            snapshot.wait()
            self._finish(host)
        return snapshot

    @property
    def lsn(self) -> int:
        """The LSN of the newest snapshot, in place or being written (0: none)."""
        return self._lsn

    def taken_at(self, lsn: int) -> None:
        """Count the rules from a snapshot at ``lsn`` written in the foreground."""
        self._lsn, self._since = max(self._lsn, lsn), time.monotonic()

    def finish_if_ended(self, host: SnapshotHost) -> BackgroundSnapshot | None:
        """The running child if it has ended (then finished), else ``None``; never blocks."""
        snapshot = self.running
        if snapshot is not None and snapshot.poll():
            self._finish(host)
            return snapshot
        return None

    def _finish(self, host: SnapshotHost) -> None:
        snapshot, self.running = self.running, None
        assert snapshot is not None
        try:
            if snapshot.error is not None:
                self.error = snapshot.error
                return
            host.append_checkpoint(snapshot.lsn, snapshot.label)
            drop_old_snapshots(host.shard_dir)
            self.last, self.error = snapshot, None
            self.taken += 1
        finally:
            snapshot.finished = True

    def close(self, host: SnapshotHost | None) -> None:
        """Finish a child that has ended (its checkpoint appended to ``host``'s log; not
        with ``None``, a writer that stopped); kill one that runs (its snapshot is not
        taken). Idempotent."""
        running, self.running = self.running, None
        if running is None:
            return
        if host is None or not running.poll():
            running.kill()
            if host is None or not os.path.exists(running.path):
                running.error = running.error or "the writer closed before it was in place"
                running.finished = True
                return
            running.error = None  # killed after its rename: the snapshot is whole and in place
        self.running = running
        self._finish(host)
