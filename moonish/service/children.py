"""One part's child process: started in its own process group, tied to the supervisor's life
(Linux's ``PR_SET_PDEATHSIG``), its output relayed line by line.

Own process group: a terminal's Ctrl-C reaches the supervisor only, which stops the parts in
order, and a stop reaches what a part started itself (capture's worker processes, Spark's
JVM). ``PR_SET_PDEATHSIG`` with SIGTERM: when the supervisor dies, even by SIGKILL, the kernel
sends each part SIGTERM, and each stops as it does on SIGTERM (synced, acknowledged,
committed), so no orphan keeps a shard's lock and the next start finds it free.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import IO

_PR_SET_PDEATHSIG = 1

Output = Callable[[str, str], None]
"""Called with (``"stderr"`` or ``"stdout"``, one line without its newline)."""


def _prctl() -> Callable[..., int] | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    function = getattr(libc, "prctl", None)
    return function if callable(function) else None


_PRCTL = _prctl()  # looked up before any fork: the child only calls it


def _die_with(parent_pid: int) -> Callable[[], None]:
    def setup() -> None:  # runs in the child between fork and exec: nothing that locks
        if _PRCTL is not None:
            _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if os.getppid() != parent_pid:  # the supervisor died before the prctl
            os._exit(1)

    return setup


class Child:
    """A running part.

    Args:
        argv: the program and its arguments.
        output: gets each line of the child's stderr and stdout, from reader threads.
        env: the child's environment (``None``: the supervisor's).
    """

    def __init__(
        self, argv: Sequence[str], output: Output, env: Mapping[str, str] | None = None
    ) -> None:
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=None if env is None else dict(env),
            process_group=0,
            preexec_fn=_die_with(os.getpid()),
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        self._threads = [
            threading.Thread(
                target=_relay, args=(stream, name, output), daemon=True, name=f"relay-{name}"
            )
            for stream, name in ((self.process.stderr, "stderr"), (self.process.stdout, "stdout"))
        ]
        for thread in self._threads:
            thread.start()

    @property
    def pid(self) -> int:
        """The child's process id (also its process group's)."""
        return self.process.pid

    def poll(self) -> int | None:
        """Its exit status (negative: the signal that killed it), or ``None`` while it runs."""
        return self.process.poll()

    def signal(self, signum: int) -> None:
        """Send ``signum`` to the child's process group (nothing when it is gone)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signum)

    def finish(self, timeout_s: float = 2.0) -> None:
        """Wait (at most ``timeout_s``) for the last lines of an exited child to be relayed
        (a grandchild may hold its pipes open longer)."""
        for thread in self._threads:
            thread.join(timeout_s)


def _relay(stream: IO[bytes], name: str, output: Output) -> None:
    with stream:
        for raw in iter(stream.readline, b""):
            output(name, raw.decode(errors="replace").rstrip("\r\n"))
