"""Golden scenarios: how each WAL under fixtures/wal/ is made, and how its golden output is read.

``python -m tests.support.golden`` (``make golden``) rebuilds fixtures/wal/<scenario>/ and
fixtures/golden/<scenario>.ndjson. Nothing else writes them; tests/log/test_golden_fixtures.py
compares both byte for byte with what the current code produces.

A golden file is what successive ``cdc read --messages`` calls print, resuming from each
cursor, with limit 7 and a fixed clock: for every batch, the cursor line and then its
envelopes (checkpoints and messages included); the reading
ends at the first idle batch (its cursor line is the last line) or with one ``{"error": ...}``
line naming the kind, the file (its name only), the byte offset and the LSN.

Scenarios named ``v1-*`` are frozen: their WALs were written in format version 1 by moonish
at commit 5fc0260 (the builders of this module then, and ``v1-length-flip``: 20 records of
``sample_records`` with bit 2 of byte 5 of the tenth frame flipped, so that its length points
past the end of the file). No builder can write them again; ``make golden`` only re-reads them.
They hold readers to reading version 1 (docs/wal-format.md, "Versions").
"""

from __future__ import annotations

import os
import shutil
import struct
import sys
from collections.abc import Callable
from pathlib import Path

import crc32c
import orjson

from moonish.cdc import shard_read
from moonish.clock import FixedClock
from moonish.errors import MoonishError
from moonish.log.control import Control, store_control
from moonish.log.format import FRAME_HEADER_BYTES, SEGMENT_HEADER_BYTES
from moonish.log.frames import LAYOUTS
from moonish.log.heartbeat import ClosedTime, load_closed_time, store_closed_time
from moonish.log.records import Checkpoint, EntityKind, GraphMutation, KvCommand, TemporalUpsert
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions
from moonish.redis.aof.importer import import_aof
from tests.support.paths import ROOT

FIXTURES = ROOT / "fixtures"
START_US = 1_795_000_000_000_000
READ_CLOCK_US = 1_796_000_000_000_000
GOLDEN_LIMIT = 7


def writer(path: Path, segment_bytes: int = 4096, shard_id: int = 0) -> WalWriter:
    """A deterministic writer: fixed clock stepping 1 ms, no fsync, small index interval."""
    options = WriterOptions(
        shard_id=shard_id,
        segment_bytes=segment_bytes,
        fsync=FsyncPolicy.NEVER,
        index_interval_bytes=256,
    )
    return WalWriter(path, options, FixedClock(START_US, 1000))


def kv(*argv: bytes, db: int = 0, key_pos: int = 1) -> KvCommand:
    return KvCommand(db, tuple(argv), key_pos)


def sample_records(count: int) -> list[KvCommand]:
    return [kv(b"SET", b"key:%d" % i, b"value-%d" % i) for i in range(count)]


def segments(path: Path) -> list[Path]:
    return sorted(path.glob("*.seg"))


def frame_spans(segment: Path) -> list[tuple[int, int]]:
    """``(start, end)`` of each frame of ``segment``, by the length fields (either version)."""
    data = segment.read_bytes()
    (version,) = struct.unpack_from("<H", data, 8)
    overhead = LAYOUTS[version].overhead
    spans, pos = [], SEGMENT_HEADER_BYTES
    while pos + 8 <= len(data):
        (length,) = struct.unpack_from("<I", data, pos + 4)
        spans.append((pos, pos + overhead + length))
        pos += overhead + length
    return spans


def frame_offsets(segment: Path) -> list[int]:
    """Where each frame of ``segment`` starts, by the length fields (of either version)."""
    return [start for start, _ in frame_spans(segment)]


def as_if_killed(path: Path, started_at: int = 1, shard: int = 0, heard: int | None = None) -> None:
    """Leave control.json as a writer that opened the shard at LSN ``started_at`` and was
    killed leaves it (not closed cleanly), for scenarios that cut a segment to simulate the
    crash: a clean close would have recorded the end the cut takes away. So would its last
    heartbeat (moonish.log.heartbeat is evidence of LSNs used): ``heartbeat.json``, if there
    is one, names ``heard`` as its next LSN (default ``started_at``: the writer never
    published one of its own)."""
    store_control(str(path), Control(shard, started_at, False))
    closed = load_closed_time(str(path))
    if closed is not None:
        next_lsn = started_at if heard is None else heard
        store_closed_time(str(path), ClosedTime(closed.shard, next_lsn, closed.closed_us))


# -- scenarios ---------------------------------------------------------------------------------


def mixed_records(path: Path) -> None:
    """Every record type, batches, binary and non-ASCII keys, rotation across segments."""
    with writer(path, segment_bytes=700) as w:
        w.append(kv(b"SET", b"user:1", b"alice"))
        w.append(kv(b"SET", b"\xff\xfe\x00bin", b"\x00\x01\x02"))
        w.append(kv(b"SET", "übergröße:ключ".encode(), "значение 🚀".encode()))
        w.append(kv(b"HSET", b"h", b"f1", b"v1", db=2))
        w.append(kv(b"HDEL", b"h", b"f1", db=2))
        w.append_batch([kv(b"DEL", b"a"), kv(b"DEL", b"b")])
        w.append_batch(
            [kv(b"RENAME", b"a{t}", b"b{t}"), kv(b"RENAME", b"a{t}", b"b{t}", key_pos=2)]
        )
        w.append_batch([kv(b"MSET", b"m1", b"1"), kv(b"MSET", b"m2", b"2"), kv(b"INCR", b"c")])
        w.append(kv(b"PEXPIREAT", b"user:1", b"1795267737253"))
        w.append(kv(b"SET", b'{"_b64":"AAE="}', b"looks like an envelope marker"))
        w.append(TemporalUpsert(b"price:eur", b"1.08", 1_794_000_000_000, 1_795_000_000_000))
        w.append(GraphMutation(b"node:7", EntityKind.NODE, None, 1_795_000_000_000, b'{"a":1}'))
        w.append(GraphMutation(b"edge:7-8", EntityKind.EDGE, 1_796_000_000_000, 1_795_000_000_001))
        w.append(Checkpoint(13, "snapshot-0000000013"))
        w.append(kv(b"FLUSHDB", db=3, key_pos=0))
        w.append(kv(b"FLUSHALL", key_pos=0))


def torn_tail(path: Path) -> None:
    """A writer died mid-record: the last frame is cut short."""
    with writer(path) as w:
        for record in sample_records(5):
            w.append(record)
    seg = segments(path)[-1]
    last = frame_offsets(seg)[-1]
    os.truncate(seg, last + FRAME_HEADER_BYTES + 3)
    as_if_killed(path)


def torn_batch(path: Path) -> None:
    """A writer died mid-batch: two of three frames of the last batch were written."""
    with writer(path) as w:
        for record in sample_records(3):
            w.append(record)
        w.append_batch(sample_records(3))
    seg = segments(path)[-1]
    os.truncate(seg, frame_offsets(seg)[-1])
    as_if_killed(path)


def zero_filled_tail(path: Path) -> None:
    """The file system left zeros after the last record (a crash after the size grew)."""
    with writer(path) as w:
        for record in sample_records(3):
            w.append(record)
    with open(segments(path)[-1], "ab") as handle:
        handle.write(b"\x00" * 100)
    as_if_killed(path)


def frame_checksum_mismatch(path: Path) -> None:
    """A flipped bit in the third record, valid records after it: corruption."""
    with writer(path) as w:
        for record in sample_records(6):
            w.append(record)
    seg = segments(path)[-1]
    offset = frame_offsets(seg)[2] + FRAME_HEADER_BYTES + 2
    data = bytearray(seg.read_bytes())
    data[offset] ^= 0x01
    seg.write_bytes(bytes(data))


def sealed_segment_truncated(path: Path) -> None:
    """A sealed (not newest) segment lost its last bytes: corruption, not a torn tail."""
    with writer(path, segment_bytes=400) as w:
        for record in sample_records(12):
            w.append(record)
    first = segments(path)[0]
    os.truncate(first, first.stat().st_size - 5)


def bad_magic(path: Path) -> None:
    """The first segment's header magic is damaged."""
    with writer(path) as w:
        w.append(sample_records(1)[0])
    seg = segments(path)[0]
    data = bytearray(seg.read_bytes())
    data[0:8] = b"NOTAWAL\x00"
    seg.write_bytes(bytes(data))


def unsupported_version(path: Path) -> None:
    """A segment written by a future moonish (version 3, valid header checksum)."""
    with writer(path) as w:
        w.append(sample_records(1)[0])
    seg = segments(path)[0]
    data = bytearray(seg.read_bytes())
    struct.pack_into("<H", data, 8, 3)
    struct.pack_into("<I", data, 36, crc32c.crc32c(bytes(data[:36])))
    seg.write_bytes(bytes(data))


def length_flip(path: Path) -> None:
    """A flipped bit in the length field of the tenth of 20 records, in the active segment:
    the length points past the end of the file, yet valid records follow. The header checksum
    tells this damage from a record cut short: corruption, never a torn tail."""
    with writer(path) as w:
        for record in sample_records(20):
            w.append(record)
    seg = segments(path)[-1]
    data = bytearray(seg.read_bytes())
    data[frame_offsets(seg)[9] + 5] ^= 0x04  # the length + 1024
    seg.write_bytes(bytes(data))


def _aof_slice_shard(shard: int) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        staging = path.parent / f".aof-slice-{shard}"
        shutil.rmtree(staging, ignore_errors=True)
        import_aof(
            FIXTURES / "redis-aof" / "slice" / "appendonlydir",
            staging,
            2,
            clock=FixedClock(START_US, 1000),
        )
        shutil.move(str(staging / f"shard-{shard}"), str(path))
        shutil.rmtree(staging)
        (path / "LOCK").unlink()
        (path / "heartbeat.json").unlink()

    build.__doc__ = f"Shard {shard} of 2 after importing the real AOF slice."
    return build


SCENARIOS: dict[str, Callable[[Path], None]] = {
    "mixed-records": mixed_records,
    "torn-tail": torn_tail,
    "torn-batch": torn_batch,
    "zero-filled-tail": zero_filled_tail,
    "frame-checksum-mismatch": frame_checksum_mismatch,
    "sealed-segment-truncated": sealed_segment_truncated,
    "bad-magic": bad_magic,
    "unsupported-version": unsupported_version,
    "length-flip": length_flip,
    "aof-slice-shard-0": _aof_slice_shard(0),
    "aof-slice-shard-1": _aof_slice_shard(1),
}


FROZEN_V1 = (
    "v1-mixed-records",
    "v1-torn-tail",
    "v1-torn-batch",
    "v1-zero-filled-tail",
    "v1-frame-checksum-mismatch",
    "v1-sealed-segment-truncated",
    "v1-length-flip",
    "v1-aof-slice-shard-0",
)
"""Scenarios whose WALs are kept as written by moonish at commit 5fc0260 (format 1)."""


def build(name: str, path: Path) -> None:
    """Build scenario ``name`` into the (new) directory ``path``; no lock file is left."""
    shutil.rmtree(path, ignore_errors=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    SCENARIOS[name](path)
    (path / "LOCK").unlink(missing_ok=True)
    (path / "heartbeat.json").unlink(missing_ok=True)  # closed time: not part of the WAL


def read_golden(path: Path) -> bytes:
    """The golden text for the WAL in ``path`` (see the module docstring)."""
    lines: list[bytes] = []
    cursor = 0
    clock = FixedClock(READ_CLOCK_US)
    while True:
        try:
            result = shard_read.read(path, cursor, GOLDEN_LIMIT, clock=clock, messages=True)
        except MoonishError as error:
            detail = {
                "kind": error.kind,
                "message": error.message,
                "file": os.path.basename(error.path or ""),
                "offset": error.offset,
                "lsn": error.lsn,
            }
            lines.append(orjson.dumps({"error": detail}))
            break
        lines.append(str(result.cursor).encode())
        lines.extend(event.envelope for event in result.events)
        if not result.events:
            break
        cursor = result.cursor.lsn
    return b"\n".join(lines) + b"\n"


def main() -> None:
    for name in [*SCENARIOS, *FROZEN_V1]:
        wal = FIXTURES / "wal" / name
        if name in SCENARIOS:
            build(name, wal)
        golden = FIXTURES / "golden" / f"{name}.ndjson"
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(read_golden(wal))
        print(f"wrote {wal.relative_to(ROOT)} and {golden.relative_to(ROOT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
