"""What a pipeline file may say: its sections, the command each runs, and each command's
options as data.

The CLI builds the command specs from its click commands (cli/pipeline.py), so a section's
keys are the command's options with underscores for dashes, and the file and the command line
cannot drift apart. This module holds only the shapes and the sections that are not commands.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

Kind = Literal["bool", "int", "float", "str", "path"]
"""The TOML type of a key: ``path`` is a string resolved against the file's directory."""

TOP = "data_dir"
"""The one top-level key: the data directory every part works on."""


@dataclass(frozen=True)
class OptionSpec:
    """One option or argument of a command, as a key of its section.

    Attributes:
        key: the key (``max_value_bytes``: the option's name, underscores for dashes).
        flag: the option (``--max-value-bytes``); ``None`` for a positional argument.
        kind: the value's type in the file.
        multiple: a list in the file, the option repeated on the command line.
        required: the command needs it.
        default: the command's default (shown by ``config check``), ``None`` when none.
        off_flag: for a boolean with an off switch (``--x/--no-x``), the off switch.
        help: the option's help text (the reference in docs/operations.md).
        top: a positional argument taken from the top-level ``data_dir``, not the section.
        choices: the values it takes, when it takes only some.
    """

    key: str
    flag: str | None
    kind: Kind
    multiple: bool = False
    required: bool = False
    default: object = None
    off_flag: str | None = None
    help: str = ""
    top: bool = False
    choices: tuple[str, ...] = ()


@dataclass(frozen=True)
class CommandSpec:
    """A command a section runs.

    Attributes:
        words: the command's words after ``moonish`` (``("wal", "capture")``).
        options: its arguments, in command-line order, then its options.
        fixed: options always given (``--follow``), not keys of the section.
        once: the command finishes (an import); otherwise it runs until stopped.
        check: raises ``ValueError`` (its message) for a value the command would refuse:
            ``check(key, value)`` with the value as the file gives it.
    """

    words: tuple[str, ...]
    options: tuple[OptionSpec, ...]
    fixed: tuple[str, ...] = ()
    once: bool = False
    check: Callable[[str, object], None] | None = field(default=None, compare=False)

    def option(self, key: str) -> OptionSpec | None:
        """The option named ``key``, or ``None``."""
        return next((option for option in self.options if option.key == key), None)


@dataclass(frozen=True)
class SectionSpec:
    """A section of the file and the command it runs.

    Attributes:
        name: the section (``kafka``).
        commands: the command by the key that selects it (``source``: ``url``, ``aof``,
            ``rdb``); a section that always runs one command has it under ``None``.
        summary: one line for the reference.
    """

    name: str
    commands: Mapping[str | None, CommandSpec]
    summary: str = ""


@dataclass(frozen=True)
class Setting:
    """A key of ``[supervisor]``: how the supervisor itself behaves."""

    key: str
    default: int
    minimum: int
    help: str


SUPERVISOR = "supervisor"
SUPERVISOR_SETTINGS = (
    Setting(
        "stop_timeout_ms",
        30_000,
        0,
        "On SIGTERM or SIGINT, how long the parts get to "
        "stop cleanly before they are killed (SIGKILL).",
    ),
    Setting(
        "restart_backoff_ms",
        500,
        0,
        "The wait before a crashed part's first restart; it doubles with each further restart.",
    ),
    Setting("restart_max_backoff_ms", 30_000, 0, "The longest wait before a restart."),
    Setting(
        "restart_reset_ms",
        60_000,
        0,
        "A part that ran this long before it crashed is restarted after the first wait again.",
    ),
)
"""``[supervisor]``'s keys."""

NOT_YET: dict[str, str] = {}
"""Sections the file format reserves for later: refused by name."""


FILTER = "filter"
FILTER_KEYS = ("include_keys", "exclude_keys", "dbs", "types", "exclude_commands")
"""``[filter]``'s keys: the source command's filter options (docs/filters.md), in a table of
their own; they apply to ``[source]``, whatever it runs."""


@dataclass(frozen=True)
class MetricsSetting:
    """A key of ``[metrics]``: the supervisor's metrics endpoint (moonish.metrics.http).

    Attributes:
        key: the key.
        kind: ``int`` or ``str``.
        default: its value when not given; ``None``: required (when the section is there).
        minimum, maximum: an integer's range (``None``: unbounded).
        help: one line for the reference.
    """

    key: str
    kind: Kind
    default: int | str | None
    help: str
    minimum: int | None = None
    maximum: int | None = None


METRICS = "metrics"
METRICS_SETTINGS = (
    MetricsSetting(
        "port",
        "int",
        None,
        "Serve /metrics (every part's metrics and the supervisor's), /healthz and /readyz "
        "on this TCP port (0: any free one, logged).",
        0,
        65535,
    ),
    MetricsSetting("host", "str", "127.0.0.1", "The address the port listens on."),
    MetricsSetting(
        "ready_max_lag_ms",
        "int",
        60_000,
        "/readyz is unready while the source is more than this far behind its master "
        "(moonish_source_behind_seconds), its link is down, or a part is not running.",
        0,
    ),
)
"""``[metrics]``'s keys (docs/operations.md, "Metrics and health")."""
