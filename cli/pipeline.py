"""The sections of a pipeline file (``moonish run``, ``moonish config check``), derived from
the click commands each part runs: a section's keys are its command's options (underscores for
dashes) with their types, defaults and help, so the file and the command line cannot drift
apart, and each value is checked by the option's own click type (ranges, choices, files).
"""

from __future__ import annotations

import importlib
import sys

import click

from moonish.service.schema import CommandSpec, Kind, OptionSpec, SectionSpec

# section -> (the key choosing the command or None, its words, "module:attribute", the
# arguments taken from keys (argument -> key; "data_dir": the top-level data_dir), fixed options,
# whether it finishes)
_PARTS: dict[
    str, list[tuple[str | None, tuple[str, ...], str, dict[str, str], tuple[str, ...], bool]]
] = {
    "source": [
        (
            "url",
            ("wal", "capture"),
            ".wal.capture:capture_command",
            {"redis_url": "url", "data_dir": "data_dir"},
            (),
            False,
        ),
        (
            "aof",
            ("wal", "import-aof"),
            ".wal.import_aof:import_aof_command",
            {"appendonlydir": "aof", "data_dir": "data_dir"},
            (),
            True,
        ),
        (
            "rdb",
            ("wal", "import-rdb"),
            ".wal.import_rdb:import_rdb_command",
            {"rdb_file": "rdb", "data_dir": "data_dir"},
            (),
            True,
        ),
    ],
    "kafka": [
        (None, ("cdc", "kafka"), ".cdc.kafka:kafka", {"data_dir": "data_dir"}, ("--follow",), False)
    ],
    "serve": [(None, ("serve",), ".serve:serve", {"data_dir": "data_dir"}, (), False)],
    "export": [
        (
            None,
            ("cdc", "export"),
            ".cdc.export:export",
            {"source": "data_dir", "out_dir": "out_dir"},
            ("--follow",),
            False,
        )
    ],
    "spark": [
        (
            None,
            ("spark", "materialize"),
            ".spark.materialize:materialize",
            {"source": "data_dir", "table_dir": "table_dir"},
            ("--follow",),
            False,
        )
    ],
}

# options that are no keys of a section: ``moonish run`` gives them to every part (the log
# format, through MOONISH_LOG_FORMAT) or does it itself (the metrics endpoint: [metrics])
_FROM_RUN = ("--log-format", "--metrics-port", "--metrics-host", "--ready-max-lag-ms")

_ARGUMENTS = {
    "url": "The Redis master, redis[s]://[[user]:password@]host[:port] (the command's REDIS_URL).",
    "aof": "The AOF's directory, with its manifest (the command's APPENDONLYDIR).",
    "rdb": "The RDB file (the command's RDB_FILE).",
    "out_dir": "The directory the NDJSON files go to (the command's OUT_DIR).",
    "table_dir": "The table: a directory (relative to the file's) or s3://BUCKET/PATH (the "
    "command's TABLE).",
}

_SUMMARIES = {
    "source": "where changes come from: a live Redis (url), or an AOF (aof) or RDB file (rdb) "
    "imported once",
    "kafka": "every change into Kafka, as Debezium puts it there",
    "serve": "the change feed over HTTP and WebSocket",
    "export": "NDJSON files of every change, each complete or absent, exactly once",
    "spark": "a Delta Lake table of the latest state per key, kept by Spark",
}


def command(target: str) -> click.Command:
    """The click command at ``"module:attribute"`` (relative to this package)."""
    module, attribute = target.split(":")
    found = getattr(importlib.import_module(module, __package__), attribute)
    assert isinstance(found, click.Command)
    return found


def sections() -> list[SectionSpec]:
    """The sections a pipeline file may have, in start order."""
    result = []
    for name, commands in _PARTS.items():
        specs: dict[str | None, CommandSpec] = {}
        for selector, words, target, arguments, fixed, once in commands:
            specs[selector] = command_spec(command(target), words, arguments, fixed, once)
        result.append(SectionSpec(name, specs, _SUMMARIES[name]))
    return result


def launcher() -> list[str]:
    """How the supervisor starts the ``moonish`` command: this interpreter running this
    package's ``main`` (``cli.main`` in the repository, ``moonish_cli.main`` installed)."""
    return [sys.executable, "-m", f"{__package__}.main"]


def command_spec(
    cmd: click.Command,
    words: tuple[str, ...],
    arguments: dict[str, str],
    fixed: tuple[str, ...],
    once: bool,
) -> CommandSpec:
    """``cmd``'s arguments (named by ``arguments``) and options (but those in ``fixed``) as
    a :class:`CommandSpec` whose check runs each value through the option's click type and
    callback."""
    options: list[OptionSpec] = []
    params: dict[str, click.Parameter] = {}
    for param in cmd.params:
        assert param.name is not None
        if isinstance(param, click.Argument):
            key = arguments[param.name]
            options.append(
                OptionSpec(
                    key,
                    None,
                    _kind(param),
                    required=True,
                    help=_ARGUMENTS.get(key, ""),
                    top=key == "data_dir",
                )
            )
            params[key] = param
            continue
        assert isinstance(param, click.Option)
        flag = max(param.opts, key=len)
        if flag in fixed or flag in _FROM_RUN:
            continue
        key = flag.lstrip("-").replace("-", "_")
        off = max(param.secondary_opts, key=len) if param.secondary_opts else None
        options.append(
            OptionSpec(
                key,
                flag,
                _kind(param),
                multiple=param.multiple,
                required=param.required,
                default=_default(param),
                off_flag=off,
                help=param.help or "",
                choices=tuple(param.type.choices) if isinstance(param.type, click.Choice) else (),
            )
        )
        params[key] = param

    def check(key: str, value: object) -> None:
        param = params[key]
        ctx = click.Context(cmd, info_name=" ".join(words))
        try:
            param.process_value(ctx, value)
        except click.BadParameter as error:
            raise ValueError(error.message) from error

    return CommandSpec(words, tuple(options), fixed, once, check)


def _kind(param: click.Parameter) -> Kind:
    kind = param.type
    if isinstance(param, click.Option) and param.is_flag:
        return "bool"
    if isinstance(kind, click.types.BoolParamType):
        return "bool"
    if isinstance(kind, click.types.IntParamType):
        return "int"
    if isinstance(kind, click.types.FloatParamType):
        return "float"
    if isinstance(kind, click.Path):
        return "path"
    return "str"


def _default(param: click.Option) -> object:
    """The option's default as the file would give it (``None``: none, or an off flag)."""
    default = param.default
    if param.is_flag or not isinstance(default, bool | int | float | str):
        return None
    return default
