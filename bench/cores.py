"""Where the benchmarks' helper processes run: on the cores the benchmark is not pinned to."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def elsewhere() -> Iterator[None]:
    """Within the block, the calling thread (and so every child process it starts, which
    inherits its affinity, with all the child's threads) runs on the cores it was not pinned
    to; the pinning is restored after. Other threads of this process keep their cores. On a
    machine with one core, nothing changes."""
    mine = os.sched_getaffinity(0)
    others = set(range(os.cpu_count() or 1)) - mine
    os.sched_setaffinity(0, others or mine)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
