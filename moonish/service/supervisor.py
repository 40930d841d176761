"""The supervisor: starts a pipeline's parts in order, restarts a part that crashes, stops the
pipeline on a failure no restart cures, and stops every part on request.

Order: the source starts first. An import (``aof``, ``rdb``) runs to its end before the
other parts start; a live capture runs on, and the other parts start once every shard of the
data directory holds a log (a reading command refuses a directory without one). Then each
part runs until the pipeline stops.

Exits (cli/errors.py's kinds): 2, 3, 4 and 5 are not cured by a restart, so the pipeline
stops with the part's status (:class:`PartFailedError`). Anything else (1: a crash; 6:
unavailable, such as a lock still held or a broker down; a signal; 0 from a part that should
run on) restarts the part after a :class:`Backoff` delay; an import that ends with 0 is done.

A stop (``stop`` set: SIGTERM or SIGINT) sends SIGTERM to every part, waits up to
``stop_timeout_ms`` for them to exit, then SIGKILLs what is left.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .backoff import Backoff
from .children import Child
from .errors import EXIT_MEANINGS, PartFailedError

NOT_RETRYABLE = frozenset({2, 3, 4, 5})
"""Exit statuses that stop the pipeline: usage, not retained, corruption, unsupported."""

_TICK_S = 0.05


@dataclass(frozen=True)
class Event:
    """Something the supervisor did or saw, for its log.

    Attributes:
        level: ``info``, ``warning`` or ``error``.
        part: the part's section, or ``supervisor``.
        event: what (``started``, ``exited``, ``restarting``, ``finished``, ``failed``,
            ``stopping``, ``killed``, ``stopped``).
        text: a sentence.
        fields: the same as values (``pid``, ``exit_code``, ``restarts``, ``delay_ms``...).
    """

    level: str
    part: str
    event: str
    text: str
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class PartSpec:
    """A part as the supervisor runs it.

    Attributes:
        name: the section.
        argv: the child's program and arguments.
        shown: its command line as logged (secrets masked).
        once: it finishes (an import): done once it exits 0.
    """

    name: str
    argv: tuple[str, ...]
    shown: str
    once: bool = False


@dataclass(frozen=True)
class Settings:
    """The supervisor's timing (``[supervisor]`` in the file)."""

    stop_timeout_ms: int = 30_000
    restart_backoff_ms: int = 500
    restart_max_backoff_ms: int = 30_000
    restart_reset_ms: int = 60_000


@dataclass
class _State:
    spec: PartSpec
    backoff: Backoff
    child: Child | None = None
    started_s: float = 0.0
    next_start_s: float | None = 0.0  # None: not to be started (done)
    starts: int = 0
    restarts: int = 0
    done: bool = False


class Supervisor:
    """Runs ``parts`` (source first) until stopped or until a part fails for good.

    Args:
        parts: in start order.
        settings: timing.
        on_event: the supervisor's log (called from the supervisor's thread).
        on_output: each line a part writes: (part, ``stderr`` or ``stdout``, line), from
            reader threads.
        ready: whether the parts after the first may start (the data directory holds its
            shards); ``None``: at once.
        env: the parts' environment (``None``: this process's).
    """

    def __init__(
        self,
        parts: Sequence[PartSpec],
        settings: Settings,
        on_event: Callable[[Event], None],
        on_output: Callable[[str, str, str], None],
        ready: Callable[[], bool] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.on_event = on_event
        self.on_output = on_output
        self.ready = ready
        self.env = env
        self.parts = [
            _State(
                part,
                Backoff(
                    settings.restart_backoff_ms,
                    settings.restart_max_backoff_ms,
                    settings.restart_reset_ms,
                ),
            )
            for part in parts
        ]

    @property
    def restarts(self) -> dict[str, int]:
        """How often each part was restarted."""
        return {state.spec.name: state.restarts for state in self.parts}

    def running(self) -> dict[str, bool]:
        """Whether each part is as it should be: running, or (an import) done."""
        return {s.spec.name: s.child is not None or s.done for s in self.parts}

    def pids(self) -> dict[str, int]:
        """The running parts' process ids."""
        return {s.spec.name: s.child.pid for s in self.parts if s.child is not None}

    def run(self, stop: threading.Event) -> None:
        """Run until ``stop`` is set (then stop every part) or every part is done.

        Raises:
            PartFailedError: a part exited with 2, 3, 4 or 5; the other parts were stopped.
        """
        failed: PartFailedError | None = None
        try:
            while not stop.is_set():
                now = time.monotonic()
                for state in self.parts:
                    failed = failed or self._check(state, now)
                if failed is not None:
                    break
                if all(state.done for state in self.parts):
                    self._event("info", "supervisor", "finished", "every part is done")
                    return
                self._start_due(now)
                stop.wait(_TICK_S)
        finally:
            self._stop_all("a part failed" if failed is not None else "asked to stop")
        if failed is not None:
            raise failed

    def _start_due(self, now: float) -> None:
        for index, state in enumerate(self.parts):
            if state.done or state.child is not None:
                continue
            if state.next_start_s is None or now < state.next_start_s:
                continue
            if index > 0 and state.starts == 0 and not self._upstream_ready():
                return  # parts start in order
            self._start(state, now)

    def _upstream_ready(self) -> bool:
        source = self.parts[0]
        if source.spec.once:
            return source.done
        if source.child is None:
            return False
        return self.ready is None or self.ready()

    def _start(self, state: _State, now: float) -> None:
        spec = state.spec
        name = spec.name

        def output(stream: str, line: str) -> None:
            self.on_output(name, stream, line)

        try:
            state.child = Child(spec.argv, output, self.env)
        except OSError as exc:
            raise PartFailedError(name, 1, spec.shown) from exc
        state.started_s = now
        state.starts += 1
        self._event(
            "info",
            name,
            "started",
            f"started (pid {state.child.pid}): {spec.shown}",
            {"pid": state.child.pid, "starts": state.starts, "restarts": state.restarts},
        )

    def _check(self, state: _State, now: float) -> PartFailedError | None:
        child = state.child
        if child is None:
            return None
        code = child.poll()
        if code is None:
            return None
        child.signal(signal.SIGKILL)  # what the part started and left behind (its process group)
        child.finish()
        state.child = None
        name = state.spec.name
        ran_ms = (now - state.started_s) * 1000
        fields: dict[str, object] = {"pid": child.pid, "exit_code": code, "ran_ms": round(ran_ms)}
        what = _status(code)
        if state.spec.once and code == 0:
            state.done = True
            state.next_start_s = None
            self._event("info", name, "finished", "finished (exit 0)", fields)
            return None
        if code in NOT_RETRYABLE:
            state.done = True
            state.next_start_s = None
            self._event("error", name, "failed", f"exited with {what}: not retryable", fields)
            return PartFailedError(name, code, state.spec.shown)
        delay_ms = state.backoff.delay_ms(ran_ms)
        state.restarts += 1
        state.next_start_s = now + delay_ms / 1000
        fields.update(restarts=state.restarts, delay_ms=delay_ms)
        self._event(
            "warning",
            name,
            "restarting",
            f"exited with {what}; restart {state.restarts} in {delay_ms} ms",
            fields,
        )
        return None

    def _stop_all(self, why: str) -> None:
        running = [state for state in self.parts if state.child is not None]
        if not running:
            return
        self._event(
            "info",
            "supervisor",
            "stopping",
            f"{why}: stopping {len(running)} part(s) (SIGTERM)",
            {"parts": [state.spec.name for state in running]},
        )
        for state in running:
            assert state.child is not None
            state.child.signal(signal.SIGTERM)
        deadline = time.monotonic() + self.settings.stop_timeout_ms / 1000
        while time.monotonic() < deadline and any(
            state.child is not None and state.child.poll() is None for state in running
        ):
            time.sleep(_TICK_S)
        for state in running:
            child = state.child
            assert child is not None
            code = child.poll()
            if code is None:
                child.signal(signal.SIGKILL)
                code = child.process.wait()
                self._event(
                    "warning",
                    state.spec.name,
                    "killed",
                    f"still running after {self.settings.stop_timeout_ms} ms: killed (SIGKILL)",
                    {"pid": child.pid},
                )
            child.finish()
            child.signal(signal.SIGKILL)
            state.child = None
            self._event(
                "info",
                state.spec.name,
                "stopped",
                f"stopped ({_status(code)})",
                {"pid": child.pid, "exit_code": code},
            )

    def _event(
        self,
        level: str,
        part: str,
        event: str,
        text: str,
        fields: Mapping[str, object] | None = None,
    ) -> None:
        self.on_event(Event(level, part, event, text, dict(fields or {})))


def _status(code: int) -> str:
    if code < 0:
        return f"signal {-code}"
    return f"exit {code} ({EXIT_MEANINGS.get(code, 'unexpected')})"


def shards_ready(data_dir: str, shards: int | None) -> Callable[[], bool]:
    """Whether each of ``data_dir``'s shards (``shard-0`` to ``shard-<shards-1>``; when
    ``shards`` is ``None``, ``shard-0``) holds a log: its ``control.json`` or a segment."""

    def ready() -> bool:
        for shard in range(shards or 1):
            try:
                entries = os.listdir(os.path.join(data_dir, f"shard-{shard}"))
            except OSError:
                return False
            if "control.json" not in entries and not any(e.endswith(".seg") for e in entries):
                return False
        return True

    return ready
