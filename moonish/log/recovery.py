"""Where a shard's log ends, as a writer opening it must find it: the decisions of crash
recovery, taken before anything on disk is changed (moonish.log.writer then acts on them).

The rules (docs/wal-format.md, "Incomplete is not corrupt" and "The control file"):

- the newest segment is scanned (after a clean close, from the last batch its index names:
  the close synced every frame before it; see docs/wal-format.md "Opening a cleanly closed
  log"); what follows its last committed record must be a torn tail
  (moonish.log.frames, ``is_torn_tail``), the only thing the writer will cut; the LSNs its
  frame headers (and index entries past the cut) name were used, and are discarded
  (moonish.log.used): a reader in another process may have read them before the crash;
- the log must reach the end control.json records, unless a repair discarded the LSNs in
  between (the next append then starts after them, in a segment of its own);
- no segment may still hold LSNs control.json marks discarded (a repair cut short);
- no snapshot may cover records beyond the end of the log;
- with no segment left, the log continues where control.json says it ended; if the last
  writer did not close, nobody knows, and an operator must choose (``wal repair --next-lsn``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from moonish.errors import CorruptionError, InvalidArgumentError
from moonish.log.control import Control, control_path, load_control
from moonish.log.format import FRAME_HEADER, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES
from moonish.log.frames import LAYOUTS, Frame, header_checksum_holds, is_torn_tail, scan_frames
from moonish.log.heartbeat import heard_lsn
from moonish.log.segment import (
    decode_segment_header,
    index_path,
    list_segments,
    list_snapshots,
    read_index,
    segment_path,
)
from moonish.log.used import highest_indexed_lsn, highest_named_lsn


@dataclass(frozen=True, slots=True)
class LogEnd:
    """Where the log ends and where the next append goes.

    Attributes:
        shard_id: the shard's id (from its segments, control.json, or the options).
        control: control.json as found (``None``: none).
        newest: base LSN of the newest segment, ``None`` when there is none.
        version: its format version.
        committed_end: offset (bytes) after its last committed record; what follows, up to
            ``file_bytes``, is the torn tail the writer cuts.
        file_bytes: its size.
        next_lsn: the LSN after its last committed record.
        start: the LSN of the next append (``next_lsn``, or after discarded LSNs).
        frames: its committed frames from byte ``scanned_from`` on (the writer checks its
            index against them).
        cut: the LSNs ``(first, last)`` the torn tail's frame headers or index entries name,
            which the writer records as discarded before it cuts the tail (``None``: none).
    """

    shard_id: int
    control: Control | None
    newest: int | None
    version: int
    committed_end: int
    file_bytes: int
    next_lsn: int
    start: int
    frames: list[Frame] = field(default_factory=list)
    cut: tuple[int, int] | None = None
    scanned_from: int = SEGMENT_HEADER_BYTES


def find_log_end(shard_dir: str, shard_id: int | None) -> LogEnd:
    """Read the newest segment and control.json and check them (see the module docstring).

    Args:
        shard_dir: the shard directory.
        shard_id: the shard id the caller expects, or ``None`` to take the log's.

    Raises:
        CorruptionError: damage that is not a torn tail; a log that ends before the end
            control.json or a snapshot records; LSNs marked discarded still in a segment; no
            segment left and no way to know where the log ended.
        InvalidArgumentError: ``shard_id`` differs from the log's.
        UnsupportedFormatError: a segment of a version this build does not read.
    """
    control = load_control(shard_dir)
    bases = list_segments(shard_dir)
    if not bases:
        start, found_id = _start_without_segments(shard_dir, control, shard_id)
        check_snapshots(shard_dir, start)
        return LogEnd(found_id, control, None, 0, 0, 0, start, start)
    base = bases[-1]
    path = segment_path(shard_dir, base)
    with open(path, "rb") as handle:
        data = handle.read()
    try:
        header = decode_segment_header(data, path, base)
    except CorruptionError as error:
        raise CorruptionError(
            f"cannot open the writer: {error.message}; to remove the segment (the LSNs its "
            "frames, its index or control.json show were used are then never used again): "
            f"moonish wal repair {shard_dir} --truncate-at 0",
            path=error.path,
            offset=error.offset,
            lsn=error.lsn,
        ) from None
    _check_shard_id(shard_id, header.shard_id, path)
    layout = LAYOUTS[header.version]
    scanned_from = SEGMENT_HEADER_BYTES
    clean_hint = _clean_hint(data, shard_dir, base, control) if layout.trailer else None
    if clean_hint is not None:
        # a clean close left the segment whole: from its last indexed batch on, the frames
        # must reach the end of the file, or the whole segment is scanned after all
        offset, lsn = clean_hint
        frames, end, stop = scan_frames(data, offset, lsn, len(data), layout=layout)
        if stop is None and end == len(data):
            scanned_from = offset
    if scanned_from == SEGMENT_HEADER_BYTES:
        frames, end, stop = scan_frames(data, SEGMENT_HEADER_BYTES, base, len(data), layout=layout)
    next_lsn = frames[-1].lsn + 1 if frames else base
    if stop is not None and not is_torn_tail(data[end:], next_lsn, layout, end):
        raise CorruptionError(
            f"cannot open the writer: {stop.describe()}, and what follows the last committed "
            f"record (LSN {next_lsn - 1}) is not what an interrupted append leaves; to cut it "
            f"anyway (discarding every record from LSN {next_lsn} on, whose LSNs are then "
            f"never used again): moonish wal repair {shard_dir} --truncate-at {end}",
            path=path,
            offset=stop.offset,
            lsn=stop.lsn,
        )
    _check_repair_finished(shard_dir, control, bases, next_lsn)
    named = max(  # in a torn tail, or in index entries a truncation left behind
        highest_named_lsn(data, end, next_lsn, base, layout),
        highest_indexed_lsn(shard_dir, base, end),
        heard_lsn(shard_dir, control, next_lsn),  # a heartbeat past the end: readers saw them
    )
    cut = (next_lsn, named) if named >= next_lsn else None
    start = cut[1] + 1 if cut is not None else next_lsn
    if control is not None and control.next_lsn > next_lsn:
        if not (control.clean and control.covers(next_lsn, control.next_lsn - 1)):
            raise CorruptionError(
                f"the log ends at LSN {next_lsn - 1}, but it had reached LSN "
                f"{control.next_lsn - 1} (control.json): segments or records were removed "
                f"from its end; {_continue_after(shard_dir, control)}",
                path=path,
                lsn=next_lsn,
            )
        start = max(start, control.next_lsn)  # after discarded LSNs: a segment of its own
    check_snapshots(shard_dir, start)
    return LogEnd(
        header.shard_id,
        control,
        base,
        header.version,
        end,
        len(data),
        next_lsn,
        start,
        frames,
        cut,
        scanned_from,
    )


def _clean_hint(
    data: bytes, shard_dir: str, base: int, control: Control | None
) -> tuple[int, int] | None:
    """``(offset, LSN)`` of the last batch the newest segment's index names, when the last
    writer closed cleanly (control.json ``clean``) and every entry's frame header holds (its
    LSN, a batch's first frame, its checksum): the close synced every frame, so only what
    follows that batch needs reading to find the end. ``None``: scan the whole segment (a
    damaged index is then rebuilt, ``reopen_index``)."""
    if control is None or not control.clean:
        return None
    entries = read_index(index_path(shard_dir, base))
    last = len(data) - FRAME_HEADER_BYTES
    for lsn, offset in entries:
        if not SEGMENT_HEADER_BYTES <= offset <= last:
            return None
        fields = FRAME_HEADER.unpack_from(data, offset)
        if fields[2] != lsn or fields[6] != 0 or not header_checksum_holds(data, offset):
            return None
    return (entries[-1][1], entries[-1][0]) if entries else None


def _continue_after(shard_dir: str, control: Control) -> str:
    """The remedy for records lost from the end of the log: continue after the LSNs
    control.json shows were used (a writer that did not close may have gone further)."""
    command = f"moonish wal repair {shard_dir} --next-lsn"
    if control.clean:
        return (
            "to continue after them (their LSNs are then never used again): "
            f"{command} {control.next_lsn}"
        )
    return (
        f"the last writer started at LSN {control.next_lsn} and did not close, so how far it "
        "got is unknown; to continue past every LSN a consumer saw (the LSNs in between are "
        f"then never used again): {command} <lsn of at least {control.next_lsn}>"
    )


def _check_shard_id(expected: int | None, found: int, path: str) -> None:
    if expected is not None and expected != found:
        raise InvalidArgumentError(
            f"shard id {expected} was asked for, but the log is shard {found}", path=path
        )


def _start_without_segments(
    shard_dir: str, control: Control | None, shard_id: int | None
) -> tuple[int, int]:
    """``(first LSN, shard id)`` of a shard that holds no segment: 1 for a new shard, else
    where control.json says the log ended."""
    snapshots = list_snapshots(shard_dir)
    repair = f"moonish wal repair {shard_dir} --next-lsn <lsn>"
    if control is None:
        if snapshots:
            raise CorruptionError(
                f"the shard has no segment and no control file, but a snapshot at LSN "
                f"{snapshots[-1]}: its log was removed and where it ended is unknown; choose "
                f"the next LSN (past every LSN a consumer saw): {repair}",
                path=shard_dir,
                lsn=snapshots[-1] + 1,
            )
        return 1, shard_id or 0
    _check_shard_id(shard_id, control.shard, control_path(shard_dir))
    if not control.clean:
        raise CorruptionError(
            f"every segment was removed after a writer that started at LSN {control.next_lsn} "
            "stopped without closing: the LSNs it wrote are unknown, and writing them again "
            "would give consumers different records under the same LSNs; choose the next LSN "
            f"(past every LSN a consumer saw): {repair}",
            path=control_path(shard_dir),
            lsn=control.next_lsn,
        )
    return control.next_lsn, control.shard


def _check_repair_finished(
    shard_dir: str, control: Control | None, bases: list[int], end: int
) -> None:
    """Refuse a log that still holds LSNs control.json marks discarded: a ``wal repair``
    records them before it cuts, so a repair cut short leaves exactly this."""
    if control is None or not control.discarded:
        return
    for base in bases:
        if base == bases[-1]:
            last = end - 1
        else:  # a sealed segment that holds no record (its LSNs were cut) holds none of them
            last = (
                base if os.path.getsize(segment_path(shard_dir, base)) > SEGMENT_HEADER_BYTES else 0
            )
        for first_cut, last_cut in control.discarded:
            if base <= last_cut and last >= first_cut:
                path = segment_path(shard_dir, base)
                raise CorruptionError(
                    f"LSNs {first_cut}..{last_cut} are marked discarded in control.json, but "
                    f"segment {os.path.basename(path)} still holds some: a `moonish wal "
                    "repair` was cut short; run it again (with --dry-run first)",
                    path=path,
                    lsn=max(base, first_cut),
                )


def check_snapshots(shard_dir: str, next_lsn: int) -> None:
    """A snapshot at LSN ``L`` means records up to ``L`` were written: the log must not end
    before it (a writer would give those LSNs other records).

    Raises:
        CorruptionError: the newest snapshot's LSN is at or past ``next_lsn``.
    """
    snapshots = list_snapshots(shard_dir)
    if snapshots and snapshots[-1] >= next_lsn:
        raise CorruptionError(
            f"the log ends at LSN {next_lsn - 1}, but a snapshot covers the records up to LSN "
            f"{snapshots[-1]}: records were lost from the end of the log; to continue after "
            "them (their LSNs are then never used again): moonish wal repair "
            f"{shard_dir} --next-lsn {snapshots[-1] + 1}",
            path=shard_dir,
            lsn=next_lsn,
        )
