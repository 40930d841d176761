"""Where the benchmarks find their input and put their data, and their shared settings."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench-data"
AOF = ROOT / "fixtures" / "redis-aof" / "mixed" / "appendonlydir"
MOONISH = [sys.executable, "-c", "from cli.main import entry; entry()"]
READ_RECORDS = 1_000_000
"""Records of the WAL the read benchmarks read (bench.run ``read``, bench.serve catch-up)."""
