"""``moonish wal repair``: an operator's explicit choices when a shard cannot go on by itself.

The writer never cuts more than an interrupted append leaves (moonish.log.frames,
``is_torn_tail``); damage stops it with the offset to cut at. Cutting there is a decision that
discards records, so it is a command of its own, under the writer lock, that says exactly what
it discards before (``dry_run``) and after it does it:

- :func:`truncate_at` cuts a segment at a record boundary and removes every later segment.
  The LSNs of what it removes (as far as any frame header whose checksum holds, the damaged
  frame's own included, any index entry, later segment, snapshot, control.json or the last
  heartbeat shows they were used: moonish.log.used, moonish.log.heartbeat) are recorded as
  *discarded* in control.json: the next writer continues after them, and a reader that
  reaches them gets
  :class:`~moonish.errors.LsnDiscardedError` naming where the log continues. An LSN is never
  given to a second record (Kafka's unclean leader election and PostgreSQL's ``pg_resetwal``
  can reuse positions; moonish does not).
- :func:`set_next_lsn` tells the writer where to continue when nobody can know: every segment
  was removed after a writer died, or records a writer recovered were lost from the end of
  the log. LSNs between the end of the log and the chosen one are discarded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from dataclasses import dataclass

from moonish.errors import CorruptionError, InvalidArgumentError, UnsupportedFormatError
from moonish.fileio import fsync_dir, write_all
from moonish.log.control import Control, load_control, store_control
from moonish.log.format import FRAME_HEADER, INDEX_ENTRY, SEGMENT_HEADER_BYTES, segment_name
from moonish.log.frames import (
    LATEST,
    LAYOUTS,
    FrameLayout,
    is_torn_tail,
    next_intact_frame,
    scan_frames,
)
from moonish.log.heartbeat import heard_lsn
from moonish.log.lock import lock_shard
from moonish.log.segment import (
    decode_segment_header,
    index_path,
    list_segments,
    list_snapshots,
    read_index,
    require_shard_dir,
    segment_path,
    shard_id_from_headers,
)
from moonish.log.used import highest_indexed_lsn, highest_named_lsn


@dataclass(frozen=True, slots=True)
class RepairReport:
    """What a repair did (or, with ``dry_run``, would do).

    Attributes:
        shard_dir: the shard.
        dry_run: nothing was changed.
        cut_segment: the segment cut (file name), or ``None``.
        cut_offset: the byte offset it was cut at (0: removed whole), or ``None``.
        removed_segments: later segments removed whole (file names).
        discarded_bytes: bytes of segment data removed.
        intact_records_discarded: records among them whose frames were intact.
        discarded: the LSN range ``(first, last)`` newly discarded, or ``None``.
        next_lsn: where the next writer continues.
    """

    shard_dir: str
    dry_run: bool
    cut_segment: str | None
    cut_offset: int | None
    removed_segments: list[str]
    discarded_bytes: int
    intact_records_discarded: int
    discarded: tuple[int, int] | None
    next_lsn: int

    def to_json(self) -> dict[str, object]:
        return {
            "shard_dir": self.shard_dir,
            "dry_run": self.dry_run,
            "cut_segment": self.cut_segment,
            "cut_offset": self.cut_offset,
            "removed_segments": self.removed_segments,
            "discarded_bytes": self.discarded_bytes,
            "intact_records_discarded": self.intact_records_discarded,
            "discarded_lsns": list(self.discarded) if self.discarded else None,
            "next_lsn": self.next_lsn,
        }


def truncate_at(
    shard_dir: str | os.PathLike[str],
    offset: int,
    *,
    segment_base: int | None = None,
    dry_run: bool = False,
) -> RepairReport:
    """Cut a segment at ``offset`` (bytes) and remove every later segment.

    Args:
        shard_dir: the shard directory.
        offset: where to cut: the end of a committed record or batch (the writer's error
            names it), the end of the segment header (keep no record), 0 (remove the segment
            whole, for a damaged segment header), or the start of a frame of the atomic batch
            the damage is in (``wal verify`` names the damaged frame): a batch is all or
            nothing, so the cut is then at the start of that batch (``cut_offset``).
        segment_base: the base LSN of the segment to cut; default the newest.
        dry_run: only report.

    Raises:
        InvalidArgumentError: no such segment; ``offset`` is not a record boundary.
        WriterLockedError: a writer holds the shard.
        CorruptionError: the segment's header is damaged and ``offset`` is not 0.
    """
    path = require_shard_dir(shard_dir)
    lock = lock_shard(path)
    try:
        bases = list_segments(path)
        base = bases[-1] if segment_base is None and bases else segment_base
        if base is None or base not in bases:
            raise InvalidArgumentError(
                f"no segment {segment_name(base or 0)} in the shard", path=path, lsn=base
            )
        seg = segment_path(path, base)
        with open(seg, "rb") as handle:
            data = handle.read()
        if offset == 0:
            first, kept = base, 0
            layout = _layout_or_none(data, seg, base)
        else:
            layout = LAYOUTS[decode_segment_header(data, seg, base).version]
            kept, first = _cut_point(data, offset, base, layout, seg)
        later = [b for b in bases if b > base]
        intact, last = _intact_after(data, kept, first, layout)
        last = max(last, _named_after(data, kept, first, base, layout))
        last = max(last, highest_indexed_lsn(path, base, kept))
        for b in later:
            count, top = _segment_records(path, b)
            intact, last = intact + count, max(last, top, highest_indexed_lsn(path, b, 0))
        control = load_control(path)
        snapshots = list_snapshots(path)
        last = max(
            last,
            first - 1,
            (control.next_lsn - 1) if control is not None else 0,
            snapshots[-1] if snapshots else 0,
            heard_lsn(path, None, first),  # the last heartbeat: readers may have read up to it
        )
        discarded = (first, last) if last >= first else None
        removed = sum(os.path.getsize(segment_path(path, b)) for b in later)
        report = RepairReport(
            path,
            dry_run,
            segment_name(base),
            kept,
            [segment_name(b) for b in later],
            len(data) - kept + removed,
            intact,
            discarded,
            last + 1,
        )
        if dry_run:
            return report
        # control.json first: a repair cut short by a crash must still never let those LSNs
        # be written again (running it again finishes the cut)
        shard = control.shard if control is not None else _shard_id(path, bases)
        kept_control = control if control is not None else Control(shard, 1, True)
        updated = kept_control.with_discarded(discarded)
        store_control(path, dataclasses.replace(updated, next_lsn=last + 1, clean=True))
        for b in reversed(later):
            os.unlink(segment_path(path, b))
            _unlink(index_path(path, b))
        if offset == 0:
            os.unlink(seg)
            _unlink(index_path(path, base))
        else:
            _cut(seg, kept)
            entries = [entry for entry in read_index(index_path(path, base)) if entry[1] < kept]
            _rewrite_index(index_path(path, base), entries)
        fsync_dir(path)
        return report
    finally:
        os.close(lock)


def set_next_lsn(
    shard_dir: str | os.PathLike[str], next_lsn: int, *, dry_run: bool = False
) -> RepairReport:
    """Make the next writer continue at ``next_lsn``, discarding the LSNs between the end of
    the log and it (for a shard whose end is unknown or was lost: the writer says when).

    Raises:
        InvalidArgumentError: ``next_lsn`` is below the end of the log, below an LSN a
            snapshot, control.json or the last heartbeat shows was used, or out of range.
        CorruptionError: the newest segment is damaged (cut it with :func:`truncate_at`).
        WriterLockedError: a writer holds the shard.
    """
    path = require_shard_dir(shard_dir)
    if not 1 <= next_lsn < 2**63:
        raise InvalidArgumentError(f"next LSN must be between 1 and 2**63 - 1, got {next_lsn}")
    lock = lock_shard(path)
    try:
        try:
            control = load_control(path)
        except CorruptionError:
            control = None  # a damaged control file is what this command replaces
        bases = list_segments(path)
        snapshots = list_snapshots(path)
        end, shard = 1, control.shard if control is not None else _shard_id(path, bases)
        if bases:
            seg = segment_path(path, bases[-1])
            with open(seg, "rb") as handle:
                data = handle.read()
            header = decode_segment_header(data, seg, bases[-1])
            layout = LAYOUTS[header.version]
            frames, committed, stop = scan_frames(
                data, SEGMENT_HEADER_BYTES, bases[-1], len(data), layout=layout
            )
            end = frames[-1].lsn + 1 if frames else bases[-1]
            if stop is not None and not is_torn_tail(data[committed:], end, layout, committed):
                raise CorruptionError(
                    f"the newest segment is damaged ({stop.describe()}): cut it first with "
                    "--truncate-at",
                    path=seg,
                    offset=stop.offset,
                    lsn=stop.lsn,
                )
            shard = header.shard_id
        used = [end, snapshots[-1] + 1 if snapshots else 1, heard_lsn(path, None, end) + 1]
        if control is not None:
            used += [control.next_lsn, *(last + 1 for _, last in control.discarded)]
        lowest = max(used)
        if next_lsn < lowest:
            raise InvalidArgumentError(
                f"the next LSN must be at least {lowest} (the end of the log, or past an LSN "
                f"a snapshot, control.json or the last heartbeat shows was used), got {next_lsn}",
                path=path,
                lsn=next_lsn,
            )
        discarded = (end, next_lsn - 1) if bases and next_lsn > end else None
        report = RepairReport(path, dry_run, None, None, [], 0, 0, discarded, next_lsn)
        if not dry_run:
            kept_control = control if control is not None else Control(shard, 1, True)
            updated = kept_control.with_discarded(discarded)
            store_control(path, dataclasses.replace(updated, next_lsn=next_lsn, clean=True))
        return report
    finally:
        os.close(lock)


def _cut_point(
    data: bytes, offset: int, base: int, layout: FrameLayout, seg: str
) -> tuple[int, int]:
    """``(where to cut, the LSN of the first record cut)`` for ``offset``: the end of a
    committed record or batch, the end of the segment header, or the start of a frame of the
    batch the damage is in (cut at the start of that batch).

    Raises:
        InvalidArgumentError: ``offset`` is none of these.
    """
    frames, end, stop = scan_frames(data, SEGMENT_HEADER_BYTES, base, len(data), layout=layout)
    boundaries = {SEGMENT_HEADER_BYTES: base}
    for i, frame in enumerate(frames):
        if frame.batch_index + 1 == frame.batch_size:
            after = frames[i + 1].offset if i + 1 < len(frames) else end
            boundaries[after] = frame.lsn + 1
    if offset in boundaries:
        return offset, boundaries[offset]
    if stop is not None and end < offset <= stop.offset:
        pos = end  # the frames the scanner took from the open batch before it stopped
        while pos < offset:
            (length,) = FRAME_HEADER.unpack_from(data, pos)[1:2]
            pos += layout.overhead + length
        if pos == offset:
            return end, frames[-1].lsn + 1 if frames else base
    below = max((b for b in boundaries if b < offset), default=SEGMENT_HEADER_BYTES)
    above = min((b for b in boundaries if b > offset), default=None)
    raise InvalidArgumentError(
        f"offset {offset} is not where a record or batch ends (nearest: {below}"
        f"{f' and {above}' if above is not None else ''}); cutting there would leave "
        "part of a record",
        path=seg,
        offset=offset,
    )


def _named_after(data: bytes, pos: int, lsn: int, base: int, layout: FrameLayout | None) -> int:
    """The highest LSN from ``lsn`` on that a frame header after ``pos`` names (0 if none;
    moonish.log.used), read as version 2 where the segment header is too damaged to say."""
    return highest_named_lsn(data, pos, lsn, base, layout or LATEST)


def _intact_after(data: bytes, pos: int, lsn: int, layout: FrameLayout | None) -> tuple[int, int]:
    """``(count, highest LSN)`` of intact records after ``pos`` (past any damage)."""
    count, last = 0, 0
    if layout is None:
        return count, last
    pos = max(pos, SEGMENT_HEADER_BYTES)
    while pos < len(data):
        found = next_intact_frame(data, pos, lsn, layout)
        if found is None:
            break
        pos, lsn = found
        frames, end, _ = scan_frames(data, pos, lsn, len(data), layout=layout, mid_batch_start=True)
        if frames:
            count, last = count + len(frames), frames[-1].lsn
            pos, lsn = end, frames[-1].lsn + 1
        else:
            pos, lsn = pos + 1, lsn + 1  # an intact frame of a damaged batch: count past it
            count, last = count + 1, max(last, lsn - 1)
    return count, last


def _segment_records(shard_dir: str, base: int) -> tuple[int, int]:
    """``(intact records, highest LSN)`` of a whole later segment (damaged or not)."""
    seg = segment_path(shard_dir, base)
    with open(seg, "rb") as handle:
        data = handle.read()
    layout = _layout_or_none(data, seg, base)
    count, last = _intact_after(data, SEGMENT_HEADER_BYTES, base, layout)
    return count, max(last, base, _named_after(data, SEGMENT_HEADER_BYTES, base, base, layout))


def _layout_or_none(data: bytes, seg: str, base: int) -> FrameLayout | None:
    """The frame layout of a segment: by its header, or, when the header is damaged, the
    layout under which its first record is intact (``None``: no intact record found)."""
    try:
        return LAYOUTS[decode_segment_header(data, seg, base).version]
    except (CorruptionError, UnsupportedFormatError):
        pass
    for layout in sorted(LAYOUTS.values(), key=lambda each: -each.version):
        if next_intact_frame(data, SEGMENT_HEADER_BYTES, base, layout):
            return layout
    return None


def _shard_id(shard_dir: str, bases: list[int]) -> int:
    """The shard id the segments' headers carry (the first one that decodes), else 0."""
    found = shard_id_from_headers(shard_dir)
    return found if found is not None else 0


def _cut(seg: str, offset: int) -> None:
    fd = os.open(seg, os.O_WRONLY)
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def _rewrite_index(path: str, entries: list[tuple[int, int]]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, b"".join(INDEX_ENTRY.pack(*entry) for entry in entries))
        os.fsync(fd)
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
