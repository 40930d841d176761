"""The ``moonish`` command: in a child process from the repository's root (``run``), or in
process (``cli``)."""

from __future__ import annotations

import signal
import subprocess
import sys

from cli.main import main
from tests.support.paths import ROOT

MOONISH = [sys.executable, "-c", "from cli.main import entry; entry()"]


def run(*args: str, timeout_s: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*MOONISH, *args], capture_output=True, timeout=timeout_s, check=False, cwd=ROOT
    )


def cli(*args: str) -> int:
    return main([*args])


def default_sigint() -> None:
    """``preexec_fn`` of a child the test stops with SIGINT: take Ctrl-C as a terminal
    delivers it, even when the tests run from a background job, whose children inherit SIGINT
    as ignored (Python then installs no KeyboardInterrupt handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
