"""The errors of a pipeline file and of a supervised part."""

from __future__ import annotations

from moonish.errors import InvalidArgumentError, MoonishError


class ConfigError(InvalidArgumentError):
    """A pipeline file that cannot be run as written: the message names the key, ``path`` the
    file and ``line`` (1-based) where the key is, when it is known.

    Attributes:
        line: the line of the key in the file, or ``None``.
        key: the key, dotted (``kafka.topic_prefix``), or ``None`` for the whole file.
    """

    def __init__(
        self, message: str, *, path: str, line: int | None = None, key: str | None = None
    ) -> None:
        self.line = line
        self.key = key
        super().__init__(message, path=path)

    def _render(self) -> str:
        where = self.path if self.line is None else f"{self.path}, line {self.line}"
        return f"{self.message} ({where})"


class PartFailedError(MoonishError):
    """A part exited with a status that restarting cannot cure (2 usage, 3 not retained,
    4 corruption, 5 unsupported): the pipeline stops with the same status.

    Attributes:
        part: the part's section (``source``, ``kafka``, ...).
        exit_code: its exit status, the supervisor's too.
    """

    def __init__(self, part: str, exit_code: int, command: str) -> None:
        self.part = part
        self.exit_code = exit_code
        self.kind = _KINDS.get(exit_code, "error")
        super().__init__(
            f"part [{part}] exited with status {exit_code} ({EXIT_MEANINGS.get(exit_code, '?')}),"
            f" which a restart does not cure; stopping the pipeline. Its command: {command}"
        )


_KINDS = {2: "invalid_argument", 3: "not_retained", 4: "corruption", 5: "unsupported"}
EXIT_MEANINGS = {
    0: "stopped",
    1: "unexpected failure",
    2: "usage or invalid argument",
    3: "position no longer retained",
    4: "corruption",
    5: "unsupported format",
    6: "temporarily unavailable",
    130: "interrupted",
}
"""What a part's exit status means (cli/errors.py's kinds)."""
