"""Click parameter types shared by the commands."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import click

from moonish.cdc.cursor import Cursor
from moonish.errors import InvalidArgumentError
from moonish.fileio import replace_atomically
from moonish.log.format import SEGMENT_HEADER_BYTES
from moonish.log.records import ViewType
from moonish.log.writer import DEFAULT_SEGMENT_BYTES
from moonish.slots import SLOT_COUNT  # every shard owns at least one slot
from moonish.state.config import DEFAULT_MAX_VALUE_BYTES


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


VIEW = click.Choice([view.name for view in ViewType], case_sensitive=False)
"""A stream view type name (``OFF`` disables the stream)."""


def shard_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """The options of every command that creates shards: ``--shards``, ``--view``,
    ``--max-value-bytes``, ``--segment-bytes`` (existing shards keep their own stream
    configuration; ``--segment-bytes`` applies to every writer the command opens)."""
    options = [
        click.option("--shards", type=click.IntRange(1, SLOT_COUNT), required=True,
                     help="Number of shards; keys go to shard slot * N // 16384."),
        click.option("--view", type=VIEW, default="NEW_AND_OLD_IMAGES", show_default=True,
                     help="Stream view type of shards this command creates (OFF: no change "
                     "stream)."),
        click.option("--max-value-bytes", type=click.IntRange(0, None),
                     default=DEFAULT_MAX_VALUE_BYTES, show_default=True,
                     help="In shards this command creates, a value whose JSON is larger is "
                     'left out of images as {"_omitted_length": n}.'),
        click.option("--segment-bytes", type=click.IntRange(SEGMENT_HEADER_BYTES + 1, None),
                     default=DEFAULT_SEGMENT_BYTES, show_default=True,
                     help="Rotate to a new segment before one would grow past this many "
                     "bytes (a batch larger than this gets a segment of its own)."),
    ]  # fmt: skip
    return stack(command, options)


def stack(command: Callable[..., Any], options: list[Callable[..., Any]]) -> Callable[..., Any]:
    """Apply click options to ``command`` so that ``--help`` lists them in this order."""
    for option in reversed(options):
        command = option(command)
    return command


def write_position(path: str, position: str) -> None:
    """Write a cursor or token (and a newline) to ``path``, replaced atomically."""
    replace_atomically(path, [f"{position}\n".encode()])


def sink_name(kind: str, directory: str) -> str:
    """The default consumer name of a sink writing to ``directory``: ``<kind>-<its name>``,
    with characters a consumer name cannot hold replaced by ``_`` (at most 64)."""
    base = os.path.basename(os.path.normpath(os.path.abspath(directory)))
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{kind}-{base}")[:64]
