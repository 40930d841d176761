"""Shared helpers: deterministic writers and short-hand records; a guard against file
descriptors left open by a test."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
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


def _open_files() -> dict[str, str]:
    """This process's open descriptors that name files (not sockets, pipes or anon inodes)."""
    files = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # the descriptor listdir itself used
        if target.startswith("/"):
            files[fd] = target
    return files


@pytest.fixture(autouse=True)
def no_descriptor_leaks() -> Iterator[None]:
    """Fail a test that leaves segment or other files open. Readers and writers keep raw
    descriptors; leaked by the hundred they pushed the pytest process past 1024 descriptors,
    where PySpark's callback server (``select()``) dies and a ``foreachBatch`` query hangs."""
    before = _open_files()
    yield
    gc.collect()
    leaked = {fd: path for fd, path in _open_files().items() if before.get(fd) != path}
    assert not leaked, f"descriptors left open: {sorted(leaked.values())}"
