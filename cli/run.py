"""``moonish run``: one pipeline file, its parts supervised in child processes."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING

import click
import orjson

from . import options
from .logs import FORMAT_VARIABLE, StderrLog
from .pipeline import launcher, sections

if TYPE_CHECKING:
    from moonish.service.config import Pipeline
    from moonish.service.supervisor import Event, Supervisor


@click.command("run")
@click.argument("pipeline_file", type=click.Path(dir_okay=False))
@options.log_format(
    help="text: one timestamped line per event, the parts' lines prefixed by their part; "
    "json: one JSON object per line (ts, level, part, event, message, and shard, lsn... where "
    "they apply), the parts' lines too (each part runs with MOONISH_LOG_FORMAT set to it)."
)
def run(pipeline_file: str, log_format: str) -> None:
    """Run the pipeline PIPELINE_FILE describes (a TOML file: docs/operations.md): each part
    (the [source], then [kafka], [serve], [spark]) as its command runs it, in a child process.

    The source starts first: an import (aof, rdb) runs to its end, a live capture (url) runs
    on; the other parts start once the data directory holds its shards. A part that crashes
    (exit 1, 6, a signal) is restarted with exponential backoff ([supervisor]); one that exits
    2, 3, 4 or 5 stops the pipeline, which exits with the same status, naming the part.
    SIGTERM or Ctrl-C stops every part (SIGTERM: each stops cleanly, as its command does),
    waits up to stop_timeout_ms, then kills what is left, and exits 0. If this process is
    killed, the kernel sends each part SIGTERM (PR_SET_PDEATHSIG), so each stops cleanly
    and the next run resumes every part from its committed position. With imports only, it
    exits 0 once they are done. One log line per event on stderr (--log-format).

    Example:

        moonish run pipeline.toml --log-format json
    """
    from moonish.service.config import load_pipeline
    from moonish.service.errors import PartFailedError
    from moonish.service.supervisor import Event, PartSpec, Settings, Supervisor, shards_ready

    from .errors import LoggedExit

    pipeline = load_pipeline(pipeline_file, sections())
    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)

    lock = threading.Lock()
    logs = {
        name: StderrLog(name, log_format=log_format)
        for name in ["supervisor", *(part.name for part in pipeline.parts)]
    }

    def on_event(event: Event) -> None:
        with lock:
            logs[event.part].line(event.event, event.text, event.fields, level=event.level)

    def on_output(part: str, stream: str, line: str) -> None:
        with lock:
            if log_format == "json":
                _relay_json(logs[part], stream, line)
            else:
                sys.stderr.write(f"{part} | {line}\n")
                sys.stderr.flush()

    parts = [
        PartSpec(part.name, (*launcher(), *part.argv), part.shown, part.once)
        for part in pipeline.parts
    ]
    settings = Settings(**pipeline.settings)
    env = {**os.environ, FORMAT_VARIABLE: log_format}
    on_event(
        Event(
            "info",
            "supervisor",
            "config",
            f"{pipeline.path}: {len(parts)} part(s)",
            {"file": pipeline.path, "parts": [part.name for part in parts]},
        )
    )
    ready = shards_ready(pipeline.data_dir, pipeline.shards)
    supervisor = Supervisor(parts, settings, on_event, on_output, ready, env)
    try:
        with _metrics(pipeline, supervisor, env, logs["supervisor"], lock):
            supervisor.run(stop)
    except PartFailedError as error:
        if log_format != "json":
            raise  # the command line's error line: moonish: <kind>: part [...] ...
        fields = {"exit_code": error.exit_code, "failed_part": error.part, "kind": error.kind}
        on_event(Event("error", "supervisor", "exit", str(error), fields))
        raise LoggedExit(error.exit_code) from error
    on_event(Event("info", "supervisor", "exit", "stopped: exit 0", {"exit_code": 0}))


@contextlib.contextmanager
def _metrics(
    pipeline: Pipeline,
    supervisor: Supervisor,
    env: dict[str, str],
    log: StderrLog,
    lock: threading.Lock,
) -> Iterator[None]:
    """With ``[metrics]``: the parts run in prometheus-client's multiprocess mode (``env``
    gets ``PROMETHEUS_MULTIPROC_DIR``, a fresh directory removed at the end) and this process
    serves their metrics, the data directory's and its own (docs/operations.md, "Metrics
    and health"); a part's exit takes its live gauges out of the sums."""
    settings = pipeline.metrics
    if settings is None:
        yield
        return
    from moonish.cdc.metrics import DataDirCollector
    from moonish.metrics.http import (
        MULTIPROC_ENV,
        MetricsServer,
        forget_process,
        parts_collector,
    )
    from moonish.metrics.readiness import source_check
    from moonish.service.metrics import SupervisorCollector, parts_check

    directory = tempfile.mkdtemp(prefix="moonish-metrics-")
    env[MULTIPROC_ENV] = directory
    reported = supervisor.on_event

    def on_event(event: Event) -> None:
        if event.event in _EXITS and isinstance(event.fields.get("pid"), int):
            forget_process(int(event.fields["pid"]), directory)  # type: ignore[call-overload]
        reported(event)

    supervisor.on_event = on_event
    collector = DataDirCollector(pipeline.data_dir)
    parts_only = parts_collector(directory)
    served = parts_collector(directory, [SupervisorCollector(supervisor), collector])
    live = any(part.name == "source" and not part.once for part in pipeline.parts)
    lag_ms = settings["ready_max_lag_ms"]
    assert isinstance(lag_ms, int)
    checks = [source_check(parts_only, lag_ms / 1000, expected=live), parts_check(supervisor)]
    host, port = settings["host"], settings["port"]
    assert isinstance(host, str) and isinstance(port, int)
    try:
        with MetricsServer(host, port, served, checks) as server:
            with lock:
                url = server.url
                log.line("metrics", f"metrics on {url}/metrics", {"url": url})
            yield
    finally:
        collector.close()
        shutil.rmtree(directory, ignore_errors=True)


_EXITS = frozenset({"finished", "failed", "restarting", "stopped"})
"""The supervisor's events of a part's process that exited (its ``pid`` among the fields)."""


def _relay_json(log: StderrLog, stream: str, line: str) -> None:
    """A part's line as a JSON line of ``log``'s part: its own JSON line (a command logging
    with MOONISH_LOG_FORMAT=json) with ``part`` set to the section, anything else wrapped."""
    if line.startswith("{"):
        try:
            parsed = orjson.loads(line)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict) and "event" in parsed:
            parsed["command"] = parsed.get("part")
            parsed["part"] = log.command
            log.stream.write(orjson.dumps(parsed).decode() + "\n")
            log.stream.flush()
            return
    log.line(stream, line, {"stream": stream})
