"""Helpers for the read path's hot loops."""

from __future__ import annotations

import gc


class paused_gc:
    """Pause Python's cyclic garbage collector for the block (nests; restores the old state).

    The scan and encode loops allocate several container objects per record and create no
    reference cycles, so collections during them find nothing to free and only cost time.
    Reference counting still frees everything as usual. A class, not ``contextlib``: this
    runs once per batch on the read path.
    """

    __slots__ = ("_was_enabled",)

    def __enter__(self) -> None:
        self._was_enabled = gc.isenabled()
        gc.disable()

    def __exit__(self, *exc: object) -> None:
        if self._was_enabled:
            gc.enable()


GC_THRESHOLDS = (50_000, 50, 100)
"""Garbage collector thresholds (``gc.set_threshold``) of the long-running processes (the
server, live capture), instead of Python's (700, 10, 10)."""


def settle_gc() -> None:
    """For a process that runs on with what it holds now: keep the objects that exist out of
    the collector's passes (``gc.freeze``: they are not walked again) and collect the
    youngest generation every ``GC_THRESHOLDS[0]`` allocations. Their loops allocate many
    short-lived containers and make no cycles worth collecting often. Collections still
    run, so a cycle among objects made later is freed; one among the frozen objects is not
    (they are freed by reference counting only). Python docs, ``gc.freeze``,
    ``gc.set_threshold``."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class raised_gc_thresholds:
    """Within the block, the garbage collector's thresholds are :data:`GC_THRESHOLDS`
    (``gc.set_threshold``); the previous ones are restored after. For a batch job that
    allocates many short-lived containers per item and makes no cycles worth collecting often
    (``wal import-aof``; docs/benchmarks.md §10 measures it). Collections still run, so
    cycles are still freed."""

    __slots__ = ("_before",)

    def __enter__(self) -> None:
        self._before = gc.get_threshold()
        gc.set_threshold(*GC_THRESHOLDS)

    def __exit__(self, *exc: object) -> None:
        gc.set_threshold(*self._before)
