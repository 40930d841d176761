"""Click parameter types the commands share, and their position and sink-name helpers."""

from __future__ import annotations

import os
import re
from typing import Any

import click

from moonish.cdc.cursor import Cursor
from moonish.errors import InvalidArgumentError
from moonish.fileio import check_path_names, replace_atomically
from moonish.log.records import ViewType


class LsnParam(click.ParamType):  # type: ignore[type-arg]
    """A cursor: a decimal LSN in [0, 2**64), or ``snapshot:<lsn>:<row>``."""

    name = "lsn"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> Cursor:
        if isinstance(value, Cursor):
            return value
        if isinstance(value, int):
            return Cursor(value)
        try:
            return Cursor.parse(str(value))
        except InvalidArgumentError as error:
            self.fail(error.message, param, ctx)


LSN = LsnParam()


class OutputDir(click.Path):
    """A directory a command writes (and creates when missing): not a file, and every name
    in it short enough for the file system (``moonish.fileio.check_path_names``: an
    ``InvalidArgumentError``, exit 2, rather than ``File name too long`` from deep inside)."""

    def __init__(self) -> None:
        super().__init__(file_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        path = str(super().convert(value, param, ctx))
        return check_path_names(path, param.human_readable_name if param else "directory")


OUTPUT_DIR = OutputDir()


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


class BytesParam(click.ParamType):  # type: ignore[type-arg]
    """A byte count: digits, optionally followed by K, M, G or T (powers of 1024)."""

    name = "bytes"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        text = str(value).strip().upper().removesuffix("B").removesuffix("I")
        digits, unit = (text[:-1], text[-1]) if text[-1:] in _UNITS else (text, "")
        if not (digits.isascii() and digits.isdigit()):
            self.fail(f"{value!r} is not a byte count (e.g. 1073741824, 512M, 1G)", param, ctx)
        return int(digits) * _UNITS[unit]


BYTES = BytesParam()


class KeyPatternParam(click.ParamType):  # type: ignore[type-arg]
    """A Redis glob pattern (``SCAN MATCH``'s), checked as moonish.keypatterns reads it;
    kept as given (text)."""

    name = "pattern"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        from moonish.keypatterns import pattern_bytes

        text = str(value)
        try:
            pattern_bytes(text)
        except InvalidArgumentError as error:
            self.fail(error.message, param, ctx)
        return text


KEY_PATTERN = KeyPatternParam()
"""The type of the directories ``wal import-aof``, ``wal import-rdb`` and ``cdc export`` write."""


VIEW = click.Choice([view.name for view in ViewType], case_sensitive=False)

LOG_FORMATS = ("text", "json")
"""The forms of log lines on stderr (cli.logs)."""
FORMAT_VARIABLE = "MOONISH_LOG_FORMAT"
"""The environment variable that gives ``--log-format``'s default (``moonish run`` sets it)."""
"""A stream view type name (``OFF`` disables the stream)."""


def write_position(path: str, position: str) -> None:
    """Write a cursor or token (and a newline) to ``path``, replaced atomically."""
    replace_atomically(path, [f"{position}\n".encode()])


def sink_name(kind: str, directory: str) -> str:
    """The default consumer name of a sink writing to ``directory``: ``<kind>-<its name>``,
    with characters a consumer name cannot hold replaced by ``_`` (at most 64)."""
    base = os.path.basename(os.path.normpath(os.path.abspath(directory)))
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{kind}-{base}")[:64]
