"""The command line a part runs, built from its section's values, and the same line as shown
with secrets masked."""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping

from .schema import CommandSpec, OptionSpec


def command_line(
    command: CommandSpec,
    values: Mapping[str, object],
    data_dir: str,
    show: Callable[[str, object], object] | None = None,
) -> list[str]:
    """The arguments after ``moonish`` (``["wal", "capture", url, data_dir, "--shards",
    "4"]``): the command's words, its positional arguments, its fixed options, then each
    option ``values`` sets, in the command's order. ``show(key, value)`` (the masking) is
    applied to each value first when given."""
    argv = list(command.words)
    options: list[str] = []
    for option in command.options:
        if option.flag is None:
            value = data_dir if option.top else values[option.key]
            argv.append(_text(show(option.key, value) if show else value))
        elif option.key in values:
            value = values[option.key]
            options.extend(_option(option, show(option.key, value) if show else value))
    return [*argv, *command.fixed, *options]


def shown_line(argv: list[str]) -> str:
    """``moonish`` and ``argv`` quoted for a shell."""
    return shlex.join(["moonish", *argv])


def _option(option: OptionSpec, value: object) -> list[str]:
    assert option.flag is not None
    if option.kind == "bool":
        if value:
            return [option.flag]
        return [option.off_flag] if option.off_flag else []
    if option.multiple and isinstance(value, list):
        return [part for item in value for part in (option.flag, _text(item))]
    return [option.flag, _text(value)]


def _text(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
