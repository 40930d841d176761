"""The ``moonish`` command: in a child process from the repository's root (``run``), or in
process (``cli``)."""

from __future__ import annotations

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
