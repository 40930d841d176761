"""A pipeline file checked against the schema: every key known, of its type and accepted by
its command, into a :class:`Pipeline` of parts with the command lines they run.

Paths (the ``data_dir``, and every option or argument that is a path) are relative to the
file's directory, so a pipeline runs the same from any working directory; a URI
(``s3://bucket/table``) is taken as it is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from collections.abc import Mapping as MappingABC
from dataclasses import dataclass

from .argv import command_line, shown_line
from .document import Document, read_document
from .masking import mask
from .schema import (
    FILTER,
    FILTER_KEYS,
    METRICS,
    METRICS_SETTINGS,
    NOT_YET,
    SUPERVISOR,
    SUPERVISOR_SETTINGS,
    TOP,
    CommandSpec,
    OptionSpec,
    SectionSpec,
)

_URI = re.compile(r"[a-z][a-z0-9+.-]*://")
"""A path given as a URI (a table on object storage), taken as it is."""

_TYPE_NAMES = {
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "path": "a string (a path)",
}


@dataclass(frozen=True)
class Part:
    """One part of a pipeline: a section and the command it runs.

    Attributes:
        name: the section (``source``, ``kafka``, ``serve``, ``spark``).
        command: what it runs.
        values: the keys the file sets, with paths made absolute.
        argv: the arguments after ``moonish``.
        shown: the command line with its secrets masked (``moonish wal capture ...``).
        masked: ``values`` with their secrets masked.
    """

    name: str
    command: CommandSpec
    values: Mapping[str, object]
    argv: tuple[str, ...]
    shown: str
    masked: Mapping[str, object]

    @property
    def once(self) -> bool:
        """Whether the part finishes (an import) rather than runs until stopped."""
        return self.command.once


@dataclass(frozen=True)
class Pipeline:
    """A checked pipeline file.

    Attributes:
        path: the file.
        data_dir: the data directory, absolute.
        parts: in start order: the source first.
        settings: ``[supervisor]``'s values, defaults included.
        metrics: ``[metrics]``'s values, defaults included; ``None`` without the section.
    """

    path: str
    data_dir: str
    parts: tuple[Part, ...]
    settings: Mapping[str, int]
    metrics: Mapping[str, object] | None = None

    @property
    def shards(self) -> int | None:
        """The source's shard count (``None`` without a source)."""
        for part in self.parts:
            if part.name == "source":
                shards = part.values.get("shards")
                return shards if isinstance(shards, int) else None
        return None


def load_pipeline(
    path: str, sections: Sequence[SectionSpec], environ: Mapping[str, str] | None = None
) -> Pipeline:
    """Read and check the pipeline file at ``path`` against ``sections`` (in start order).

    Raises:
        ConfigError: the file cannot be read or parsed, names an unset variable, an unknown
            or reserved section or key, a value of the wrong type or one its command refuses,
            or misses a key its command needs.
    """
    return check_document(read_document(path, environ), sections)


def check_document(document: Document, sections: Sequence[SectionSpec]) -> Pipeline:
    """:func:`load_pipeline` for a parsed file.

    Raises:
        ConfigError: as :func:`load_pipeline`.
    """
    data = document.data
    known = {section.name: section for section in sections}
    for key, value in data.items():
        if key in NOT_YET:
            raise document.error(key, f"[{key}]: {NOT_YET[key]}")
        if key in (TOP, SUPERVISOR, FILTER, METRICS):
            if key in (FILTER, METRICS) and not isinstance(value, MappingABC):
                raise document.error(key, f"{key} must be a table ([{key}])")
            continue
        if key not in known:
            names = ", ".join(f"[{name}]" for name in [*known, FILTER, METRICS, SUPERVISOR])
            raise document.error(key, f"unknown key {key!r} (the file has {TOP} and {names})")
        if not isinstance(value, MappingABC):
            raise document.error(key, f"{key} must be a table ([{key}])")
    data_dir = data.get(TOP)
    if not isinstance(data_dir, str) or not data_dir:
        raise document.error(TOP if TOP in data else None, f"{TOP} must be set, to a path")
    base = os.path.dirname(os.path.abspath(document.path))
    data_dir = os.path.normpath(os.path.join(base, data_dir))
    parts = []
    for section in sections:
        table = data.get(section.name)
        if isinstance(table, MappingABC):
            origins: dict[str, str] = {}
            if section.name == "source" and FILTER in data:
                table, origins = _with_filter(document, table, data[FILTER])
            routes = table.get("route")
            if section.name == "kafka" and isinstance(routes, list):
                table = {**table, "route": _routes(document, routes)}
            parts.append(_part(document, section, table, data_dir, base, origins))
    if FILTER in data and "source" not in data:
        raise document.error(FILTER, f"[{FILTER}] filters the source: add [source]")
    if not parts:
        raise document.error(None, "the pipeline has no part: add [source], [kafka], ...")
    settings = _settings(document)
    return Pipeline(document.path, data_dir, tuple(parts), settings, _metrics(document))


def _part(
    document: Document,
    section: SectionSpec,
    table: Mapping[str, object],
    data_dir: str,
    base: str,
    origins: Mapping[str, str] | None = None,
) -> Part:
    """The part ``section`` makes of ``table``; ``origins``: keys that another table of
    the file gave (``[filter]``), named so in errors."""
    name = section.name
    command = _command(document, section, table)

    def shown(key: str, value: object) -> object:
        dotted = f"{name}.{key}"
        if isinstance(value, list):
            items = [document.from_env.get(f"{dotted}[{i}]", ()) for i in range(len(value))]
            return mask(key, value, items)
        return mask(key, value, document.from_env.get(dotted, ()))

    values: dict[str, object] = {}
    for key, value in table.items():
        dotted = f"{(origins or {}).get(key, name)}.{key}"
        option = command.option(key)
        if option is None or option.top:
            raise document.error(dotted, _unknown(section, command, key))
        values[key] = _value(document, dotted, option, value, base)
        if command.check is not None:
            try:
                command.check(key, values[key])
            except ValueError as exc:
                secret = shown(key, values[key]) != values[key]
                why = "the value is refused (not shown: it holds a secret)" if secret else exc
                raise document.error(dotted, f"{dotted}: {why}") from exc
    for option in command.options:
        if option.required and not option.top and option.key not in values:
            raise document.error(
                name,
                f"[{name}] needs {option.key} ({shown_line(list(command.words))} "
                f"requires {option.flag or option.key.upper()})",
            )

    argv = command_line(command, values, data_dir)
    masked_argv = command_line(command, values, data_dir, shown)
    masked = {key: shown(key, value) for key, value in values.items()}
    return Part(name, command, values, tuple(argv), shown_line(masked_argv), masked)


def _with_filter(
    document: Document, table: Mapping[str, object], filter_table: object
) -> tuple[dict[str, object], dict[str, str]]:
    """``[source]``'s table with ``[filter]``'s keys added, and where those came from.

    Raises:
        ConfigError: a key ``[filter]`` does not take, or one ``[source]`` sets too.
    """
    assert isinstance(filter_table, MappingABC)
    merged = dict(table)
    for key, value in filter_table.items():
        dotted = f"{FILTER}.{key}"
        if key == "commands":
            raise document.error(
                dotted,
                f"{dotted}: use exclude_commands (the commands whose changes the stream "
                "leaves out; the keyspace still follows them: docs/filters.md)",
            )
        if key not in FILTER_KEYS:
            raise document.error(
                dotted, f"unknown key {dotted!r} ([{FILTER}] takes {', '.join(FILTER_KEYS)})"
            )
        if key in table:
            raise document.error(dotted, f"{key} is set in both [source] and [{FILTER}]")
        merged[key] = value
    return merged, {key: FILTER for key in filter_table}


def _routes(document: Document, routes: list[object]) -> list[object]:
    """``[[kafka.route]]`` tables (``match``, ``topic``) as the command's ``PATTERN=TOPIC``
    values; strings are taken as they are.

    Raises:
        ConfigError: a table without exactly ``match`` and ``topic`` (strings).
    """
    values: list[object] = []
    for route in routes:
        if not isinstance(route, MappingABC):
            values.append(route)
            continue
        match, topic = route.get("match"), route.get("topic")
        if (
            set(route) != {"match", "topic"}
            or not isinstance(match, str)
            or not isinstance(topic, str)
        ):
            raise document.error(
                "kafka.route", "each [[kafka.route]] takes match (a pattern) and topic (strings)"
            )
        values.append(f"{match}={topic}")
    return values


def _command(document: Document, section: SectionSpec, table: Mapping[str, object]) -> CommandSpec:
    selectors = [key for key in section.commands if key is not None]
    if not selectors:
        return section.commands[None]
    chosen = [key for key in selectors if key in table]
    if len(chosen) != 1:
        given = "none" if not chosen else " and ".join(chosen)
        raise document.error(
            section.name,
            f"[{section.name}] takes exactly one of {', '.join(selectors)} (given: {given})",
        )
    return section.commands[chosen[0]]


def _unknown(section: SectionSpec, command: CommandSpec, key: str) -> str:
    where = f"{section.name}.{key}"
    if f"--{key.replace('_', '-')}" in command.fixed:
        return (
            f"{where}: always given under moonish run ({shown_line(list(command.words))} "
            f"{' '.join(command.fixed)})"
        )
    others = [
        shown_line(list(other.words))
        for other in section.commands.values()
        if other is not command and other.option(key) is not None
    ]
    also = f" (an option of {', '.join(others)})" if others else ""
    keys = ", ".join(option.key for option in command.options if not option.top)
    return (
        f"unknown key {where}: not an option of {shown_line(list(command.words))}{also}; "
        f"its keys: {keys}"
    )


def _value(document: Document, key: str, option: OptionSpec, value: object, base: str) -> object:
    expected = _TYPE_NAMES[option.kind]
    if option.multiple:
        if not isinstance(value, list):
            raise document.error(key, f"{key} must be a list of {expected} values")
        return [_one(document, key, option, item, base, expected) for item in value]
    return _one(document, key, option, value, base, expected)


def _one(
    document: Document, key: str, option: OptionSpec, value: object, base: str, expected: str
) -> object:
    kind = option.kind
    if isinstance(value, str) and key in document.from_env and kind in ("int", "float", "bool"):
        value = _coerce(value, kind)  # "${PORT}": a variable is a string in TOML
    ok = (
        isinstance(value, bool)
        if kind == "bool"
        else isinstance(value, int) and not isinstance(value, bool)
        if kind == "int"
        else isinstance(value, int | float) and not isinstance(value, bool)
        if kind == "float"
        else isinstance(value, str)
    )
    if not ok:
        raise document.error(key, f"{key} must be {expected}, not {type(value).__name__}")
    if kind == "path":
        assert isinstance(value, str)
        if _URI.match(value):  # an object store's (s3://bucket/path), not a file's
            return value
        return os.path.normpath(os.path.join(base, value))
    return value


def _coerce(value: str, kind: str) -> object:
    text = value.strip()
    try:
        if kind == "bool":
            return {"true": True, "false": False}.get(text, value)
        return int(text) if kind == "int" else float(text)
    except ValueError:
        return value


def _settings(document: Document) -> dict[str, int]:
    table = document.data.get(SUPERVISOR, {})
    if not isinstance(table, MappingABC):
        raise document.error(SUPERVISOR, f"{SUPERVISOR} must be a table ([{SUPERVISOR}])")
    settings = {setting.key: setting.default for setting in SUPERVISOR_SETTINGS}
    by_key = {setting.key: setting for setting in SUPERVISOR_SETTINGS}
    for key, value in table.items():
        dotted = f"{SUPERVISOR}.{key}"
        setting = by_key.get(key)
        if setting is None:
            raise document.error(dotted, f"unknown key {dotted}; its keys: {', '.join(by_key)}")
        if not isinstance(value, int) or isinstance(value, bool) or value < setting.minimum:
            raise document.error(dotted, f"{dotted} must be an integer >= {setting.minimum}")
        settings[key] = value
    return settings


def _metrics(document: Document) -> dict[str, object] | None:
    """``[metrics]``'s values with the defaults, or ``None`` without the section."""
    if METRICS not in document.data:
        return None
    table = document.data[METRICS]
    if not isinstance(table, MappingABC):
        raise document.error(METRICS, f"{METRICS} must be a table ([{METRICS}])")
    by_key = {setting.key: setting for setting in METRICS_SETTINGS}
    values: dict[str, object] = {}
    for key, value in table.items():
        dotted = f"{METRICS}.{key}"
        setting = by_key.get(key)
        if setting is None:
            raise document.error(dotted, f"unknown key {dotted}; its keys: {', '.join(by_key)}")
        if isinstance(value, str) and dotted in document.from_env and setting.kind == "int":
            value = _coerce(value, "int")  # "${PORT}"
        if setting.kind == "int":
            low, high = setting.minimum, setting.maximum
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or (low is not None and value < low)
                or (high is not None and value > high)
            ):
                bounds = f" in {low}..{high}" if high is not None else f" >= {low}"
                raise document.error(dotted, f"{dotted} must be an integer{bounds}")
        elif not isinstance(value, str) or not value:
            raise document.error(dotted, f"{dotted} must be a string")
        values[key] = value
    for setting in METRICS_SETTINGS:
        if setting.key not in values:
            if setting.default is None:
                raise document.error(METRICS, f"[{METRICS}] needs {setting.key}")
            values[setting.key] = setting.default
    return values
