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
