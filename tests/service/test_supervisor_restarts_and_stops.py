"""The supervisor with stand-in parts (small Python programs): a crash is restarted after a
backoff and counted, a status no restart cures stops the pipeline with that status, a stop
sends SIGTERM then SIGKILL, an import runs to its end before the rest starts, and a supervisor
killed with SIGKILL takes its parts with it (SIGTERM from the kernel)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from moonish.service.errors import PartFailedError
from moonish.service.supervisor import Event, PartSpec, Settings, Supervisor, shards_ready
from tests.support.paths import ROOT
from tests.support.processes import gone

FAST = Settings(
    stop_timeout_ms=2000, restart_backoff_ms=50, restart_max_backoff_ms=200, restart_reset_ms=60_000
)


def part(name: str, code: str, once: bool = False) -> PartSpec:
    return PartSpec(name, (sys.executable, "-c", textwrap.dedent(code)), f"<{name}>", once)


class Recorder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.lines: list[tuple[str, str, str]] = []

    def event(self, event: Event) -> None:
        self.events.append(event)

    def output(self, part: str, stream: str, line: str) -> None:
        self.lines.append((part, stream, line))

    def kinds(self, name: str) -> list[str]:
        return [event.event for event in self.events if event.part == name]


def supervise(
    parts: list[PartSpec], settings: Settings = FAST
) -> tuple[Supervisor, Recorder, threading.Event, threading.Thread, list[BaseException]]:
    recorder = Recorder()
    supervisor = Supervisor(parts, settings, recorder.event, recorder.output)
    stop = threading.Event()
    raised: list[BaseException] = []

    def run() -> None:
        try:
            supervisor.run(stop)
        except BaseException as exc:  # the test asserts on it
            raised.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    return supervisor, recorder, stop, thread, raised


def wait_for(condition: object, what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


@pytest.mark.slow
def test_a_crashed_part_is_restarted_with_backoff_and_counted(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    crashing = part(
        "source",
        f"""
        import sys
        with open({str(runs)!r}, "a") as f: f.write("x")
        print("crashing", file=sys.stderr, flush=True)
        sys.exit(1)
    """,
    )
    steady = part("serve", "import time; print('up', flush=True); time.sleep(60)")
    supervisor, recorder, stop, thread, raised = supervise([crashing, steady])
    wait_for(lambda: runs.exists() and len(runs.read_text()) >= 4, "four runs")
    stop.set()
    thread.join(30)
    assert not raised
    restarts = [e for e in recorder.events if e.event == "restarting"]
    assert [e.fields["delay_ms"] for e in restarts[:3]] == [50, 100, 200]
    assert [e.fields["restarts"] for e in restarts[:3]] == [1, 2, 3]
    assert all(e.level == "warning" and e.fields["exit_code"] == 1 for e in restarts)
    assert supervisor.restarts["source"] >= 3 and supervisor.restarts["serve"] == 0
    assert ("source", "stderr", "crashing") in recorder.lines
    assert ("serve", "stdout", "up") in recorder.lines
    assert recorder.kinds("serve")[-1] == "stopped"


def test_a_status_no_restart_cures_stops_the_pipeline_with_it(tmp_path: Path) -> None:
    pids = tmp_path / "pid"
    steady = part(
        "source",
        f"""
        import os, time
        open({str(pids)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
    """,
    )
    failing = part("kafka", "import sys, time; time.sleep(0.3); sys.exit(3)")
    _, recorder, _, thread, raised = supervise([steady, failing])
    thread.join(30)
    assert not thread.is_alive()
    (error,) = raised
    assert isinstance(error, PartFailedError)
    assert (error.part, error.exit_code, error.kind) == ("kafka", 3, "not_retained")
    assert "part [kafka] exited with status 3 (position no longer retained)" in str(error)
    assert recorder.kinds("kafka") == ["started", "failed"]
    assert recorder.kinds("source")[-1] == "stopped"
    assert gone(int(pids.read_text()))


@pytest.mark.slow
def test_a_stop_sends_sigterm_then_sigkill_to_what_does_not_stop(tmp_path: Path) -> None:
    clean = tmp_path / "clean"
    polite = part(
        "source",
        f"""
        import signal, sys, time
        def stop(*_):
            open({str(clean)!r}, "w").write("stopped")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("ready", flush=True)
        time.sleep(60)
    """,
    )
    stubborn = part(
        "serve",
        """
        import signal, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("ready", flush=True)
        time.sleep(60)
    """,
    )
    settings = Settings(stop_timeout_ms=500)
    supervisor, recorder, stop, thread, raised = supervise([polite, stubborn], settings)
    wait_for(lambda: sum(line[2] == "ready" for line in recorder.lines) == 2, "both running")
    pids = supervisor.pids()
    started = time.monotonic()
    stop.set()
    thread.join(30)
    assert not raised and time.monotonic() - started < 5
    assert clean.read_text() == "stopped"
    assert recorder.kinds("serve")[-2:] == ["killed", "stopped"]
    stopped = {e.part: e.fields["exit_code"] for e in recorder.events if e.event == "stopped"}
    assert stopped == {"source": 0, "serve": -signal.SIGKILL}
    assert all(gone(pid) for pid in pids.values())


@pytest.mark.slow
def test_an_import_runs_to_its_end_before_the_other_parts_start(tmp_path: Path) -> None:
    imported = tmp_path / "imported"
    source = part(
        "source",
        f"""
        import time
        time.sleep(0.5)
        open({str(imported)!r}, "w").write("done")
    """,
        once=True,
    )
    reader = part(
        "serve",
        f"""
        import os, sys
        sys.exit(0 if os.path.exists({str(imported)!r}) else 2)
    """,
        once=True,
    )
    _, recorder, _, thread, raised = supervise([source, reader])
    thread.join(30)
    assert not raised
    assert recorder.kinds("source") == ["started", "finished"]
    assert recorder.kinds("serve") == ["started", "finished"]
    assert recorder.kinds("supervisor") == ["finished"]


def test_the_other_parts_wait_until_the_data_directory_holds_its_shards(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ready = shards_ready(str(data), 2)
    assert not ready()
    for shard in range(2):
        (data / f"shard-{shard}").mkdir(parents=True)
    assert not ready()  # empty shard directories: no log yet
    (data / "shard-0" / "control.json").write_text("{}")
    (data / "shard-1" / "00000000000000000001.seg").write_bytes(b"")
    assert ready()


@pytest.mark.slow
def test_parts_die_with_a_killed_supervisor_by_sigterm(tmp_path: Path) -> None:
    """SIGKILL of the supervisor: the kernel sends each part SIGTERM (PR_SET_PDEATHSIG), which
    stops it as a stop request would; nothing is left running."""
    state = tmp_path / "state"
    child = textwrap.dedent(f"""
        import os, signal, sys, time
        def stop(*_):
            open({str(state)!r}, "a").write("terminated")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        open({str(state)!r}, "w").write(str(os.getpid()) + " ")
        time.sleep(60)
    """)
    supervisor = textwrap.dedent(f"""
        import sys, threading
        from moonish.service.supervisor import PartSpec, Settings, Supervisor
        part = PartSpec("source", (sys.executable, "-c", {child!r}), "<source>")
        Supervisor([part], Settings(), print, print).run(threading.Event())
    """)
    process = subprocess.Popen(
        [sys.executable, "-c", supervisor], cwd=ROOT, stdout=subprocess.DEVNULL
    )
    try:
        wait_for(lambda: state.exists() and state.read_text().strip(), "the part started")
        pid = int(state.read_text().split()[0])
        process.kill()
        process.wait(10)
        wait_for(lambda: "terminated" in state.read_text(), "the part got SIGTERM")
        wait_for(lambda: gone(pid), "the part exited")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.mark.parametrize("code", [0, 6, -9])
def test_a_part_that_should_run_on_is_restarted_whatever_its_status(code: int) -> None:
    exits = (
        "import os, signal; os.kill(os.getpid(), 9)" if code == -9 else f"raise SystemExit({code})"
    )
    _, recorder, stop, thread, raised = supervise([part("serve", exits)])
    wait_for(lambda: recorder.kinds("serve").count("restarting") >= 2, "two restarts")
    stop.set()
    thread.join(30)
    assert not raised
    (first, *_) = [e for e in recorder.events if e.event == "restarting"]
    assert first.fields["exit_code"] == code
