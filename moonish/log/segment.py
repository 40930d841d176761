"""Segment files: header encode/decode, listing a shard directory, the sparse index sidecar."""

from __future__ import annotations

import bisect
import os
from dataclasses import dataclass

import crc32c

from moonish.errors import CorruptionError, InvalidArgumentError, UnsupportedFormatError
from moonish.log.format import (
    CONTROL_NAME,
    FORMAT_VERSION,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    INDEX_ENTRY,
    MAGIC,
    SEGMENT_HEADER,
    SEGMENT_HEADER_BYTES,
    SEGMENT_HEADER_BYTES_OFFSET,
    SEGMENT_HEADER_CRC,
    SEGMENT_VERSION_OFFSET,
    SUPPORTED_VERSIONS,
    index_name,
    parse_segment_name,
    segment_name,
)
from moonish.log.frames import Frame, header_checksum_holds


@dataclass(frozen=True, slots=True)
class SegmentHeader:
    """The decoded 40-byte header at the start of every segment."""

    version: int
    shard_id: int
    base_lsn: int
    created_us: int


def encode_segment_header(shard_id: int, base_lsn: int, created_us: int) -> bytes:
    """The header bytes of a new segment, in the latest format version."""
    head = SEGMENT_HEADER.pack(
        MAGIC, FORMAT_VERSION, SEGMENT_HEADER_BYTES, shard_id, base_lsn, created_us, 0
    )
    return head + SEGMENT_HEADER_CRC.pack(crc32c.crc32c(head))


def decode_segment_header(data: bytes, path: str, expected_base_lsn: int) -> SegmentHeader:
    """Decode and check a segment header read from ``path``.

    The checks run in this order, so that a damaged byte is never mistaken for a newer
    format: length, magic, header checksum (over ``[0, header_bytes - 4)``, wherever a later
    version puts the end of its header), then the version, then the fields.

    Args:
        data: at least the first 40 bytes of the segment (fewer means a truncated header).
        path: the segment file, for error messages.
        expected_base_lsn: the base LSN the file name promises.

    Raises:
        CorruptionError: short header, bad magic, bad header CRC, a non-zero reserved field,
            or a base LSN that differs from the file name (errors carry ``expected_base_lsn``).
        UnsupportedFormatError: a version this build does not read, under a valid checksum.
    """
    lsn = expected_base_lsn
    if len(data) < SEGMENT_HEADER_BYTES:
        raise CorruptionError(
            f"segment header is truncated: {len(data)} of {SEGMENT_HEADER_BYTES} bytes",
            path=path,
            offset=0,
            lsn=lsn,
        )
    magic, version, header_bytes, shard_id, base_lsn, created_us, reserved = (
        SEGMENT_HEADER.unpack_from(data)
    )
    if magic != MAGIC:
        raise CorruptionError(
            f"bad segment magic {magic!r}, expected {MAGIC!r}", path=path, offset=0, lsn=lsn
        )
    crc_at = header_bytes - SEGMENT_HEADER_CRC.size
    if (
        not SEGMENT_HEADER_BYTES <= header_bytes <= len(data)
        or crc32c.crc32c(data[:crc_at]) != SEGMENT_HEADER_CRC.unpack_from(data, crc_at)[0]
    ):
        raise CorruptionError("segment header checksum mismatch", path=path, offset=0, lsn=lsn)
    if version not in SUPPORTED_VERSIONS:
        raise UnsupportedFormatError(
            f"segment format version {version} is not supported (this build reads "
            f"{', '.join(map(str, SUPPORTED_VERSIONS))})",
            path=path,
            offset=SEGMENT_VERSION_OFFSET,
            lsn=lsn,
        )
    if header_bytes != SEGMENT_HEADER_BYTES or reserved:
        raise CorruptionError(
            f"segment header of version {version} has header_bytes {header_bytes} and "
            f"reserved {reserved} (expected {SEGMENT_HEADER_BYTES} and 0)",
            path=path,
            offset=SEGMENT_HEADER_BYTES_OFFSET,
            lsn=lsn,
        )
    if base_lsn != expected_base_lsn:
        raise CorruptionError(
            f"segment header says base LSN {base_lsn} but the file name says {expected_base_lsn}",
            path=path,
            offset=16,
            lsn=lsn,
        )
    return SegmentHeader(version, shard_id, base_lsn, created_us)


def require_shard_dir(shard_dir: str | os.PathLike[str]) -> str:
    """``shard_dir`` as a string, checked to be an existing directory that holds a log: a
    segment, or what survives the removal of every segment (``control.json``, a snapshot;
    ``wal repair --next-lsn`` works on such a shard). Readers, ``wal verify`` and ``wal
    repair`` call it; writers do not (they create shards).

    Raises:
        InvalidArgumentError: it does not exist, is not a directory, is a data directory of
            several shards (``shard-<k>`` subdirectories) rather than one shard, or holds no
            log (an empty or mistyped directory: reading it would look like an idle shard).
    """
    path = os.fspath(shard_dir)
    if not os.path.isdir(path):
        raise InvalidArgumentError("WAL directory does not exist or is not a directory", path=path)
    if list_segments(path):
        return path
    shards = sorted(name for name in os.listdir(path) if name.startswith("shard-"))
    if shards:
        raise InvalidArgumentError(
            f"this is a data directory of {len(shards)} shard(s); pass one shard's directory, "
            f"for example {os.path.join(path, shards[0])}",
            path=path,
        )
    if not os.path.exists(os.path.join(path, CONTROL_NAME)) and not list_snapshots(path):
        raise InvalidArgumentError(
            "not a shard directory: it holds no WAL segment (<lsn:016x>.seg), no "
            f"{CONTROL_NAME} and no snapshot",
            path=path,
        )
    return path


def list_segments(shard_dir: str) -> list[int]:
    """Base LSNs of the segments in ``shard_dir``, ascending. Other files are ignored.

    Raises:
        InvalidArgumentError: ``shard_dir`` is not an existing directory.
    """
    try:
        names = os.listdir(shard_dir)
    except (FileNotFoundError, NotADirectoryError):
        raise InvalidArgumentError(
            "WAL directory does not exist or is not a directory", path=shard_dir
        ) from None
    bases = [base for base in map(parse_segment_name, names) if base is not None]
    bases.sort()
    return bases


SNAPSHOT_SUFFIX = ".snap"


def snapshot_path(shard_dir: str, lsn: int) -> str:
    """Path of the snapshot of the keyspace after record ``lsn`` (moonish.state.snapshot)."""
    return os.path.join(shard_dir, f"{lsn:016x}{SNAPSHOT_SUFFIX}")


def list_snapshots(shard_dir: str) -> list[int]:
    """LSNs of the shard's snapshot files (``<lsn:016x>.snap``), oldest first."""
    found = []
    for name in os.listdir(shard_dir):
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 16 and not name.startswith("."):
            try:
                found.append(int(stem, 16))
            except ValueError:
                continue
    return sorted(found)


def segment_path(shard_dir: str, base_lsn: int) -> str:
    """Path of the segment with ``base_lsn`` in ``shard_dir``."""
    return os.path.join(shard_dir, segment_name(base_lsn))


def segment_holding(shard_dir: str, lsn: int) -> str:
    """Path of the segment of ``shard_dir`` that holds ``lsn`` (the newest whose base LSN is
    at most ``lsn``), or ``shard_dir`` itself when none does. For error messages: one
    directory listing."""
    try:
        bases = [base for base in list_segments(shard_dir) if base <= lsn]
    except InvalidArgumentError:  # not (or no longer) a directory: name what we were given
        return shard_dir
    return segment_path(shard_dir, bases[-1]) if bases else shard_dir


def shard_id_from_headers(shard_dir: str) -> int | None:
    """The shard id the first segment header that decodes carries, or ``None``."""
    for base in list_segments(shard_dir):
        path = segment_path(shard_dir, base)
        try:
            with open(path, "rb") as handle:
                return decode_segment_header(handle.read(SEGMENT_HEADER_BYTES), path, base).shard_id
        except (OSError, CorruptionError, UnsupportedFormatError):
            continue
    return None


def index_path(shard_dir: str, base_lsn: int) -> str:
    """Path of the sparse index of the segment with ``base_lsn`` in ``shard_dir``."""
    return os.path.join(shard_dir, index_name(base_lsn))


def read_index(path: str) -> list[tuple[int, int]]:
    """Entries ``(lsn, offset)`` of an index file, ascending; ``[]`` if it does not exist.

    A trailing partial entry (a torn write) is ignored: the index is advisory and every entry is
    verified against the segment before use.
    """
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return []
    usable = len(data) - len(data) % INDEX_ENTRY.size
    return [entry for entry in INDEX_ENTRY.iter_unpack(data[:usable])]


def index_hint(fd: int, trailer: bool, shard_dir: str, base: int, target: int) -> tuple[int, int]:
    """``(offset, lsn)`` of a verified frame at or before LSN ``target`` in the segment of
    base ``base`` open as ``fd``: where a scan can start (the segment's first record when no
    index entry holds up). An entry is believed only if the frame header there has that LSN
    and, for a format with header checksums (``trailer``), a valid one."""
    entries = read_index(index_path(shard_dir, base))
    i = bisect.bisect_right(entries, (target, 2**64)) - 1
    size = os.fstat(fd).st_size
    while i >= 0 and not SEGMENT_HEADER_BYTES <= entries[i][1] < size:
        i -= 1  # an entry into nowhere (damaged, or into a cut tail) is no hint
    if i >= 0:
        lsn, offset = entries[i]
        head = os.pread(fd, FRAME_HEADER_BYTES, offset)
        if len(head) == FRAME_HEADER_BYTES:
            fields = FRAME_HEADER.unpack(head)
            if (
                fields[2] == lsn
                and fields[6] == 0
                and (not trailer or header_checksum_holds(head, 0))
            ):
                return offset, lsn
    return SEGMENT_HEADER_BYTES, base


def reopen_index(
    shard_dir: str,
    base: int,
    frames: list[Frame],
    interval_bytes: int,
    scanned_from: int = SEGMENT_HEADER_BYTES,
) -> tuple[int, int | None, bool]:
    """Open the index of the newest segment ``base`` (whose committed ``frames`` from byte
    ``scanned_from`` on a writer's recovery found) for appends, keeping the entries that
    point at a committed frame that starts a batch; rebuilt from the frames, one entry per
    ``interval_bytes``, if any other entry is there (an entry into a cut tail is expected; a
    wrong one means the index file was damaged, and the index is derived data: Kafka
    rebuilds a damaged index the same way). Entries before ``scanned_from`` are kept as they
    are (readers verify every entry they use, ``index_hint``).

    Returns:
        ``(descriptor, offset of the last entry or None, whether it was rebuilt)``.
    """
    path = index_path(shard_dir, base)
    entries = read_index(path)
    starts = {(frame.lsn, frame.offset) for frame in frames if frame.batch_index == 0}
    end = frames[-1].offset if frames else SEGMENT_HEADER_BYTES
    while entries and entries[-1] not in starts and entries[-1][1] > end:
        entries.pop()  # the last entries may point into the tail just cut
    keep = [entry for entry in entries if entry[1] < scanned_from or entry in starts]
    wrong = len(keep) != len(entries)
    if wrong and scanned_from > SEGMENT_HEADER_BYTES:
        keep = [entry for entry in entries if entry[1] < scanned_from]
        keep += [(frame.lsn, frame.offset) for frame in frames[:1]]
    elif wrong:
        keep, last = [], -interval_bytes
        for frame in frames:
            if frame.batch_index == 0 and frame.offset - last >= interval_bytes:
                keep.append((frame.lsn, frame.offset))
                last = frame.offset
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    os.pwrite(fd, b"".join(INDEX_ENTRY.pack(*entry) for entry in keep), 0)
    os.ftruncate(fd, len(keep) * INDEX_ENTRY.size)
    os.lseek(fd, 0, os.SEEK_END)
    return fd, keep[-1][1] if keep else None, wrong
