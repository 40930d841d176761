"""The moonish WAL byte layout (format version 2; version 1 is read too). docs/wal-format.md
has the same tables.

A shard is a directory of segment files::

    <shard_dir>/<base_lsn:016x>.seg      segment: header, then frames
    <shard_dir>/<base_lsn:016x>.idx      sparse index of that segment (advisory)
    <shard_dir>/LOCK                     writer lock (flock), holds "pid=<n>"

Names are fixed-width lowercase hex of the segment's base LSN (the LSN of its first record), so
sorting names sorts positions, and the segment after one whose last LSN is ``n`` is named ``n+1``.

Segment header (40 bytes, little-endian, both versions)::

    segment_header := magic[8] version:u16 header_bytes:u16 shard_id:u32 base_lsn:u64
                      created_us:i64 reserved:u32 header_crc:u32

``header_crc`` is crc32c of header bytes ``[0, header_bytes - 4)``. Every version keeps
``magic``, ``version`` and ``header_bytes`` where they are and the CRC as the header's last four
bytes, so a reader checks the CRC before it believes the version.

Frame, version 2 (36-byte header, payload, 4-byte trailer; little-endian)::

    frame := header_crc:u32 payload_bytes:u32 lsn:u64 type:u8 flags:u8 reserved:u16
             batch_index:u32 batch_size:u32 commit_us:i64 payload[payload_bytes] frame_crc:u32

``header_crc`` is crc32c of frame bytes ``[4, 36)``: the length and every other header field,
so a damaged length is told apart from a frame cut short. ``frame_crc`` is crc32c of frame bytes
``[0, 36 + payload_bytes)``: the header (its CRC included) and the payload. A frame whose header
checksum holds and whose trailer does not was cut short or damaged; which of the two depends on
where it is (moonish.log.frames, ``is_torn_tail``).

Frame, version 1 (read only; 36-byte header, then the payload)::

    frame_v1 := crc:u32 body_bytes:u32 lsn:u64 type:u8 flags:u8 reserved:u16
                batch_index:u32 batch_size:u32 commit_us:i64 payload[body_bytes - 28]

``crc`` is crc32c of frame bytes ``[4, 8 + body_bytes)``; nothing protects the length alone.

A record appended on its own has ``flags = 0, batch_index = 0, batch_size = 1``. The records of
an atomic batch of ``n`` records (``n >= 1``) have ``FLAG_BATCH`` set, consecutive LSNs,
``batch_index`` ``0 .. n-1`` and ``batch_size = n``, and never span two segments. Readers
expose a batch only once its last record is present and valid, which makes the batch
all-or-nothing even when the writer dies mid-batch.

Index entry (16 bytes, little-endian)::

    index_entry := lsn:u64 offset:u64

An entry says "the frame of ``lsn`` starts at byte ``offset`` of the segment". The writer appends
one roughly every ``index_interval_bytes`` of frames. Readers verify an entry against the frame it
points to before trusting it; the index only makes positioning cheap, the segment is the truth.
"""

from __future__ import annotations

import enum
import struct
from typing import Final

MAGIC: Final = b"MOONWAL\x00"
FORMAT_VERSION: Final = 2
"""The version this build writes."""
SUPPORTED_VERSIONS: Final = (1, 2)
"""Every segment version this build reads."""

SEGMENT_SUFFIX = ".seg"
INDEX_SUFFIX = ".idx"
LOCK_NAME = "LOCK"
CONTROL_NAME = "control.json"
"""The shard's control file (moonish.log.control)."""
NAME_HEX_DIGITS = 16

SEGMENT_HEADER: Final = struct.Struct(
    "<"
    "8s"  # magic: b"MOONWAL\0"
    "H"  # version: segment format version
    "H"  # header_bytes: size of this header (40), lets later versions grow it
    "I"  # shard_id: the shard this segment belongs to
    "Q"  # base_lsn: LSN of the first record in this segment
    "q"  # created_us: creation time, microseconds since the Unix epoch
    "I"  # reserved: zero
)
SEGMENT_HEADER_CRC: Final = struct.Struct("<I")  # header_crc: crc32c of the preceding header bytes
SEGMENT_HEADER_BYTES: Final = SEGMENT_HEADER.size + SEGMENT_HEADER_CRC.size
SEGMENT_VERSION_OFFSET = 8
SEGMENT_HEADER_BYTES_OFFSET = 10

FRAME_HEADER: Final = struct.Struct(
    "<"
    "I"  # v2 header_crc: crc32c of frame bytes [4, 36) | v1 crc: of [4, 8 + body_bytes)
    "I"  # v2 payload_bytes | v1 body_bytes: the bytes after this field, payload included
    "Q"  # lsn: dense, strictly increasing, starts at 1 in every shard
    "B"  # type: RecordType
    "B"  # flags: bit 0 FLAG_BATCH (appended in an atomic batch); readers reject unknown bits
    "H"  # reserved: zero
    "I"  # batch_index: position of this record in its atomic batch, 0-based
    "I"  # batch_size: records in the batch (1 for a record on its own)
    "q"  # commit_us: commit time, microseconds since the Unix epoch
)
FRAME_HEADER_BYTES: Final = FRAME_HEADER.size
# v2 frame_crc (trailer): crc32c of frame bytes [0, 36 + payload)
FRAME_CRC: Final = struct.Struct("<I")
FRAME_TRAILER_BYTES: Final = FRAME_CRC.size
MAX_PAYLOAD_BYTES: Final = 512 * 1024 * 1024
"""Largest payload accepted (Redis's own proto-max-bulk-len default)."""
V1_BODY_MIN_BYTES: Final = FRAME_HEADER_BYTES - 8
"""Version 1: ``body_bytes`` of an empty payload (the header bytes after the length)."""
FLAG_BATCH: Final = 0x01
"""Flag bit 0: the record was appended as part of an atomic batch (even a batch of one)."""
KNOWN_FLAGS: Final = FLAG_BATCH

INDEX_ENTRY: Final = struct.Struct(
    "<"
    "Q"  # lsn: LSN of the frame the entry points at
    "Q"  # offset: byte offset of that frame in the segment
)


class RecordType(enum.IntEnum):
    """What a record's payload holds (the frame's ``type`` byte)."""

    KV = 1
    """A Redis-style command: db index, key position, binary-safe argv."""
    TEMPORAL = 2
    """A temporal upsert: key, value, valid-from, system-from."""
    GRAPH = 3
    """A graph mutation: entity id, node or edge, valid-to, system-from, properties."""
    CHECKPOINT = 4
    """A checkpoint marker: the LSN it covers and a label. Not a data change."""
    KV_CHANGE = 5
    """A kv command's effect on one key from the keyspace: op, view type, before/after
    images, how to replay it (moonish.log.payloads has the grammar)."""
    MESSAGE = 6
    """A non-data record: a prefix naming its kind (``moonish.function``, ``moonish.skipped``)
    and opaque content, in a db. Readers show it as Debezium's logical-decoding message."""


def segment_name(base_lsn: int) -> str:
    """File name of the segment whose first LSN is ``base_lsn``."""
    return f"{base_lsn:0{NAME_HEX_DIGITS}x}{SEGMENT_SUFFIX}"


def index_name(base_lsn: int) -> str:
    """File name of the sparse index of the segment whose first LSN is ``base_lsn``."""
    return f"{base_lsn:0{NAME_HEX_DIGITS}x}{INDEX_SUFFIX}"


def parse_segment_name(name: str) -> int | None:
    """Base LSN encoded in a segment file name, or ``None`` if ``name`` is not a segment."""
    stem, dot, suffix = name.partition(".")
    if "." + suffix != SEGMENT_SUFFIX or not dot or len(stem) != NAME_HEX_DIGITS:
        return None
    try:
        return int(stem, 16)
    except ValueError:
        return None
