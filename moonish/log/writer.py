"""The shard writer: appends records and atomic batches, rotates segments, recovers after a crash.

Contract:

- One writer per shard. The writer takes an exclusive ``flock`` on ``<shard_dir>/LOCK``; a second
  writer (in this or another process) gets :class:`~moonish.errors.WriterLockedError`.
- LSNs start at 1, are dense and strictly increasing. ``append`` returns the record's LSN,
  ``append_batch`` the LSNs of its records.
- A batch is written with one ``write`` call and never spans segments; readers see all of it or
  none of it, even if the process dies in the middle.
- On open, an incomplete tail of the newest segment (a torn record or batch) is cut off. The
  next LSN follows the last complete record, or, when the tail's frame headers name LSNs (a
  reader in another process may have read those frames whole before a crash took them), it
  follows those: they are recorded as discarded in control.json first, and the writer
  continues in a new segment. Damage that is not a torn tail raises
  :class:`~moonish.errors.CorruptionError`: the writer never truncates valid data away.
- Durability follows Redis's ``appendfsync``: ``always`` (fdatasync after every append),
  ``every`` (a background thread syncs every ``fsync_interval_ms``), ``never`` (the OS decides;
  ``sync()`` and ``close()`` still sync).

Example::

    with WalWriter("data/shard-0") as writer:
        lsn = writer.append(KvCommand(0, (b"SET", b"k", b"v")))
        lsns = writer.append_batch([KvCommand(0, (b"DEL", b"a")), KvCommand(0, (b"DEL", b"b"))])
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Sequence

from moonish.clock import SYSTEM_CLOCK, Clock
from moonish.errors import (
    InvalidArgumentError,
    MoonishError,
    UnavailableError,
)
from moonish.fileio import fsync_dir, write_all
from moonish.log.control import Control, store_control
from moonish.log.format import (
    FLAG_BATCH,
    FORMAT_VERSION,
    INDEX_ENTRY,
    SEGMENT_HEADER_BYTES,
)
from moonish.log.frames import Frame, encode_records
from moonish.log.heartbeat import (
    ClosedTime,
    closed_floor_us,
    commit_before,
    store_closed_time,
)
from moonish.log.lock import lock_shard
from moonish.log.options import (
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_SEGMENT_BYTES,
    FsyncPolicy,
    Recovery,
    WriterOptions,
)
from moonish.log.records import Record
from moonish.log.recovery import find_log_end
from moonish.log.segment import (
    encode_segment_header,
    index_path,
    reopen_index,
    segment_path,
)

__all__ = [  # the options live in moonish.log.options; importers use them from here
    "DEFAULT_INDEX_INTERVAL_BYTES",
    "DEFAULT_SEGMENT_BYTES",
    "FsyncPolicy",
    "Recovery",
    "WalWriter",
    "WriterOptions",
]


class WalWriter:
    """Appends records to one shard's log. See the module docstring for the contract.

    Args:
        shard_dir: the shard's directory; created if missing.
        options: see :class:`WriterOptions`.
        clock: stamps each append's commit time (``commit_us``).

    Raises:
        WriterLockedError: another writer holds the shard.
        CorruptionError: the newest segment is damaged in a way that is not a torn tail.
        InvalidArgumentError: ``options.shard_id`` differs from the existing segments'.
    """

    def __init__(
        self,
        shard_dir: str | os.PathLike[str],
        options: WriterOptions | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.shard_dir = os.fspath(shard_dir)
        self.options = options or WriterOptions()
        # What every append reads, as native attributes (the options are an interpreted
        # frozen dataclass: each read of one is a generic attribute lookup).
        self._segment_bytes: int = self.options.segment_bytes
        self._gather_bytes: int = self.options.write_buffer_bytes
        self._index_interval_bytes: int = self.options.index_interval_bytes
        self._fsync_always: bool = self.options.fsync is FsyncPolicy.ALWAYS
        self._clock = clock
        self._lock = threading.Lock()
        # Bound once: compiled, ``self._lock.acquire()`` looks the method up on every call.
        self._acquire: Callable[[], bool] = self._lock.acquire
        self._release: Callable[[], None] = self._lock.release
        self._fd = -1
        self._dirty = False
        self.appended_bytes = 0
        """Bytes of frames this writer appended since it opened."""
        self.index_rebuilt = False
        """Whether opening found the newest segment's index damaged and rebuilt it."""
        self._index_fd = -1
        self._failed: UnavailableError | None = None
        self._pending: list[bytes] = []  # appends gathered (WriterOptions.write_buffer_bytes)
        self._pending_bytes = 0
        self._pending_index: list[bytes] = []  # their index entries
        os.makedirs(self.shard_dir, exist_ok=True)
        self._lock_fd = lock_shard(self.shard_dir)
        try:
            self.recovery = self._recover()
        except BaseException:
            for fd in (self._fd, self._index_fd, self._lock_fd):
                if fd >= 0:
                    os.close(fd)
            self._fd = self._index_fd = self._lock_fd = -1
            raise
        self._stop = threading.Event()
        self._syncer: threading.Thread | None = None
        if self.options.fsync is FsyncPolicy.EVERY:
            self._syncer = threading.Thread(
                target=self._sync_loop, name="moonish-fsync", daemon=True
            )
            self._syncer.start()
        self._heartbeat: threading.Thread | None = None
        if self.options.heartbeat_ms is not None:
            self._heartbeat = threading.Thread(
                target=self._heartbeat_loop, name="moonish-heartbeat", daemon=True
            )
            self._heartbeat.start()

    # -- opening ---------------------------------------------------------------------------

    def _recover(self) -> Recovery:
        """Find where the log ends (moonish.log.recovery: every check, before anything is
        changed), cut a torn tail, open (or create) the newest segment, and mark control.json
        unclean (a writer is running)."""
        end = find_log_end(self.shard_dir, self.options.shard_id)
        self.shard_id = end.shard_id
        # commit times never decrease: not below the last record, nor below closed time
        if end.frames:
            last_us = end.frames[-1].commit_us
        else:  # an empty newest segment: the last record is in the one before
            last_us = commit_before(self.shard_dir, end.next_lsn) if end.newest else 0
        self._last_commit_us = max(last_us, closed_floor_us(self.shard_dir))
        self._busy = False  # whether records were appended since the last heartbeat
        if end.newest is None:
            self._create_segment(end.start)
            recovery = Recovery(segment_path(self.shard_dir, end.start), 0, end.start)
        else:
            path = segment_path(self.shard_dir, end.newest)
            if end.cut is not None:
                # control.json first: a writer killed before it cuts (or right after) must
                # still never give these LSNs again; the log ends exactly there
                control = end.control or Control(end.shard_id, end.start, True)
                store_control(
                    self.shard_dir,
                    dataclasses.replace(
                        control.with_discarded(end.cut, torn=True), next_lsn=end.start, clean=True
                    ),
                )
            fd = os.open(path, os.O_WRONLY)
            try:
                if end.committed_end < end.file_bytes:
                    os.ftruncate(fd, end.committed_end)
                os.fsync(fd)  # what a killed writer left in the page cache is durable before
            finally:  # control.json records where this writer starts
                os.close(fd)
            self._recover_index(end.newest, end.frames, end.scanned_from)
            if end.version != FORMAT_VERSION or end.start != end.next_lsn:
                # Frames of this version never go into a segment of another, and a segment
                # holds consecutive LSNs: continue in a new segment (which replaces the newest
                # one if that holds no record and would have the same name).
                index_fd, self._index_fd = self._index_fd, -1
                os.close(index_fd)
                self._create_segment(end.start)
            else:
                self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                self._base_lsn, self._size = end.newest, end.committed_end
                self._next_lsn = end.next_lsn
            recovery = Recovery(path, end.file_bytes - end.committed_end, end.start, end.cut)
        # the discarded ranges cannot change while this writer holds the lock (repair takes it)
        control = end.control or Control(self.shard_id, end.start, False)
        control = control.with_discarded(end.cut, torn=True)
        self._discarded, self._torn = control.discarded, control.torn
        store_control(
            self.shard_dir,
            Control(self.shard_id, self._next_lsn, False, self._discarded, self._torn),
        )
        return recovery

    def _recover_index(self, base: int, frames: list[Frame], scanned_from: int) -> None:
        """Reopen the newest segment's index for appends (``reopen_index``)."""
        interval = self.options.index_interval_bytes
        self._index_fd, last, self.index_rebuilt = reopen_index(
            self.shard_dir, base, frames, interval, scanned_from
        )
        self._last_indexed = last if last is not None else -interval

    def _create_segment(self, base_lsn: int) -> None:
        path = segment_path(self.shard_dir, base_lsn)
        tmp = path + ".tmp"
        header = encode_segment_header(self.shard_id, base_lsn, self._clock.now_us())
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            write_all(fd, header)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(self.shard_dir)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        try:
            self._index_fd = os.open(
                index_path(self.shard_dir, base_lsn), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644
            )
        except BaseException:
            os.close(fd)  # no descriptor outlives a failed open (EMFILE)
            raise
        self._fd = fd
        self._base_lsn = base_lsn
        self._size = SEGMENT_HEADER_BYTES
        self._next_lsn = base_lsn
        self._last_indexed = -self.options.index_interval_bytes

    # -- appending -------------------------------------------------------------------------

    @property
    def next_lsn(self) -> int:
        """The LSN the next appended record will get."""
        return self._next_lsn

    @property
    def last_commit_us(self) -> int:
        """The commit time (µs) the next record may not go below: the last record's, or the
        closed time, whichever is later."""
        return self._last_commit_us

    def append(
        self, record: Record, commit_us: int | None = None, *, source: bytes | None = None
    ) -> int:
        """Append one record on its own; returns its LSN. ``commit_us`` (µs since the Unix
        epoch) defaults to the clock's time. ``source``: a source position to store on the
        record (a kv_change or a message) instead of its own.

        Raises:
            ValueError: the record cannot be encoded (see ``encode_payload``).
            InvalidArgumentError: the writer is closed.
            UnavailableError: the write failed and was undone (nothing appended: retry when
                the disk has room), or the writer stopped for good (a write that could not be
                undone, a failed fdatasync, rotation, a failed write of gathered appends;
                close it and open a new writer).
        """
        return self._append((record,), 0, commit_us, source)

    def append_batch(
        self,
        records: Sequence[Record],
        commit_us: int | None = None,
        *,
        source: bytes | None = None,
    ) -> list[int]:
        """Append records as one atomic batch (all visible to readers, or none), committed at
        ``commit_us`` (default: the clock's time); ``source`` as for :meth:`append`, on the
        last record.

        Every record carries ``FLAG_BATCH``, so even a batch of one is reported as a
        transaction (Debezium's ``transaction`` block) by readers.

        Returns:
            The LSNs of ``records``, in order (consecutive).

        Raises:
            ValueError: ``records`` is empty or a record cannot be encoded.
            InvalidArgumentError: the writer is closed.
            UnavailableError: as :meth:`append`; a batch is undone whole.
        """
        first = self._append(records, FLAG_BATCH, commit_us, source)
        return list(range(first, first + len(records)))

    def append_records(
        self,
        records: Sequence[Record],
        atomic: bool,
        commit_us: int | None = None,
        source: bytes | None = None,
    ) -> int:
        """:meth:`append_batch` of ``records`` when ``atomic``, else :meth:`append` of the one
        record ``records`` holds; the first LSN (without a list of LSNs or a tuple of one).

        Raises:
            ValueError: ``records`` is empty, or holds more than one record and is not
                ``atomic``; as :meth:`append_batch` and :meth:`append`.
        """
        if not atomic and len(records) > 1:
            raise ValueError("records appended each on its own go one per append")
        return self._append(records, FLAG_BATCH if atomic else 0, commit_us, source)

    def _append(
        self,
        records: Sequence[Record],
        flags: int,
        commit_us: int | None = None,
        source: bytes | None = None,
    ) -> int:
        """Append ``records`` with ``flags``; the first one's LSN."""
        if not records:
            raise ValueError("an atomic batch needs at least one record")
        if commit_us is None:
            commit_us = self._clock.now_us()
        count = len(records)
        self._acquire()  # (not ``with``: compiled, that costs two lookups and two calls more)
        try:
            if self._failed is not None or self._fd < 0:
                self._check_usable()
            commit_us = max(commit_us, self._last_commit_us)  # never decreases in a shard
            first = self._next_lsn
            data = encode_records(records, first, commit_us, flags, source)
            size = self._size
            if size > SEGMENT_HEADER_BYTES and size + len(data) > self._segment_bytes:
                self._rotate()  # the new segment's base is ``first``: the frames stay valid
                size = self._size
            gather = self._gather_bytes
            if gather:
                self._pending.append(data)
                self._pending_bytes += len(data)
            else:
                try:
                    write_all(self._fd, data)
                except OSError as error:
                    self._undo_write(self._fd, size, error, "segment")
                    raise UnavailableError(
                        f"the append of LSN {first} failed ({error.strerror}); it was undone "
                        "and nothing was appended",
                        path=self._segment_path(),
                        offset=size,
                        lsn=first,
                    ) from error
            self._size = size + len(data)
            self.appended_bytes += len(data)
            self._next_lsn = first + count
            self._last_commit_us, self._busy = commit_us, True
            if size - self._last_indexed >= self._index_interval_bytes:
                previous, self._last_indexed = self._last_indexed, size
                self._pending_index.append(INDEX_ENTRY.pack(first, size))
                if not gather and not self._flush():  # the entry (the frames are written)
                    self._last_indexed = previous  # dropped: the next append tries again
            if gather:
                if self._pending_bytes >= gather:
                    self._flush()
            elif self._fsync_always:
                self._fdatasync(self._fd, first + count - 1)
            else:
                self._dirty = True
        finally:
            self._release()
        return first

    def flush(self) -> None:
        """Write the appends gathered in memory (``WriterOptions.write_buffer_bytes``), so
        readers see them; a no-op without gathering.

        Raises:
            UnavailableError: the writer stopped (an earlier failure, or this write).
        """
        with self._lock:
            self._check_usable()
            self._flush()

    def _flush(self) -> bool:
        """Write the gathered appends with one ``write``, then their index entries (lock
        held); whether the entries were written (the index is advisory: a failed write
        drops them, not the log). The appends were acknowledged already, so a failed write
        of them stops the writer for good (what it left is a torn tail the next writer
        cuts)."""
        pending = self._pending
        if pending:
            data = b"".join(pending)
            pending.clear()
            self._pending_bytes = 0
            try:
                write_all(self._fd, data)
            except OSError as error:
                self._fail(
                    f"a write of {len(data)} bytes of appended records failed ({error.strerror})",
                    error,
                )
            self._dirty = True
        if self._pending_index:
            entries = b"".join(self._pending_index)
            self._pending_index.clear()
            try:
                write_all(self._index_fd, entries)
            except OSError as error:
                self._undo_write(self._index_fd, None, error, "index")
                return False
        return True

    def _segment_path(self) -> str:
        return segment_path(self.shard_dir, self._base_lsn)

    def _undo_write(self, fd: int, size: int | None, error: OSError, what: str) -> None:
        """Cut what a failed ``write`` left (a partial frame or index entry) at ``size`` (the
        index: at its last whole entry). If even that fails, the writer stops for good."""
        try:
            if size is None:
                size = os.fstat(fd).st_size // INDEX_ENTRY.size * INDEX_ENTRY.size
            os.ftruncate(fd, size)
        except OSError as undo:
            self._fail(
                f"a {what} write failed ({error.strerror}) and could not be undone "
                f"({undo.strerror})",
                error,
            )

    def _fdatasync(self, fd: int, last_lsn: int) -> None:
        """fdatasync, or stop for good: after a failed fdatasync nothing says what reached
        the disk, and a retry may report success for data it lost (PostgreSQL's "Fsync
        Errors", https://wiki.postgresql.org/wiki/Fsync_Errors)."""
        try:
            os.fdatasync(fd)
        except OSError as error:
            self._fail(
                f"fdatasync failed ({error.strerror}): records up to LSN {last_lsn} may not "
                "be durable",
                error,
            )

    def _fail(self, message: str, cause: BaseException) -> None:
        self._failed = UnavailableError(
            f"the writer stopped: {message}; close it and open a new writer, which recovers "
            "the log from what is on disk",
            path=self.shard_dir,
        )
        self._failed.__cause__ = cause
        raise self._failed

    @property
    def usable(self) -> bool:
        """Whether appends are possible: the writer is open and has not stopped on a failure."""
        return self._failed is None and self._fd >= 0

    def _check_usable(self) -> None:
        if self._failed is not None:
            raise self._failed
        if self._fd < 0:
            raise InvalidArgumentError("the writer is closed", path=self.shard_dir)

    def _rotate(self) -> None:
        self._flush()
        if self.options.fsync is not FsyncPolicy.NEVER:
            self._fdatasync(self._fd, self._next_lsn - 1)
        fd, index_fd = self._fd, self._index_fd
        self._fd = self._index_fd = -1
        os.close(fd)
        os.close(index_fd)
        self._dirty = False
        try:
            self._create_segment(self._next_lsn)
        except OSError as error:
            self._fail(f"a new segment could not be created ({error.strerror})", error)
        if self.options.on_rotate is not None:
            self.options.on_rotate(self._base_lsn)

    # -- durability and closing ------------------------------------------------------------

    def sync(self) -> None:
        """Force everything appended so far to stable storage (fdatasync).

        Raises:
            UnavailableError: the writer stopped (an earlier failure, or this fdatasync).
        """
        with self._lock:
            self._check_usable()
            self._flush()
            self._fdatasync(self._fd, self._next_lsn - 1)
            self._dirty = False

    def sync_descriptor(self) -> tuple[int, int]:
        """Write the gathered appends, and open the newest segment again (read-only) for
        another process to sync: an ``fdatasync`` of the returned descriptor makes every
        record of that segment up to the returned LSN durable. The caller closes it.

        A file description of its own: a writeback error that its sync reports is reported
        to this writer's next fdatasync as well (Linux's ``errseq_t``: every description open
        when the error happened sees it), so this writer still stops on it.

        Raises:
            InvalidArgumentError: the writer is closed.
            UnavailableError: the writer stopped on a failure, or the segment could not be
                opened.
        """
        with self._lock:
            self._check_usable()
            self._flush()
            path = self._segment_path()
            try:
                return os.open(path, os.O_RDONLY), self._next_lsn - 1
            except OSError as error:
                raise UnavailableError(
                    f"the newest segment could not be opened to sync it ({error.strerror})",
                    path=path,
                ) from error

    def heartbeat(self) -> int:
        """Close time now: promise (in ``heartbeat.json``, fsynced) that every later record
        has a commit time at or after the returned one (µs since the Unix epoch), the
        clock's time or the last record's, whichever is later. Runs every
        ``options.heartbeat_ms`` on its own; call it to close time at a moment of your own.

        Raises:
            UnavailableError: the writer is closed or stopped on a failure.
            OSError: the file could not be written (nothing was promised).
        """
        with self._lock:
            self._check_usable()
            return self._close_time()

    def _close_time(self) -> int:
        self._flush()  # no gathered record has a commit time below the promise
        closed_us = max(self._clock.now_us(), self._last_commit_us)
        self._last_commit_us = closed_us  # kept from now on (before the file can be seen)
        store_closed_time(self.shard_dir, ClosedTime(self.shard_id, self._next_lsn, closed_us))
        return closed_us

    def _heartbeat_loop(self) -> None:
        interval_s = (self.options.heartbeat_ms or 0) / 1000
        while not self._stop.wait(interval_s):
            if self._busy:  # appends move the bound themselves; close time when idle
                self._busy = False
                continue
            try:
                self.heartbeat()
            except (MoonishError, OSError):
                return  # a closed or stopped writer, or a full disk: readers' watermarks wait

    def _sync_loop(self) -> None:
        interval_s = self.options.fsync_interval_ms / 1000
        while not self._stop.wait(interval_s):
            try:
                with self._lock:
                    unsynced = self._take_unsynced()
                if unsynced is None:
                    continue
                fd, last = unsynced
                try:
                    self._fdatasync(fd, last)
                finally:
                    os.close(fd)
            except UnavailableError:
                return  # the next append raises it

    def _take_unsynced(self) -> tuple[int, int] | None:
        """Under the lock: flush the gathered appends; if anything is unsynced, a duplicate of
        the segment's descriptor and the last LSN to sync (the caller syncs it and closes the
        duplicate outside the lock)."""
        if self._fd < 0 or self._failed is not None:
            return None
        self._flush()
        if not self._dirty:
            return None
        fd, last = os.dup(self._fd), self._next_lsn - 1
        self._dirty = False
        return fd, last

    def close(self) -> None:
        """Sync, close the segment, record the end of the log in control.json and release the
        shard lock. Idempotent. A writer that stopped on a failure releases everything but
        leaves control.json saying it did not close, so the next writer recovers.

        Raises:
            UnavailableError: the final fdatasync failed (everything is released anyway).
        """
        self._stop.set()
        for thread in (self._syncer, self._heartbeat):
            if thread is not None:
                thread.join()
        with self._lock:
            if self._lock_fd < 0:
                return
            try:
                if self._fd >= 0 and self._failed is None:
                    self._flush()
                    self._fdatasync(self._fd, self._next_lsn - 1)
                    self._close_time()
                    store_control(
                        self.shard_dir,
                        Control(self.shard_id, self._next_lsn, True, self._discarded, self._torn),
                    )
            finally:
                for fd in (self._fd, self._index_fd, self._lock_fd):
                    if fd >= 0:
                        os.close(fd)
                self._fd = self._index_fd = self._lock_fd = -1

    def __enter__(self) -> WalWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
