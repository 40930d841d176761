"""The progress lines of the commands whose writers rebuild shards as they open them (``wal
capture``, ``wal import-aof``, ``wal import-rdb``)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from ..logs import StderrLog


def rebuild_lines(log: StderrLog, quiet: bool = False) -> Callable[[str, int, int], None]:
    """A callback for ``on_recovery``: a ``rebuild`` line on ``log`` when a shard's writer
    starts rebuilding its keyspace, then at most one a second per shard. Being Python, it
    also lets a pending Ctrl-C raise between two batches of records."""
    shown: dict[str, float] = {}

    def show(shard_dir: str, lsn: int, last_lsn: int) -> None:
        now = time.monotonic()
        if quiet or now - shown.get(shard_dir, -1.0) < 1.0:
            return
        if lsn == last_lsn and shard_dir in shown:  # done: the next line says what follows
            return
        shown[shard_dir] = now
        log.line(
            "rebuild",
            f"{os.path.basename(shard_dir)}: rebuilding the keyspace: LSN {lsn:,} of {last_lsn:,}",
            {"shard": _shard(shard_dir), "shard_dir": shard_dir, "lsn": lsn, "last_lsn": last_lsn},
        )

    return show


def _shard(shard_dir: str) -> int | None:
    """The shard number of ``.../shard-<k>``, or ``None``."""
    name = os.path.basename(os.path.normpath(shard_dir))
    digits = name.removeprefix("shard-")
    return int(digits) if digits != name and digits.isdigit() else None
