"""Where the benchmarks' helper processes run: on the cores the benchmark is not pinned to."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def elsewhere() -> Iterator[None]:
    """Within the block, this process (and so every child it starts, which inherits the
    affinity, with all its threads) runs on the cores it was not pinned to; the pinning is
    restored after. On a machine with one core, nothing changes."""
    mine = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - mine
    os.sched_setaffinity(0, others or mine)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
