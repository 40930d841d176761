"""``moonish run`` in a child process for the tests, its JSON log lines parsed."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from tests.support.paths import ROOT
from tests.support.processes import gone
from tests.support.redis.capture import wait_for


class Run:
    """``moonish run <file> --log-format json`` in a child process; its log lines parsed."""

    def __init__(self, pipeline: Path) -> None:
        self.log = pipeline.parent / f"run-{os.urandom(3).hex()}.log"
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "cli.main", "run", str(pipeline), "--log-format", "json"],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def lines(self) -> list[dict[str, Any]]:
        out = []
        for raw in self.log.read_bytes().splitlines():
            try:
                out.append(orjson.loads(raw))
            except orjson.JSONDecodeError:
                out.append({"part": "?", "event": "?", "message": raw.decode(errors="replace")})
        return out

    def events(self, part: str, event: str) -> list[dict[str, Any]]:
        return [line for line in self.lines() if line["part"] == part and line["event"] == event]

    def pid(self, part: str) -> int:
        wait_for(lambda: self.events(part, "started"), f"[{part}] started")
        return int(self.events(part, "started")[-1]["pid"])

    def serve_url(self) -> str:
        def url() -> str | None:
            for line in self.events("serve", "stdout"):
                return str(orjson.loads(line["message"])["url"])
            return None

        wait_for(lambda: url() is not None, "the server's URL")
        found = url()
        assert found is not None
        return found

    def terminate(self, timeout_s: float = 60) -> int:
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def stop_all(self) -> dict[str, int]:
        """SIGTERM, then check that ``run`` exited 0 and no part it started last runs;
        returns the status each part stopped with."""
        pids = {
            line["part"]: int(line["pid"]) for line in self.lines() if line["event"] == "started"
        }
        assert self.terminate() == 0
        assert all(gone(pid) for pid in pids.values())
        return {
            line["part"]: line["exit_code"]
            for line in self.lines()
            if line["event"] == "stopped" and "exit_code" in line
        }

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def running(pipeline: Path) -> Iterator[Run]:
    run = Run(pipeline)
    try:
        yield run
    finally:
        run.kill()
