"""What long-running commands write on stderr: log lines, and a progress line on a terminal.

On a terminal the progress line is redrawn in place (``\\r``) and a log line clears it first;
anywhere else (a file, a pipe, journald) there is no ``\\r``: progress is a log line too.
Every line goes through :meth:`StderrLog.line`, so another format of log lines (JSON) is one
change there. A log line::

    2025-05-01T12:00:00.123Z capture psync: PSYNC ? -1: +FULLRESYNC <replid> 0 (RDB: 175 bytes)

(the UTC time to the millisecond, the command, the kind of line, its text). With
``log_format="json"`` (or ``MOONISH_LOG_FORMAT=json`` in the environment: how ``moonish run
--log-format json`` asks its parts) each line is a JSON object instead, never redrawn::

    {"ts": "2025-05-01T12:00:00.123Z", "level": "info", "part": "capture", "event": "psync",
     "message": "PSYNC ? -1: +FULLRESYNC <replid> 0 (RDB: 175 bytes)", ...the line's fields}

(``shard``, ``lsn`` and the other fields of the line where it has them).
"""

from __future__ import annotations

import datetime
import logging
import os
import sys
from collections.abc import Mapping
from typing import TextIO

import orjson

from moonish.clock import SYSTEM_CLOCK, Clock

from .params import FORMAT_VARIABLE as FORMAT_VARIABLE
from .params import LOG_FORMATS as LOG_FORMATS

_CLEAR_LINE = "\r\x1b[K"

CHOSEN: dict[str, str] = {}
"""The running command's ``--log-format`` (``format``) and name (``part``), once parsed."""


def fatal_line(message: str, exit_code: int, error: BaseException | None = None) -> bool:
    """Write the error a command ends with as one JSON log line (``level`` ``error``,
    ``event`` ``exit``, ``exit_code``, and the error's ``kind``, ``path``, ``offset`` and
    ``lsn`` when it has them), when the command was asked for JSON lines; whether it did."""
    if CHOSEN.get("format") != "json":
        return False
    fields: dict[str, object] = {"exit_code": exit_code}
    for name in ("kind", "path", "offset", "lsn"):
        value = getattr(error, name, None)
        if value is not None:
            fields[name] = value
    log = StderrLog(CHOSEN.get("part", "moonish"), log_format="json")
    log.line("exit", message, fields, level="error")
    return True


class StderrLog:
    """Lines of one command on ``stream`` (stderr by default).

    Args:
        command: named in every line (``capture``).
        stream: where to write; ``None``: ``sys.stderr``.
        tty: whether ``stream`` is a terminal; ``None``: ask it (``isatty``).
        clock: the lines' times.
        log_format: ``text`` or ``json``; ``None``: ``$MOONISH_LOG_FORMAT``, else ``text``.
    """

    def __init__(
        self,
        command: str,
        stream: TextIO | None = None,
        *,
        tty: bool | None = None,
        clock: Clock = SYSTEM_CLOCK,
        log_format: str | None = None,
    ) -> None:
        self.command = command
        self.stream = stream if stream is not None else sys.stderr
        if log_format is None:
            log_format = "json" if os.environ.get(FORMAT_VARIABLE) == "json" else "text"
        self.json = log_format == "json"
        self.tty = False if self.json else self.stream.isatty() if tty is None else tty
        self.clock = clock
        self._drawn = False  # a progress line is on the terminal's last line

    def line(
        self,
        kind: str,
        text: str,
        fields: Mapping[str, object] | None = None,
        time_us: int | None = None,
        level: str = "info",
    ) -> None:
        """Write one log line: ``kind`` (``psync``, ``status``, ...) and ``text``; ``fields``
        are the same as values (for a structured format), ``time_us`` when it happened
        (``None``: now) and ``level`` how much it matters (``info``, ``warning``, ``error``;
        JSON lines only)."""
        when = self.clock.now_us() if time_us is None else time_us
        stamp = datetime.datetime.fromtimestamp(when / 1e6, datetime.UTC)
        ts = f"{stamp.strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}Z"
        if self.json:
            line = {
                **(fields or {}),
                "ts": ts,
                "level": level,
                "part": self.command,
                "event": kind,
                "message": text,
            }
            self._write(orjson.dumps(line, default=str).decode() + "\n")
            return
        prefix = _CLEAR_LINE if self._drawn else ""
        self._drawn = False
        self._write(f"{prefix}{ts} {self.command} {kind}: {text}\n")

    def progress(self, text: str, fields: Mapping[str, object] | None = None) -> None:
        """On a terminal, redraw the progress line with ``text``; elsewhere a ``status`` log
        line."""
        if not self.tty:
            self.line("status", text, fields)
            return
        self._drawn = True
        self._write(f"{_CLEAR_LINE}{text}")

    def end_progress(self) -> None:
        """Leave the progress line drawn (a newline after it), so what follows is below it."""
        if self._drawn:
            self._drawn = False
            self._write("\n")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()


class CountLines:
    """A count that grows (bytes read, records written) as log lines: a ``status`` line at
    most every ``interval_ms``, and a ``done`` line when the ``with`` block ends without an
    error. ``update`` takes the increments (``click.progressbar``'s ``update``).

    Args:
        log: where the lines go.
        unit: the count's name, its field in the lines (``bytes``, ``records``).
        total: what the count reaches at the end (field ``total_<unit>``), or ``None``.
        interval_ms: the least time between two ``status`` lines.
    """

    def __init__(
        self, log: StderrLog, unit: str, total: int | None = None, interval_ms: int = 1000
    ) -> None:
        self.log, self.unit, self.total = log, unit, total
        self.interval_us = interval_ms * 1000
        self.count = 0
        self._shown_us: int | None = None

    def __enter__(self) -> CountLines:
        return self

    def __exit__(self, kind: object, error: object, traceback: object) -> None:
        if kind is None:
            self._line("done")

    def update(self, increment: int) -> None:
        """Add ``increment``; a ``status`` line if the last was ``interval_ms`` ago."""
        self.count += increment
        now = self.log.clock.now_us()
        if self._shown_us is None:
            self._shown_us = now  # the first line a full interval after the start
        elif now - self._shown_us >= self.interval_us:
            self._shown_us = now
            self._line("status", now)

    def _line(self, kind: str, time_us: int | None = None) -> None:
        fields: dict[str, object] = {self.unit: self.count}
        text = f"{self.count:,} {self.unit}"
        if self.total is not None:
            fields[f"total_{self.unit}"] = self.total
            share = 100 * self.count // self.total if self.total else 100
            text += f" of {self.total:,} ({share}%)"
        self.log.line(kind, text, fields, time_us)


class LogHandler(logging.Handler):
    """Python ``logging`` records (a library's: ``moonish.serve``'s, aiohttp's) as lines of
    ``log``: event ``event``, the record's level (``critical`` as ``error``) and time, its
    logger as field ``logger`` and its traceback, if any, as ``exception``."""

    def __init__(self, log: StderrLog, event: str = "log") -> None:
        super().__init__()
        self.log, self.event = log, event

    def emit(self, record: logging.LogRecord) -> None:
        try:
            fields: dict[str, object] = {"logger": record.name}
            if record.exc_info:
                fields["exception"] = logging.Formatter().formatException(record.exc_info)
            level = "error" if record.levelno >= logging.ERROR else record.levelname.lower()
            time_us = int(record.created * 1_000_000)
            self.log.line(self.event, record.getMessage(), fields, time_us, level)
        except Exception:
            self.handleError(record)
