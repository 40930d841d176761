"""The garbage-collector settings of hot loops and long-running processes (moonish.gcpolicy)."""

from __future__ import annotations

import subprocess
import sys


def test_settle_gc_freezes_what_exists_and_raises_the_thresholds() -> None:
    """moonish.gcpolicy.settle_gc, in a process of its own (it is process-wide)."""
    script = (
        "import gc\nfrom moonish.gcpolicy import GC_THRESHOLDS, settle_gc\n"
        "assert gc.get_freeze_count() == 0\nsettle_gc()\n"
        "assert gc.get_freeze_count() > 1000 and gc.get_threshold() == GC_THRESHOLDS\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, check=True)
    assert out.stdout == b"ok\n"
