"""Processes the tests started, checked from outside."""

from __future__ import annotations

import os


def gone(pid: int) -> bool:
    """Whether no process ``pid`` exists any more (exited and reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False
