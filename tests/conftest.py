"""The markers of tests that need a service and of slow ones, the ``shard`` fixture, and a
guard against file descriptors left open by a test."""

from __future__ import annotations

import gc
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import live
from tests.support.markers import MARKERS, SLOW


def pytest_configure(config: pytest.Config) -> None:
    for name, needs in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {needs}")
    config.addinivalue_line("markers", f"slow: {SLOW}")


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
    live.stop_all()  # a capture a failed test left running
    gc.collect()
    leaked = {fd: path for fd, path in _open_files().items() if before.get(fd) != path}
    assert not leaked, f"descriptors left open: {sorted(leaked.values())}"
