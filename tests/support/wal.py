"""Deterministic WAL writers and short-hand records: ``kv``, ``open_writer`` (a fixed clock
from ``START_US``), ``writer_at`` (a shard id and a given clock), ``flip`` (one damaged bit), and
``checkpoints`` (a shard's checkpoint records)."""

from __future__ import annotations

from pathlib import Path

from moonish.clock import FixedClock
from moonish.log.format import RecordType
from moonish.log.payloads import decode_payload
from moonish.log.reader import ShardReader
from moonish.log.records import Checkpoint, KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions

START_US = 1_795_000_000_000_000


def kv(key: bytes, value: bytes = b"v", command: bytes = b"SET", db: int = 0) -> KvCommand:
    return KvCommand(db, (command, key, value) if command == b"SET" else (command, key))


def open_writer(path: Path, **options: object) -> WalWriter:
    opts = {"fsync": FsyncPolicy.NEVER, **options}
    return WalWriter(path, WriterOptions(**opts), FixedClock(START_US, 1000))  # type: ignore[arg-type]


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def writer_at(shard: Path, k: int, clock: FixedClock, **options: object) -> WalWriter:
    opts = {"shard_id": k, "fsync": FsyncPolicy.NEVER, "heartbeat_ms": None, **options}
    return WalWriter(shard, WriterOptions(**opts), clock)  # type: ignore[arg-type]


def checkpoints(shard: Path) -> list[Checkpoint]:
    """The checkpoint records of ``shard``'s log, in LSN order."""
    reader = ShardReader(str(shard))
    found = []
    try:
        while frames := reader.poll(10_000):
            for frame in frames:
                if frame.record_type == RecordType.CHECKPOINT:
                    record = decode_payload(frame.record_type, frame.payload)
                    assert isinstance(record, Checkpoint)
                    found.append(record)
    finally:
        reader.close()
    return found
