"""Which LSNs the bytes of a shard show were used, where the frames around them are damaged or
cut: what ``wal repair`` and the writer's torn-tail cut record as discarded, so that an LSN a
reader may have seen is never given to another record (docs/wal-format.md, "LSNs are never
reused").

An LSN counts as used when

- a frame header names it whose header checksum holds (version 2), whatever its payload,
  its trailer or its record type: the writer wrote that header for that LSN, and a reader in
  another process may have read the whole frame from the page cache before a crash took part
  of it (a version 1 header has no checksum of its own: there, only a whole intact frame
  counts); or
- an entry of the segment's sparse index names it: the writer appends an entry only after the
  frame it names was written.

A third witness is the writer's last heartbeat (moonish.log.heartbeat, ``heard_lsn``): it
names the next LSN after records the writer had written (to the page cache, where readers
read them) when it was written; it carries a checksum of its own, and is believed whole.

Neither of the first two carries a checksum that rules out chance entirely, so an LSN is
believed only where a real frame could hold it: a frame at byte ``pos`` of a segment whose
first LSN is ``base`` has an LSN of at most ``base + (pos - 40) // 36`` (36 bytes: the smallest
frame of either version). A flipped bit in an index entry can therefore not discard a vast range.
"""

from __future__ import annotations

import os
from typing import Final

from moonish.log.format import FRAME_HEADER, FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES
from moonish.log.frames import (
    CANDIDATE,
    LAYOUT_V1,
    LAYOUTS,
    FrameLayout,
    frame_checksum_holds,
    header_checksum_holds,
)
from moonish.log.segment import decode_segment_header, index_path, read_index, segment_path

MIN_FRAME_BYTES: Final = min(FRAME_HEADER_BYTES, LAYOUT_V1.overhead + LAYOUT_V1.min_length)
"""The smallest frame of any version (bytes): how densely LSNs can follow each other."""


def plausible(lsn: int, pos: int, base: int) -> bool:
    """Whether a frame at byte ``pos`` of the segment whose first LSN is ``base`` can hold
    ``lsn`` (LSNs are dense and every frame takes at least :data:`MIN_FRAME_BYTES`)."""
    return (
        pos >= SEGMENT_HEADER_BYTES
        and base <= lsn <= base + (pos - SEGMENT_HEADER_BYTES) // MIN_FRAME_BYTES
    )


def highest_named_lsn(
    data: bytes, start: int, min_lsn: int, base: int, layout: FrameLayout, origin: int = 0
) -> int:
    """The highest LSN of at least ``min_lsn`` that a frame header at or after ``data[start]``
    names (0 if none), trying every position.

    Args:
        data: a segment file from byte ``origin`` on (0: the whole file).
        start: the byte offset to search from.
        min_lsn: LSNs below it are not looked for.
        base: the segment's first LSN (its file name).
        layout: its frame layout. Version 2: a header whose checksum holds counts, even if its
            frame is damaged or runs past the end of ``data``; version 1: only whole intact
            frames.
    """
    highest = 0
    end = len(data) - FRAME_HEADER_BYTES
    for match in CANDIDATE.finditer(data, start):
        pos = match.start()
        if pos > end:
            break
        crc, length, lsn, *_ = FRAME_HEADER.unpack_from(data, pos)
        if lsn < max(min_lsn, highest + 1) or not plausible(lsn, origin + pos, base):
            continue
        if not layout.min_length <= length <= layout.max_length:
            continue
        if layout.trailer:
            if not header_checksum_holds(data, pos):
                continue
        else:
            frame_end = pos + layout.overhead + length
            if frame_end > len(data) or not frame_checksum_holds(data, pos, frame_end, layout, crc):
                continue
        highest = lsn
    return highest


def highest_indexed_lsn(shard_dir: str, base: int, offset: int) -> int:
    """The highest LSN the index of segment ``base`` names at or after byte ``offset`` (0 if
    none): the LSN was used even when its frame is damaged or cut now."""
    entries = read_index(index_path(shard_dir, base))
    return max((lsn for lsn, at in entries if at >= offset and plausible(lsn, at, base)), default=0)


def named_past_end(shard_dir: str, base: int, from_offset: int, lsn: int) -> int:
    """The highest LSN of at least ``lsn`` (the LSN after the last committed record) that a
    frame header at or after byte ``from_offset`` of the newest segment ``base``, or an entry
    of its index, names (0 if none): what the next writer discards with the torn tail. Reads
    the segment from ``from_offset`` on only (a reader's last verified index entry).

    Raises:
        CorruptionError: the segment header is damaged.
        UnsupportedFormatError: a segment version this build does not read.
    """
    path = segment_path(shard_dir, base)
    fd = os.open(path, os.O_RDONLY)
    try:
        layout = LAYOUTS[
            decode_segment_header(os.pread(fd, SEGMENT_HEADER_BYTES, 0), path, base).version
        ]
        start = max(from_offset, SEGMENT_HEADER_BYTES)
        data = os.pread(fd, max(os.fstat(fd).st_size - start, 0), start)
    finally:
        os.close(fd)
    named = highest_named_lsn(data, 0, lsn, base, layout, start)
    indexed = highest_indexed_lsn(shard_dir, base, start)
    return max(named, indexed if indexed >= lsn else 0)
