"""Shared helpers: deterministic writers and short-hand records."""

from __future__ import annotations

from pathlib import Path

import pytest

from moonish.clock import FixedClock
from moonish.log.records import KvCommand
from moonish.log.writer import FsyncPolicy, WalWriter, WriterOptions

START_US = 1_795_000_000_000_000


def kv(key: bytes, value: bytes = b"v", command: bytes = b"SET", db: int = 0) -> KvCommand:
    return KvCommand(db, (command, key, value) if command == b"SET" else (command, key))


def open_writer(path: Path, **options: object) -> WalWriter:
    opts = {"fsync": FsyncPolicy.NEVER, **options}
    return WalWriter(path, WriterOptions(**opts), FixedClock(START_US, 1000))  # type: ignore[arg-type]


@pytest.fixture
def shard(tmp_path: Path) -> Path:
    return tmp_path / "shard-0"
