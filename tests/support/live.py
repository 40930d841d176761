"""Capture threads a test started and has not stopped yet, so that a test that fails before
its ``finish()`` does not leave a capture writing into the next tests (the descriptor guard in
``tests/conftest.py`` stops them first)."""

from __future__ import annotations

import threading

_RUNNING: dict[threading.Thread, threading.Event] = {}


def started(thread: threading.Thread, stop: threading.Event) -> None:
    """Note a capture ``thread`` that ends once ``stop`` is set."""
    _RUNNING[thread] = stop


def stopped(thread: threading.Thread) -> None:
    _RUNNING.pop(thread, None)


def stop_all(timeout_s: float = 60) -> None:
    """Set every noted thread's stop event and join it (up to ``timeout_s`` each)."""
    for thread, stop in list(_RUNNING.items()):
        stop.set()
        thread.join(timeout_s)
        stopped(thread)
