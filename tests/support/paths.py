"""Where things are: the repository's root (the tests' child processes run there, with it on
``PYTHONPATH``) and the real AOF slice of fixtures/redis-aof/."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLICE = ROOT / "fixtures" / "redis-aof" / "slice" / "appendonlydir"
