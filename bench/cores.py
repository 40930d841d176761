"""Where the benchmarks' helper processes run: on the cores the benchmark is not pinned to."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator


@contextlib.contextmanager
def elsewhere() -> Iterator[None]:
    """Within the block, the calling thread (and so every child process it starts, which
    inherits its affinity, with all the child's threads) runs on the cores it was not pinned
    to; the pinning is restored after. Other threads of this process keep their cores. On a
    machine with one core, nothing changes."""
    mine = os.sched_getaffinity(0)
    with on_cores((set(range(os.cpu_count() or 1)) - mine) or mine):
        yield


@contextlib.contextmanager
def on_cores(cores: Iterable[int]) -> Iterator[None]:
    """Within the block, the calling thread (and the processes it starts) runs on ``cores``;
    its pinning is restored after."""
    mine = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cores)
    try:
        yield
    finally:
        os.sched_setaffinity(0, mine)
