"""Fixtures of the tests that run a redis-server."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    path = tmp_path / "redis"
    path.mkdir()
    return path
