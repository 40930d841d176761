"""Encoding frames, and the frame scanner shared by the reader, the writer's recovery and verify.

The scanner walks a buffer of frames and returns the *committed* frames (whole records, whole
batches) plus, when it stops early, a :class:`Stop` that says why. It does not decide whether a
stop is corruption or just the end of what the writer has written so far: that depends on where
the buffer came from (the end of the active segment, or a sealed segment), which only the caller
knows. :func:`is_torn_tail` makes that call for the end of the active segment.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

import crc32c

from moonish.log.format import (
    FLAG_BATCH,
    FRAME_BODY_MIN_BYTES,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    KNOWN_FLAGS,
    MAX_BODY_BYTES,
    MAX_PAYLOAD_BYTES,
)


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
    BAD_LENGTH = "frame length is out of range"
    BAD_CRC = "frame checksum mismatch"
    BAD_LSN = "LSN out of sequence"
    BAD_FLAGS = "unknown flag bits"
    BAD_BATCH = "batch fields out of sequence"


@dataclass(frozen=True, slots=True)
class Stop:
    """Where and why scanning stopped.

    Attributes:
        kind: the reason.
        offset: buffer offset of the frame that could not be taken (or of the open batch).
        lsn: the LSN expected there.
        frame_end: buffer offset where that frame claims to end (``None`` if unknown).
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


def encode_frame(
    lsn: int,
    record_type: int,
    payload: bytes,
    commit_us: int,
    batch_index: int = 0,
    batch_size: int = 1,
    flags: int = 0,
) -> bytes:
    """The bytes of one frame. Raises ValueError if the payload exceeds 512 MiB."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise ValueError(f"payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}")
    body_bytes = FRAME_BODY_MIN_BYTES + len(payload)
    head = FRAME_HEADER.pack(
        0, body_bytes, lsn, record_type, flags, 0, batch_index, batch_size, commit_us
    )
    body = head[4:] + payload
    return crc32c.crc32c(body).to_bytes(4, "little") + body


def scan_frames(
    buf: bytes,
    pos: int,
    next_lsn: int,
    max_records: int,
    *,
    mid_batch_start: bool = False,
    file_offset: int = 0,
) -> tuple[list[Frame], int, Stop | None]:
    """Parse committed frames from ``buf[pos:]``.

    Args:
        buf: frames, starting at ``pos``.
        pos: buffer offset of the first frame.
        next_lsn: the LSN the first frame must have.
        max_records: stop once at least this many committed records are collected. A batch is
            never cut: if the cap falls inside a batch, the whole batch is returned.
        mid_batch_start: the first frame may be inside a batch (``batch_index > 0``), as when a
            reader resumes at an LSN in the middle of a batch.
        file_offset: the file offset ``buf`` was read from; ``Frame.offset``, ``Stop.offset``
            and ``Stop.frame_end`` are file offsets (``file_offset`` + buffer position).

    Returns:
        ``(frames, end, stop)``: the committed frames in LSN order, the *buffer* position just after
        the last of them, and why scanning stopped early (``None`` when it ended cleanly at the
        end of ``buf`` or at ``max_records``). Frames of a batch that was still open when
        scanning stopped are not returned; ``stop`` then points at the open batch's first frame
        if the trouble is only that the data ended (SHORT / OPEN_BATCH).
    """
    frames: list[Frame] = []
    append = frames.append
    new = tuple.__new__  # builds the Frame without NamedTuple's slower __new__
    unpack = FRAME_HEADER.unpack_from
    crc_of = crc32c.crc32c
    view = memoryview(buf)
    end = len(buf)
    committed = 0
    committed_pos = pos
    open_size = 0  # size of the batch being collected, 0 when none is open
    expect_index = 0
    header_bytes = FRAME_HEADER_BYTES
    min_body, max_body, unknown_flags = FRAME_BODY_MIN_BYTES, MAX_BODY_BYTES, ~KNOWN_FLAGS
    stop: Stop | None = None
    while pos < end:
        if end - pos < header_bytes:
            stop = Stop(StopKind.SHORT, file_offset + pos, next_lsn)
            break
        crc, body, lsn, rtype, flags, _, bidx, bsize, commit_us = unpack(buf, pos)
        frame_end = pos + 8 + body
        if (
            frame_end > end
            or body < min_body
            or body > max_body
            or lsn != next_lsn
            or flags & unknown_flags
            or crc_of(view[pos + 4 : frame_end]) != crc
        ):
            stop = _diagnose(view, pos, end, next_lsn, file_offset)
            break
        if bsize == 1 and not open_size and not bidx:  # a record on its own: the usual case
            payload = buf[pos + header_bytes : frame_end]
            append(new(Frame, (lsn, rtype, flags, 0, 1, commit_us, payload, file_offset + pos)))
            pos = committed_pos = frame_end
            next_lsn += 1
            committed += 1
            if committed >= max_records:
                break
            continue
        if open_size:
            if bidx != expect_index or bsize != open_size:
                stop = Stop(
                    StopKind.BAD_BATCH, file_offset + pos, lsn, file_offset + frame_end,
                    f"expected record {expect_index} of a batch of {open_size}, "
                    f"found {bidx} of {bsize}",
                )  # fmt: skip
                break
        elif (
            bsize == 0
            or bidx >= bsize
            or (bidx and not (mid_batch_start and not frames))
            or not flags & FLAG_BATCH
        ):
            stop = Stop(
                StopKind.BAD_BATCH, file_offset + pos, lsn, file_offset + frame_end,
                f"record {bidx} of a batch of {bsize} where a batch must begin",
            )  # fmt: skip
            break
        append(new(Frame, (lsn, rtype, flags, bidx, bsize, commit_us,
                           buf[pos + header_bytes : frame_end], file_offset + pos)))  # fmt: skip
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


def _diagnose(view: memoryview, pos: int, end: int, next_lsn: int, file_offset: int) -> Stop:
    """Why the frame at ``pos`` failed the scanner's combined check, in this precedence:
    length out of range, cut short, checksum, LSN, flags."""
    crc, body, lsn, _, flags, *_ = FRAME_HEADER.unpack_from(view, pos)
    at = file_offset + pos
    if body < FRAME_BODY_MIN_BYTES or body > MAX_BODY_BYTES:
        return Stop(StopKind.BAD_LENGTH, at, next_lsn, None, f"{body} body bytes")
    frame_end = pos + 8 + body
    if frame_end > end:
        return Stop(StopKind.SHORT, at, next_lsn, file_offset + frame_end)
    if crc32c.crc32c(view[pos + 4 : frame_end]) != crc:
        return Stop(StopKind.BAD_CRC, at, next_lsn, file_offset + frame_end)
    if lsn != next_lsn:
        return Stop(StopKind.BAD_LSN, at, next_lsn, file_offset + frame_end, f"found LSN {lsn}")
    return Stop(StopKind.BAD_FLAGS, at, lsn, file_offset + frame_end, f"flags 0x{flags:02x}")


def is_torn_tail(buf: bytes, stop: Stop, file_offset: int = 0) -> bool:
    """Whether ``stop`` at the end of the *active* segment is a torn tail (nothing yet).

    A torn tail is what a writer that died mid-append leaves, and what a reader sees while a
    write is in flight: a frame or batch cut short by the end of the file, a last frame whose
    checksum fails with no byte after it, or a zero-filled tail. Anything else (a bad frame with
    data after it, a wrong LSN, unknown flags) is corruption.

    ``buf`` must run to the current end of the segment file; it was read from ``file_offset``.
    """
    if stop.kind in (StopKind.SHORT, StopKind.OPEN_BATCH):
        return True
    if stop.kind is StopKind.BAD_CRC:
        return stop.frame_end == file_offset + len(buf)
    if stop.kind is StopKind.BAD_LENGTH:
        return not buf[stop.offset - file_offset :].lstrip(b"\x00")
    return False
