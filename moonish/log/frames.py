"""Encoding frames, the frame scanner, and the torn-tail rule, shared by the reader, the
writer's recovery and verify.

The scanner walks a buffer of frames and returns the *committed* frames (whole records, whole
batches) plus, when it stops early, a :class:`Stop` that says why. It does not decide whether a
stop is damage or the end of what the writer has written so far: that depends on where the
bytes came from (the end of the active segment, or a sealed segment), which only the caller
knows. :func:`is_torn_tail` makes that call for the end of the active segment, by one rule
(docs/wal-format.md, "Incomplete is not corrupt"): what follows the last committed record is a
torn tail only if an interrupted append could have left it, that is

- a prefix of the frames that were being appended: whole frames of an unfinished batch with
  valid checksums, then at most one frame cut short, whose header (if it is all there) is
  valid, in version 2 by its own checksum; and
- optionally, after that prefix, zero bytes to the end of the file, starting at the committed
  end or at a 512-byte boundary (file systems extend a file with zero-filled blocks when a
  power loss beats the data to the disk).

Anything else (a complete record that fails its checksum, a damaged header, valid frames after
a bad one) is damage, wherever it is.
"""

from __future__ import annotations

import enum
import re
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

import crc32c

from moonish.log.format import (
    FLAG_BATCH,
    FORMAT_VERSION,
    FRAME_CRC,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    FRAME_TRAILER_BYTES,
    KNOWN_FLAGS,
    MAX_PAYLOAD_BYTES,
    V1_BODY_MIN_BYTES,
    RecordType,
)
from moonish.log.payloads import encode_payload
from moonish.log.records import _ROW_FLAGS, KvChange, Record

try:  # the C encoder of kv_change frames (moonish/log/_cframes.c), absent in a pure build
    from moonish.log import _cframes
except ImportError:
    _cframes = None  # type: ignore[assignment]

ZERO_FILL_ALIGN_BYTES = 512
"""Zero-filled tails start at the committed end or at a multiple of this file offset (a
sector: the smallest unit a disk writes, so the smallest unit a power loss leaves unwritten)."""


@dataclass(frozen=True, slots=True)
class FrameLayout:
    """What differs between frame format versions.

    Attributes:
        version: the segment format version.
        overhead: frame bytes besides the value of the length field (v1: the CRC and length
            fields; v2: the whole header and the trailer).
        min_length, max_length: the range of the length field.
        trailer: the frame CRC is a trailer over ``[0, 36 + payload)`` (v2), not the first
            field over ``[4, 8 + body)`` (v1).
    """

    version: int
    overhead: int
    min_length: int
    max_length: int
    trailer: bool


LAYOUT_V1 = FrameLayout(1, 8, V1_BODY_MIN_BYTES, V1_BODY_MIN_BYTES + MAX_PAYLOAD_BYTES, False)
LAYOUT_V2 = FrameLayout(2, FRAME_HEADER_BYTES + FRAME_TRAILER_BYTES, 0, MAX_PAYLOAD_BYTES, True)
LAYOUTS = {1: LAYOUT_V1, 2: LAYOUT_V2}
LATEST = LAYOUTS[FORMAT_VERSION]


class Frame(NamedTuple):
    """One committed record as stored: header fields, payload bytes and its segment offset."""

    lsn: int
    record_type: int
    flags: int
    batch_index: int
    batch_size: int
    commit_us: int
    payload: bytes
    offset: int


class StopKind(enum.Enum):
    """Why the scanner stopped before the end of its buffer (or with a batch still open)."""

    SHORT = "frame extends past the end of the data"
    OPEN_BATCH = "atomic batch is not finished at the end of the data"
    BAD_HEADER = "frame header checksum mismatch"
    BAD_LENGTH = "frame length is out of range"
    BAD_CRC = "frame checksum mismatch"
    BAD_LSN = "LSN out of sequence"
    BAD_FLAGS = "unknown flag bits or a non-zero reserved field"
    BAD_BATCH = "batch fields out of sequence"


@dataclass(frozen=True, slots=True)
class Stop:
    """Where and why scanning stopped.

    Attributes:
        kind: the reason.
        offset: file offset of the frame that could not be taken (or of the open batch).
        lsn: the LSN expected there.
        frame_end: file offset where that frame claims to end (``None`` if unknown).
        detail: extra words for the error message.
    """

    kind: StopKind
    offset: int
    lsn: int
    frame_end: int | None = None
    detail: str = ""

    def describe(self) -> str:
        """A one-line description for error messages."""
        return f"{self.kind.value}{': ' + self.detail if self.detail else ''}"


_U32: Final = struct.Struct("<I")
_CRC_AND_LENGTH: Final = struct.Struct("<II")
_FIELDS: Final = struct.Struct(FRAME_HEADER.format[:1] + FRAME_HEADER.format[2:]).pack
"""The header without its checksum: frame bytes [4, 36)."""
_CRC: Final = _U32.pack
_crc: Final = crc32c.crc32c
if _cframes is not None:
    _cframes.configure(KvChange, _ROW_FLAGS, int(RecordType.KV_CHANGE), crc32c.crc32c)
    _cframes.configure_scan(Frame)
_ENCODE_CHANGES: Final = None if _cframes is None else _cframes.encode_changes
_SCAN: Final = None if _cframes is None else _cframes.scan


def kv_change_py(*fields: Any) -> KvChange:
    """A :class:`KvChange` from its 14 fields as they are, without ``KvChange.__new__``'s
    defaults and checks: ``tuple.__new__(KvChange, fields)``."""
    return tuple.__new__(KvChange, fields)


kv_change: Final[Callable[..., KvChange]] = (
    kv_change_py if _cframes is None else _cframes.kv_change  # type: ignore[assignment]
)
"""The write path's constructor of kv_change records (C where built: one call, no tuple)."""


def encode_frame(
    lsn: int,
    record_type: int,
    payload: bytes,
    commit_us: int,
    batch_index: int = 0,
    batch_size: int = 1,
    flags: int = 0,
) -> bytes:
    """The bytes of one frame in the latest format (version 2).

    Raises:
        ValueError: the payload exceeds 512 MiB.
    """
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    fields = _FIELDS(len(payload), lsn, record_type, flags, 0, batch_index, batch_size, commit_us)
    head = _CRC(_crc(fields)) + fields
    return b"".join((head, payload, _CRC(_crc(payload, _crc(head)))))


def encode_records(
    records: Sequence[Record],
    first_lsn: int,
    commit_us: int,
    flags: int,
    source: bytes | None = None,
) -> bytes:
    """The frames of ``records`` appended together at ``first_lsn`` (one a batch position,
    ``batch_size`` their count), ``source`` stored on the last one (``encode_payload``).

    Raises:
        ValueError: a record cannot be encoded, or a payload exceeds 512 MiB.
    """
    if _ENCODE_CHANGES is not None:  # all kv_change records (the write path's): in one C call
        data = _ENCODE_CHANGES(records, first_lsn, commit_us, flags, source)
        if data is not None:
            return data
    return encode_records_py(records, first_lsn, commit_us, flags, source)


def encode_records_py(
    records: Sequence[Record],
    first_lsn: int,
    commit_us: int,
    flags: int,
    source: bytes | None = None,
) -> bytes:
    """:func:`encode_records` in Python: what a pure build runs, and any batch with a record
    that is not a kv_change (moonish/log/_cframes.c gives the same bytes for those)."""
    count = len(records)
    if count == 1:  # (unpacked: a call with *args would not be a C call)
        kind, payload = encode_payload(records[0], source)
        return encode_frame(first_lsn, kind, payload, commit_us, 0, 1, flags)
    last, frames = count - 1, []
    for i, record in enumerate(records):
        kind, payload = encode_payload(record, source if i == last else None)
        frames.append(encode_frame(first_lsn + i, kind, payload, commit_us, i, count, flags))
    return b"".join(frames)


def header_checksum_holds(data: bytes | memoryview, pos: int) -> bool:
    """Whether the version 2 frame header at ``data[pos:]`` (36 bytes) passes its checksum."""
    (stored,) = _U32.unpack_from(data, pos)
    return bool(crc32c.crc32c(data[pos + 4 : pos + FRAME_HEADER_BYTES]) == stored)


def scan_frames(
    buf: bytes,
    pos: int,
    next_lsn: int,
    max_records: int,
    *,
    layout: FrameLayout = LATEST,
    mid_batch_start: bool = False,
    file_offset: int = 0,
) -> tuple[list[Frame], int, Stop | None]:
    """Parse committed frames from ``buf[pos:]``: :func:`scan_frames_py`'s contract and
    results. Version 2 bytes go through the C scanner (moonish/log/_cframes.c) up to the
    first frame it would not take as it is; :func:`scan_frames_py` goes on from there and
    names why it stopped, so the results are the same whichever ran."""
    if _SCAN is not None and layout is LAYOUT_V2:
        frames, end, done = _SCAN(buf, pos, next_lsn, max_records, mid_batch_start, file_offset)
        if done:
            return frames, end, None
        if frames:  # Python goes on after the last frame C took, and names the stop
            more, end, stop = scan_frames_py(
                buf,
                end,
                frames[-1].lsn + 1,
                max_records - len(frames),
                layout=layout,
                file_offset=file_offset,
            )
            frames += more
            return frames, end, stop
    return scan_frames_py(
        buf,
        pos,
        next_lsn,
        max_records,
        layout=layout,
        mid_batch_start=mid_batch_start,
        file_offset=file_offset,
    )


def scan_frames_py(
    buf: bytes,
    pos: int,
    next_lsn: int,
    max_records: int,
    *,
    layout: FrameLayout = LATEST,
    mid_batch_start: bool = False,
    file_offset: int = 0,
) -> tuple[list[Frame], int, Stop | None]:
    """Parse committed frames from ``buf[pos:]`` (the Python scanner, which the C one
    follows).

    Args:
        buf: frames, starting at ``pos``.
        pos: buffer offset of the first frame.
        next_lsn: the LSN the first frame must have.
        max_records: stop once at least this many committed records are collected. A batch is
            never cut: if the cap falls inside a batch, the whole batch is returned.
        layout: the frame layout of the segment the bytes come from.
        mid_batch_start: the first frame may be inside a batch (``batch_index > 0``), as when a
            reader resumes at an LSN in the middle of a batch.
        file_offset: the file offset ``buf`` was read from; ``Frame.offset``, ``Stop.offset``
            and ``Stop.frame_end`` are file offsets (``file_offset`` + buffer position).

    Returns:
        ``(frames, end, stop)``: the committed frames in LSN order, the *buffer* position just
        after the last of them, and why scanning stopped early (``None`` when it ended cleanly
        at the end of ``buf`` or at ``max_records``). Frames of a batch that was still open
        when scanning stopped are not returned; ``stop`` then points at the open batch's first
        frame if the trouble is only that the data ended (SHORT / OPEN_BATCH).
    """
    frames: list[Frame] = []
    append = frames.append
    new = tuple.__new__  # builds the Frame without NamedTuple's slower __new__
    unpack, crc_at = FRAME_HEADER.unpack_from, FRAME_CRC.unpack_from
    crc_of = crc32c.crc32c
    view = memoryview(buf)
    end = len(buf)
    committed = 0
    committed_pos = pos
    open_size = 0  # size of the batch being collected, 0 when none is open
    expect_index = 0
    header_bytes = FRAME_HEADER_BYTES
    overhead, trailer = layout.overhead, layout.trailer
    min_len, max_len, unknown_flags = layout.min_length, layout.max_length, ~KNOWN_FLAGS
    crc_from, crc_cut = (0, FRAME_TRAILER_BYTES) if trailer else (4, 0)
    stop: Stop | None = None
    while pos < end:
        if end - pos < header_bytes:
            stop = Stop(StopKind.SHORT, file_offset + pos, next_lsn)
            break
        crc, length, lsn, rtype, flags, reserved, bidx, bsize, commit_us = unpack(buf, pos)
        frame_end = pos + overhead + length
        if (
            frame_end > end
            or length < min_len
            or length > max_len
            or lsn != next_lsn
            or (flags & unknown_flags) | reserved
            or crc_of(view[pos + crc_from : frame_end - crc_cut])
            != (crc_at(buf, frame_end - 4)[0] if trailer else crc)
        ):
            stop = _diagnose(view, pos, end, next_lsn, file_offset, layout)
            break
        payload = buf[pos + header_bytes : frame_end - crc_cut]
        if bsize == 1 and not open_size and not bidx:  # a record on its own: the usual case
            append(new(Frame, (lsn, rtype, flags, 0, 1, commit_us, payload, file_offset + pos)))
            pos = committed_pos = frame_end
            next_lsn += 1
            committed += 1
            if committed >= max_records:
                break
            continue
        problem = _batch_problem(
            bidx, bsize, flags, open_size, expect_index, mid_batch_start and not frames
        )
        if problem:
            stop = Stop(
                StopKind.BAD_BATCH, file_offset + pos, lsn, file_offset + frame_end, problem
            )
            break
        append(new(Frame, (lsn, rtype, flags, bidx, bsize, commit_us, payload, file_offset + pos)))
        pos = frame_end
        next_lsn += 1
        if bidx + 1 == bsize:
            open_size = 0
            committed = len(frames)
            committed_pos = pos
            if committed >= max_records:
                break
        else:
            open_size = bsize
            expect_index = bidx + 1
    if open_size and stop is None:
        stop = Stop(StopKind.OPEN_BATCH, file_offset + committed_pos, frames[committed].lsn)
    elif open_size and stop is not None and stop.kind is StopKind.SHORT:
        stop = Stop(
            StopKind.SHORT, file_offset + committed_pos, frames[committed].lsn, stop.frame_end
        )
    if committed != len(frames):
        del frames[committed:]
    return frames, committed_pos, stop


def _batch_problem(
    bidx: int, bsize: int, flags: int, open_size: int, expect_index: int, may_resume: bool
) -> str:
    """Why a frame's batch fields do not continue the frames before it ("" if they do)."""
    if open_size:
        if bidx != expect_index or bsize != open_size:
            return (
                f"expected record {expect_index} of a batch of {open_size}, found {bidx} of {bsize}"
            )
        return ""
    if bsize == 0 or bidx >= bsize or (bidx and not may_resume) or not flags & FLAG_BATCH:
        return f"record {bidx} of a batch of {bsize} where a batch must begin"
    return ""


def _diagnose(
    view: memoryview, pos: int, end: int, next_lsn: int, file_offset: int, layout: FrameLayout
) -> Stop:
    """Why the frame at ``pos`` failed the scanner's combined check, in this precedence:
    header checksum (v2), length out of range, cut short, frame checksum, LSN, flags."""
    crc, length, lsn, _, flags, reserved, *_ = FRAME_HEADER.unpack_from(view, pos)
    at = file_offset + pos
    if layout.trailer and not header_checksum_holds(view, pos):
        return Stop(StopKind.BAD_HEADER, at, next_lsn)
    if length < layout.min_length or length > layout.max_length:
        return Stop(StopKind.BAD_LENGTH, at, next_lsn, None, f"length field {length}")
    frame_end = pos + layout.overhead + length
    if frame_end > end:
        return Stop(StopKind.SHORT, at, next_lsn, file_offset + frame_end)
    if not frame_checksum_holds(view, pos, frame_end, layout, crc):
        return Stop(StopKind.BAD_CRC, at, next_lsn, file_offset + frame_end)
    if lsn != next_lsn:
        return Stop(StopKind.BAD_LSN, at, next_lsn, file_offset + frame_end, f"found LSN {lsn}")
    return Stop(
        StopKind.BAD_FLAGS,
        at,
        lsn,
        file_offset + frame_end,
        f"flags 0x{flags:02x}, reserved 0x{reserved:04x}",
    )


def frame_checksum_holds(
    data: bytes | memoryview, pos: int, frame_end: int, layout: FrameLayout, crc: int
) -> bool:
    """Whether the frame at ``data[pos:frame_end]`` passes its frame checksum (the version 2
    trailer, or the version 1 ``crc`` field, given as ``crc``)."""
    if layout.trailer:
        (stored,) = FRAME_CRC.unpack_from(data, frame_end - FRAME_TRAILER_BYTES)
        return bool(crc32c.crc32c(data[pos : frame_end - FRAME_TRAILER_BYTES]) == stored)
    return bool(crc32c.crc32c(data[pos + 4 : frame_end]) == crc)


def is_torn_tail(
    data: bytes,
    next_lsn: int,
    layout: FrameLayout,
    file_offset: int,
    *,
    mid_batch_start: bool = False,
) -> bool:
    """Whether ``data``, everything after the last committed record of the *active* segment
    up to the end of the file, is a torn tail (nothing yet; the next writer cuts it) rather
    than damage. The rule is in the module docstring.

    Args:
        data: the bytes from the committed end to the current end of the file.
        next_lsn: the LSN expected at the committed end.
        layout: the segment's frame layout.
        file_offset: where ``data`` starts in the file (the committed end).
        mid_batch_start: the committed end is inside a batch (a reader that resumed there).
    """
    nonzero = len(data.rstrip(b"\x00"))
    if not nonzero:
        return True  # nothing, or zeros from the committed end on
    limit = len(data)
    if nonzero < limit:  # the zero run must start at a sector boundary
        align = ZERO_FILL_ALIGN_BYTES
        limit = min(limit, -(-(file_offset + nonzero) // align) * align - file_offset)
    cut = _append_prefix(data, limit, next_lsn, layout, mid_batch_start)
    if cut is None:
        return False
    return layout.trailer or not _v1_intact_frame_after(data, *cut)


def _append_prefix(
    data: bytes, limit: int, lsn: int, layout: FrameLayout, mid_batch_start: bool
) -> tuple[int, int] | None:
    """Whether ``data[:limit]`` is a prefix of an append: whole valid frames of one unfinished
    batch, then at most one frame cut short at ``limit`` whose header, if whole, is valid.
    Returns where the frame cut short starts and its LSN (``(limit, lsn)`` when none is), or
    ``None`` when it is not such a prefix."""
    pos, open_size, expect_index = 0, 0, 0
    while pos < limit:
        if limit - pos < FRAME_HEADER_BYTES:
            return pos, lsn  # a header cut short: nothing in it can be checked
        crc, length, found, _, flags, reserved, bidx, bsize, _ = FRAME_HEADER.unpack_from(data, pos)
        if (
            (layout.trailer and not header_checksum_holds(data, pos))
            or found != lsn
            or (flags & ~KNOWN_FLAGS) | reserved
            or not layout.min_length <= length <= layout.max_length
            or _batch_problem(
                bidx,
                bsize,
                flags | (FLAG_BATCH if bsize == 1 else 0),
                open_size,
                expect_index,
                mid_batch_start and pos == 0,
            )
        ):
            return None
        frame_end = pos + layout.overhead + length
        if frame_end > limit:
            return pos, lsn  # the frame being written when the append stopped
        if not frame_checksum_holds(data, pos, frame_end, layout, crc) or bidx + 1 == bsize:
            return None  # damaged, or a whole record: a torn tail never holds one
        pos, lsn, open_size, expect_index = frame_end, lsn + 1, bsize, bidx + 1
    return pos, lsn  # whole frames of an unfinished batch, then (maybe) zeros


def _v1_intact_frame_after(data: bytes, cut_pos: int, cut_lsn: int) -> bool:
    """Version 1 only: whether an intact frame with the LSN of the frame cut short at
    ``cut_pos`` or a later one stands anywhere after that frame's first byte (its length was
    damaged, so it only looks cut short: the records after it are there)."""
    return next_intact_frame(data, cut_pos + 1, cut_lsn, LAYOUT_V1) is not None


CANDIDATE: Final = re.compile(
    rb"(?=.{16}[\x%02x-\x%02x][\x00-\x%02x]\x00\x00)"
    % (min(RecordType), max(RecordType), KNOWN_FLAGS),
    re.DOTALL,
)
"""Where a frame header may start: its type byte (offset 16) one of the record types (every
type, messages included), its flags byte one of the known values, its reserved field zero. A
C-speed pre-filter for :func:`next_intact_frame` and moonish.log.used."""


def next_intact_frame(
    data: bytes, start: int, min_lsn: int, layout: FrameLayout
) -> tuple[int, int] | None:
    """The first intact frame at or after ``data[start]`` with an LSN of at least
    ``min_lsn``, as ``(position, lsn)``, found by trying every position (``None`` if there is
    none). Used where damage must not hide what follows it: version 1 torn-tail checks, and
    ``wal repair``, which must know every record it discards."""
    for match in CANDIDATE.finditer(data, start):
        pos = match.start()
        if len(data) - pos < FRAME_HEADER_BYTES:
            break
        crc, length, lsn, *_ = FRAME_HEADER.unpack_from(data, pos)
        frame_end = pos + layout.overhead + length
        if (
            lsn >= min_lsn
            and layout.min_length <= length <= layout.max_length
            and frame_end <= len(data)
            and (not layout.trailer or header_checksum_holds(data, pos))
            and frame_checksum_holds(data, pos, frame_end, layout, crc)
        ):
            return pos, lsn
    return None
