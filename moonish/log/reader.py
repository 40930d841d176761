"""The tail reader: committed frames of one shard from any LSN, safe while the writer appends.

What a reader sees:

- Frames in LSN order, each once, only committed ones: a batch appears whole or not at all.
- ``poll`` re-reads the segment size on every call, so it sees appends as they land, and moves
  to the next segment when the current one is finished (the next segment is named after the
  LSN that follows the last record of the current one).
- A torn tail at the end of the active segment (what an interrupted append leaves; the rule is
  moonish.log.frames, ``is_torn_tail``) is "nothing yet": ``poll`` returns ``[]`` and the
  position does not move. Anything else is damage and raises
  :class:`~moonish.errors.CorruptionError` naming the file, byte offset and LSN. Valid frames
  before the damage are returned first and the position stays right after them; the error
  comes on the next call, and again on every call until the damage is repaired.
- Nothing is decided on bytes read before a stop: a new writer may have cut a torn tail and
  written other records there. A directory listing is no snapshot (it can miss a segment
  created just before one it holds), so a gap is only reported after the segment named after
  the next LSN was looked up by name.
- ``control.json`` (moonish.log.control) is read only where the segments cannot answer: at the
  end of the log (a range ``wal repair`` discarded, records lost from the end), at a gap, and
  when no segment is left.
- Discarded LSNs: a reader that reaches a range ``wal repair`` discarded gets
  :class:`~moonish.errors.LsnDiscardedError`; so does one positioned inside a range a writer
  cut as a torn tail (it read records that are gone), while one positioned at the first LSN
  of such a range (it read none of them) goes on after it: LSNs then skip, as they do in the
  envelopes' ``source.lsn`` past a position marker.
- ``seek`` costs a directory listing, a binary search over segment names, a binary search in
  that segment's sparse index, then a scan of at most one index interval (64 KiB by default).

Example::

    reader = ShardReader("data/shard-0")
    reader.seek(1)
    frames = reader.poll(256)          # [] when nothing new
    cursor = reader.next_lsn           # pass back to seek() to resume
"""

from __future__ import annotations

import bisect
import os
import time

from moonish.errors import (
    CorruptionError,
    LsnDiscardedError,
    LsnNotRetainedError,
    MoonishError,
)
from moonish.log.control import (
    Control,
    beyond_end,
    control_path,
    load_control,
    log_floor,
    lost_end,
)
from moonish.log.format import SEGMENT_HEADER_BYTES
from moonish.log.frames import (
    LATEST,
    LAYOUTS,
    Frame,
    StopKind,
    is_torn_tail,
    scan_frames,
)
from moonish.log.segment import (
    decode_segment_header,
    index_hint,
    index_path,
    list_segments,
    read_index,
    require_shard_dir,
    segment_path,
)

READ_CHUNK_BYTES = 1024 * 1024
EDGE_LISTING_INTERVAL_S = 1.0
"""At the end of the log, how often a reader lists the shard directory (s). A segment that
starts at the next LSN is found by one stat on every poll; what only a listing shows (a newer
segment that does not start there: damage) is found within this interval. Listing on every
poll would make a follower's cost per poll grow with the number of segments."""
HEADER_READ_BYTES = 4096
"""Bytes read to decode a segment header (a later version may have a longer one)."""
_NEEDS_MORE = (StopKind.SHORT, StopKind.OPEN_BATCH)


class ShardReader:
    """Reads one shard's committed frames from a position. Not thread-safe.

    Args:
        shard_dir: the shard directory (``<data_dir>/shard-<k>``).

    Raises:
        InvalidArgumentError: ``shard_dir`` does not exist or is not a shard directory.
    """

    def __init__(self, shard_dir: str | os.PathLike[str]) -> None:
        self.shard_dir = require_shard_dir(shard_dir)
        self.shard_id: int | None = None
        self._fd = -1
        self._base: int | None = None
        self._path = ""
        self._offset = 0
        self._next_lsn = 1
        self._mid_batch = False
        self._layout = LATEST
        self._buf, self._buf_start = b"", 0
        self._control: Control | None = None
        self._control_key: tuple[int, int, int] | None = None
        self._edge_listed_at: float | None = None  # time.monotonic() of a listing that
        # found no newer segment at the end of the log
        self._checked_from: tuple[int, int] | None = None
        self.held_back: MoonishError | None = None
        """The error that stopped the last poll after it had frames (see :meth:`poll`)."""

    @property
    def next_lsn(self) -> int:
        """The LSN of the next record ``poll`` will return: the cursor to resume from."""
        return self._next_lsn

    # -- positioning -----------------------------------------------------------------------

    def seek(self, lsn: int) -> None:
        """Position at ``lsn`` (0 and 1 both mean the first record of the shard).

        Raises:
            LsnNotRetainedError: ``lsn`` is older than the oldest retained LSN (carries it),
                also when every segment was removed (the log's end survives in control.json).
            LsnDiscardedError: ``lsn`` was cut out by ``moonish wal repair`` (carries where
                the log continues).
            InvalidArgumentError: ``lsn`` is beyond the end of the log (past the next LSN).
            CorruptionError: the segment that holds ``lsn`` is damaged before it.

        On an error the reader keeps its previous position (with no segment open; the next
        ``poll`` positions again, and meets the error again if it still holds).
        """
        previous = self._next_lsn
        try:
            self._seek(lsn)
        except BaseException:
            self._close_segment()
            self._next_lsn, self._mid_batch = previous, False
            raise

    def _seek(self, lsn: int) -> None:
        target = max(lsn, 1)
        self._close_segment()
        self._next_lsn, self._mid_batch = 1, False
        bases = list_segments(self.shard_dir)
        if not bases:
            self._next_lsn = log_floor(self.shard_dir, self._load_control())
            if target < self._next_lsn:
                raise LsnNotRetainedError(lsn, self._next_lsn, path=self.shard_dir)
            if target > self._next_lsn:
                raise beyond_end(self._control, self._next_lsn, self.shard_dir, lsn)
            return
        if target < bases[0]:
            raise LsnNotRetainedError(lsn, bases[0], path=self.shard_dir)
        base = bases[bisect.bisect_right(bases, target) - 1]
        while True:
            self._open_segment(base)
            self._offset, self._next_lsn = index_hint(
                self._fd, self._layout.trailer, self.shard_dir, base, target
            )
            while self._next_lsn < target:
                if not self._fetch(target - self._next_lsn):
                    break
            nxt = self._next_lsn
            if (
                nxt >= target
                or nxt == base
                or not os.path.exists(segment_path(self.shard_dir, nxt))
            ):
                break
            # A listing is no snapshot: during quick rotations it can miss a segment created
            # before one it holds. The segment named after the next LSN is the truth.
            self._close_segment()
            base = nxt
        if self._next_lsn < target:
            # control.json is read only here, where the segments alone cannot answer
            control = self._load_control()
            span = control.discarded_range(target) if control is not None else None
            if span is not None:
                raise LsnDiscardedError(lsn, *span, path=self.shard_dir)
            later = [b for b in list_segments(self.shard_dir) if b > base]
            if target in later or os.path.exists(segment_path(self.shard_dir, target)):
                return self._seek(lsn)  # created after the first listing, after discarded LSNs
            if later:
                raise CorruptionError(
                    f"no segment starts at LSN {self._next_lsn}: this segment ends at LSN "
                    f"{self._next_lsn - 1} and the next one starts at LSN {later[0]}",
                    path=self._path,
                    offset=self._offset,
                    lsn=self._next_lsn,
                )
            if (
                control is not None
                and target == control.end_after(self._next_lsn) > self._next_lsn
                and os.fstat(self._fd).st_size == self._offset
            ):  # the log continues after a discarded range, in a segment not yet created
                self._close_segment()
                self._next_lsn = target
                return
            raise beyond_end(self._control, self._next_lsn, self.shard_dir, lsn)

    def _load_control(self) -> Control | None:
        """The shard's control file, read again only when it was replaced (one stat)."""
        try:
            stat = os.stat(control_path(self.shard_dir))
        except FileNotFoundError:
            self._control, self._control_key = None, None
            return None
        key = (stat.st_ino, stat.st_mtime_ns, stat.st_size)
        if key != self._control_key:
            self._control, self._control_key = load_control(self.shard_dir), key
        return self._control

    def seek_end(self) -> int:
        """Position after the last committed record; returns the bytes of torn tail after it.

        Scans the newest segment from its last verified index entry. When the log continues
        after a range ``moonish wal repair`` discarded (no segment holds its next LSN yet), or
        holds no segment at all, the position is the next LSN control.json gives.

        Raises:
            CorruptionError: the newest segment is damaged after its last index entry.
        """
        self._close_segment()
        self._next_lsn, self._mid_batch, self._checked_from = 1, False, None
        control = self._load_control()
        bases = list_segments(self.shard_dir)
        if not bases:
            self._next_lsn = log_floor(self.shard_dir, control)
            return 0
        self._open_segment(bases[-1])
        entries = read_index(index_path(self.shard_dir, bases[-1]))
        if entries:
            self._offset, self._next_lsn = index_hint(
                self._fd, self._layout.trailer, self.shard_dir, bases[-1], entries[-1][0]
            )
        self._checked_from = (self._offset, self._next_lsn)
        while self._fetch(1 << 30):
            pass
        torn = os.fstat(self._fd).st_size - self._offset
        if control is not None and control.end_after(self._next_lsn) > self._next_lsn and not torn:
            self._close_segment()
            self._next_lsn = control.next_lsn
        elif self._end_lost():
            while self._fetch(1 << 30):  # a writer's last appends land before control.json
                pass
            torn = os.fstat(self._fd).st_size - self._offset
            if self._end_lost():
                raise lost_end(self._control, self._next_lsn, self._path, self._offset)
        return torn

    @property
    def checked_from(self) -> tuple[int, int] | None:
        """After :meth:`seek_end`: ``(offset, lsn)`` in the newest segment where its scan
        began (the last verified index entry, else the first record), or ``None``."""
        return self._checked_from

    def _open_segment(self, base: int) -> None:
        path = segment_path(self.shard_dir, base)
        try:
            fd = os.open(path, os.O_RDONLY)
        except FileNotFoundError:  # removed (retention) since the directory was listed
            bases = list_segments(self.shard_dir)
            later = [b for b in bases if b > base]
            oldest = (
                later[0]
                if later
                else max(log_floor(self.shard_dir, self._load_control()), base + 1)
            )
            raise LsnNotRetainedError(base, oldest, path=self.shard_dir) from None
        try:
            header = decode_segment_header(os.pread(fd, HEADER_READ_BYTES, 0), path, base)
        except BaseException:
            os.close(fd)
            raise
        if self.shard_id is not None and header.shard_id != self.shard_id:
            os.close(fd)
            raise CorruptionError(
                f"segment belongs to shard {header.shard_id}, not shard {self.shard_id}",
                path=path,
                offset=12,
                lsn=base,
            )
        self.shard_id = header.shard_id
        self._fd, self._base, self._path = fd, base, path
        self._layout = LAYOUTS[header.version]
        self._buf, self._buf_start = b"", 0
        self._offset, self._next_lsn, self._mid_batch = SEGMENT_HEADER_BYTES, base, False

    def _close_segment(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
        self._fd, self._base = -1, None
        self._buf, self._buf_start = b"", 0

    def close(self) -> None:
        """Release the open segment file. The reader can be re-positioned with ``seek``."""
        self._close_segment()

    def __enter__(self) -> ShardReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # A reader dropped without close() must not keep its segment open: descriptors are
        # plain ints here, which nothing else would ever close.
        if getattr(self, "_fd", -1) >= 0:
            os.close(self._fd)

    # -- reading ---------------------------------------------------------------------------

    def poll(self, max_records: int, *, whole_batches: bool = False) -> list[Frame]:
        """Up to ``max_records`` committed frames after the current position, in LSN order
        (with ``whole_batches``, more rather than part of an atomic batch: the last batch is
        returned whole, so a caller can hold a batch back whole).

        Returns ``[]`` when there is nothing new. Advances the position past what it returns,
        and only past that: when damage stops a poll that has frames, the frames are returned
        and the position stays right after them, so the next poll meets the damage again and
        raises; once the damage is repaired, polling continues with the next record.

        Raises:
            CorruptionError: damage that is not a torn tail of the active segment (a bad
                frame, a bad segment header, a gap between segments).
            UnsupportedFormatError: the next segment is of a version this build does not read.
            LsnNotRetainedError: the next segment was removed (by retention) before it was read.

        When an error stops a poll that has frames, ``held_back`` names it (else ``None``):
        the frames are not the end of the log.
        """
        frames: list[Frame] = []
        self.held_back = None
        try:
            while len(frames) < max_records:
                got = self._fetch(max_records - len(frames), whole_batches) if self._fd >= 0 else []
                if got:
                    frames.extend(got)
                elif not self._next_segment():
                    break
        except MoonishError as error:
            if frames:
                self.held_back = error  # the valid frames first; the next poll raises again
                return frames
            raise
        return frames

    def _fetch(self, max_records: int, whole_batches: bool = False) -> list[Frame]:
        """Committed frames from the current position in the current segment.

        Reads through a read-ahead buffer of ``READ_CHUNK_BYTES`` (more for a large frame or
        batch), so consecutive polls do not re-read the file. Only committed frames are taken
        from an older buffer (a writer never cuts those); where scanning stops, the bytes are
        read again before anything is decided, since a new writer may have cut a torn tail
        and written over it. Decisions about a torn tail are only taken on bytes that run to
        the current end of the file.
        """
        fd, offset = self._fd, self._offset
        size = os.fstat(fd).st_size
        want = READ_CHUNK_BYTES
        fresh = False  # whether ``buf`` was read by this call
        rechecked = False  # whether the tail was read again after a writer seemed done
        while offset < size:
            buf, start = self._buf, self._buf_start
            if not start <= offset < start + len(buf):
                asked = min(want, size - offset)
                buf, start = os.pread(fd, asked, offset), offset
                self._buf, self._buf_start, fresh = buf, start, True
                if len(buf) < asked:  # a new writer cut the file since the fstat
                    size = start + len(buf)
            frames, end, stop = scan_frames(
                buf,
                offset - start,
                self._next_lsn,
                max_records,
                layout=self._layout,
                mid_batch_start=self._mid_batch,
                file_offset=start,
            )
            if frames:
                if len(frames) > max_records and not whole_batches:
                    rest = frames[max_records]
                    del frames[max_records:]
                    self._offset, self._next_lsn, self._mid_batch = rest.offset, rest.lsn, True
                else:
                    self._offset, self._next_lsn = start + end, frames[-1].lsn + 1
                    self._mid_batch = False
                return frames
            if start + len(buf) < size:  # decide nothing before the bytes reach the end
                if stop is None or stop.kind in _NEEDS_MORE:
                    if start == offset and stop is not None:  # a frame outgrew the buffer
                        want = max(want * 2, (stop.frame_end or 0) - offset)
                else:
                    want = size - offset  # damage or a torn tail: judge it on every byte
                self._buf = b""
                continue
            if stop is None:
                return []
            if not fresh:
                # Decide only on bytes read now: since the buffer was read, a new writer may
                # have cut a torn tail and written other records over the same offsets.
                self._buf = b""
                continue
            if not is_torn_tail(
                buf[offset - start :],
                self._next_lsn,
                self._layout,
                offset,
                mid_batch_start=self._mid_batch,
            ):
                raise CorruptionError(
                    stop.describe(), path=self._path, offset=stop.offset, lsn=stop.lsn
                )
            sealed = self._sealed()
            if not sealed and not self._end_lost():
                return []  # nothing yet: a record being appended, or a writer that died
            if self._moved():
                return []  # _next_segment positions again on the file now under this name
            if not rechecked:
                # A newer segment, or a control.json that says the log goes further: a writer
                # finished (or cut and rewrote) this tail before it rotated or closed, which
                # it does only after its appends. Read once more, now, before believing it.
                rechecked, size, self._buf = True, os.fstat(fd).st_size, b""
                continue
            if not sealed:
                raise lost_end(self._control, self._next_lsn, self._path, self._offset)
            raise CorruptionError(
                f"{stop.describe()} in a sealed segment (a newer one exists)",
                path=self._path,
                offset=stop.offset,
                lsn=stop.lsn,
            )
        return []

    def _moved(self) -> bool:
        """Whether the open segment's name no longer names the file this reader reads: it was
        removed (retention, a repair) or replaced (a writer that continued a version 1 shard
        whose newest segment held no record writes a new one under the same name)."""
        if self._fd < 0:
            return False
        try:
            named = os.stat(self._path)
        except FileNotFoundError:
            return True
        mine = os.fstat(self._fd)
        return (named.st_ino, named.st_dev) != (mine.st_ino, mine.st_dev)

    def _reposition(self) -> bool:
        """Position again at the next LSN (after :meth:`_moved`); True when a segment holds
        it now, False when the log is idle there. Raises as :meth:`seek`
        (``LsnNotRetainedError`` when retention removed what comes next)."""
        self.seek(self._next_lsn)
        return self._fd >= 0

    def _end_lost(self) -> bool:
        """Whether control.json says the log had reached further than the end of the newest
        segment, where this reader stands (read only here, at the end of the log). The
        caller looks at the segments once more before it believes it: a writer writes
        control.json after its last append, so what it says is then visible."""
        control = self._load_control()
        return control is not None and control.lost_after(self._next_lsn)

    def _newer_segments(self) -> list[int]:
        current = -1 if self._base is None else self._base
        return [base for base in list_segments(self.shard_dir) if base > current]

    def _newer_at_edge(self) -> list[int]:
        """Segments after the current one, from a listing at most every
        :data:`EDGE_LISTING_INTERVAL_S` while the previous one found none (``[]`` between)."""
        now = time.monotonic()
        listed = self._edge_listed_at
        if listed is not None and now - listed < EDGE_LISTING_INTERVAL_S:
            return []
        newer = [base for base in list_segments(self.shard_dir) if base > (self._base or 0)]
        self._edge_listed_at = None if newer else now
        return newer

    def _sealed(self) -> bool:
        """Whether a newer segment exists, so the current one is final (torn = damage)."""
        return bool(self._newer_segments())

    def _next_segment(self) -> bool:
        """Move to the segment that starts at the next LSN once the current one is finished;
        False when there is nothing more to read yet.

        The writer appends the last record of a segment before it creates the next one, so
        the current segment is re-checked after the directory listing: a writer that filled
        it and rotated meanwhile leaves more to read here, not a gap. With no segment open,
        it positions again at the next LSN (:meth:`seek`).

        Raises:
            CorruptionError: a newer segment exists but none starts at the next LSN; the
                newest segment ends before the end control.json records.
            LsnNotRetainedError: the next LSN's segment was removed (retention).
            LsnDiscardedError: the next LSN was cut out by ``moonish wal repair``.
        """
        if self._fd < 0:  # no segment open (none was, or an error closed it): position
            self.seek(self._next_lsn)
            return self._fd >= 0
        if os.fstat(self._fd).st_size > self._offset:
            # bytes we could not take yet (a torn tail or a record in flight): stay, unless
            # the segment was replaced or removed under us
            return self._reposition() if self._moved() else False
        nxt = self._next_lsn
        if nxt != self._base and os.path.exists(segment_path(self.shard_dir, nxt)):
            newer = [nxt]  # the common case: one stat, no listing
        else:
            newer = self._newer_at_edge()
            if newer and os.fstat(self._fd).st_size > self._offset:
                return True  # the writer added to this segment (then rotated): read the rest
            control = self._load_control()
            span = control.discarded_range(nxt) if control is not None else None
            if span is not None:
                assert control is not None
                passed = control.passed_at(nxt)
                if passed is None:
                    raise LsnDiscardedError(nxt, *span, path=self.shard_dir)
                self.seek(passed)  # a torn tail cut after what this reader read: go on
                return self._fd >= 0
            if not newer:
                if self._moved():
                    return self._reposition()
                if self._end_lost():
                    if os.fstat(self._fd).st_size > self._offset or self._sealed():
                        return True  # the writer appended (or rotated), then closed
                    raise lost_end(self._control, self._next_lsn, self._path, self._offset)
                return False
        if (
            newer[0] != nxt
            and nxt != self._base
            and os.path.exists(segment_path(self.shard_dir, nxt))
        ):
            newer = [nxt]  # a listing is no snapshot: it can miss a segment created before one
        if newer[0] != nxt:  # it holds (ext4, during two quick rotations): look once more
            if self._moved():  # retention removed this segment and the next
                return self._reposition()
            raise CorruptionError(
                f"no segment starts at LSN {nxt}: this segment ends at LSN {nxt - 1} and the "
                f"next one starts at LSN {newer[0]}",
                path=self._path,
                offset=self._offset,
                lsn=nxt,
            )
        self._close_segment()
        self._open_segment(nxt)
        return True
