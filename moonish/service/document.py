"""A pipeline file as read: its TOML (Python's ``tomllib``), the line of each key (tomllib
gives none), and ``${ENV_VAR}`` replaced from the environment in every string.

``${NAME}`` (letters, digits, underscores) is replaced by the variable's value; ``$${`` is a
literal ``${``. The substitution is done on the parsed strings, so a value cannot change the
file's structure, and an unset variable is an error naming it, its key and its line.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field

from .errors import ConfigError

_VARIABLE = re.compile(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{")
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_KEY = re.compile(r"""^\s*("(?:[^"\\]|\\.)*"|'[^']*'|[A-Za-z0-9_.\- ]+?)\s*=""")


@dataclass(frozen=True)
class Document:
    """A parsed pipeline file.

    Attributes:
        path: the file as given.
        data: its tables, with ``${...}`` replaced.
        from_env: the dotted keys whose value took a variable (``key[i]`` for a list's
            item), with the variables' names.
        lines: the 1-based line of each dotted key and section found in the text.
    """

    path: str
    data: Mapping[str, object]
    from_env: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    lines: Mapping[str, int] = field(default_factory=dict)

    def line(self, key: str) -> int | None:
        """The line of the dotted ``key``; of its section when the key is not found (a key
        set in an inline table); ``None`` when neither is."""
        while key:
            if key in self.lines:
                return self.lines[key]
            key = key.rpartition(".")[0]
        return None

    def error(self, key: str | None, message: str) -> ConfigError:
        """A :class:`ConfigError` about ``key`` (dotted) with its line."""
        return ConfigError(
            message, path=self.path, line=None if key is None else self.line(key), key=key
        )


def read_document(path: str, environ: Mapping[str, str] | None = None) -> Document:
    """Read and parse the pipeline file at ``path``, with variables from ``environ``
    (``None``: ``os.environ``).

    Raises:
        ConfigError: the file cannot be read, is not TOML (the line and column tomllib
            names), or names a variable that is not set.
    """
    try:
        with open(path, "rb") as file:
            raw = file.read()
    except OSError as exc:
        raise ConfigError(f"cannot read the pipeline file: {exc.strerror}", path=path) from exc
    try:
        text = raw.decode()
        data = tomllib.loads(text)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text: {exc.reason}", path=path) from exc
    except tomllib.TOMLDecodeError as exc:
        match = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        message = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        line = int(match.group(1)) if match else None
        raise ConfigError(f"not valid TOML: {message}", path=path, line=line) from exc
    document = Document(path, data, {}, key_lines(text))
    env = os.environ if environ is None else environ
    from_env: dict[str, tuple[str, ...]] = {}
    substituted = _substitute(data, "", env, document, from_env)
    assert isinstance(substituted, dict)
    return Document(path, substituted, from_env, document.lines)


def key_lines(text: str) -> dict[str, int]:
    """The first line (1-based) of each key (dotted with its table: ``kafka.topic_prefix``)
    and of each table header, found by reading the text line by line: headers, and keys at
    the start of a line. Keys inside inline tables and multi-line values are not found (their
    table's line stands for them)."""
    lines: dict[str, int] = {}
    table = ""
    in_string = False
    for number, line in enumerate(text.splitlines(), start=1):
        if in_string:
            in_string = line.count('"""') % 2 == 0 and line.count("'''") % 2 == 0
            continue
        header = _HEADER.match(line)
        if header:
            table = ".".join(_unquote(part) for part in header.group(1).split("."))
            lines.setdefault(table, number)
            continue
        key = _KEY.match(line)
        if key:
            dotted = ".".join(_unquote(part) for part in key.group(1).split("."))
            lines.setdefault(f"{table}.{dotted}" if table else dotted, number)
            rest = line[key.end() :]
            in_string = rest.count('"""') % 2 == 1 or rest.count("'''") % 2 == 1
    return lines


def _unquote(part: str) -> str:
    part = part.strip()
    if len(part) >= 2 and part[0] == part[-1] and part[0] in "\"'":
        return part[1:-1]
    return part


def _substitute(
    value: object,
    key: str,
    env: Mapping[str, str],
    document: Document,
    from_env: dict[str, tuple[str, ...]],
    item: str | None = None,
) -> object:
    if isinstance(value, str):
        names: list[str] = []

        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$${":
                return "${"
            name = match.group(1)
            if name is None:
                raise document.error(
                    key, f"{key}: '${{' starts no variable (${{NAME}}; $${{ for a literal ${{)"
                )
            if name not in env:
                raise document.error(key, f"{key}: the environment variable {name} is not set")
            names.append(name)
            return env[name]

        result = _VARIABLE.sub(replace, value)
        if names:
            from_env[item or key] = tuple(names)
        return result
    if isinstance(value, dict):
        return {
            name: _substitute(item, f"{key}.{name}" if key else name, env, document, from_env)
            for name, item in value.items()
        }
    if isinstance(value, list):
        return [
            _substitute(one, key, env, document, from_env, f"{key}[{index}]")
            for index, one in enumerate(value)
        ]
    return value
