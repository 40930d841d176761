"""Exit codes by error kind, and one-line error output.

| exit | meaning                                                         |
|------|-----------------------------------------------------------------|
| 0    | success                                                         |
| 1    | unexpected failure (a bug: please report it)                    |
| 2    | usage or invalid argument (bad LSN, limit, missing directory)   |
| 3    | the requested LSN is no longer retained (message names oldest)  |
| 4    | corruption (file, byte offset and LSN in the message)           |
| 5    | unsupported format (segment version, RDB-preamble AOF)          |
| 6    | temporarily unavailable (shard locked by another writer)        |
"""

from __future__ import annotations

import click

from moonish.errors import MoonishError

EXIT_CODES = {
    "invalid_argument": 2,
    "not_retained": 3,
    "corruption": 4,
    "unsupported": 5,
    "unavailable": 6,
    "error": 1,
}


class CliError(click.ClickException):
    """A moonish library error as a click exception with the exit code of its kind."""

    def __init__(self, error: MoonishError) -> None:
        super().__init__(f"{error.kind}: {error}")
        self.exit_code = EXIT_CODES.get(error.kind, 1)  # type: ignore[misc]
        self.error = error


class LoggedExit(click.ClickException):
    """An exit status whose reason the command already logged in its own format (``moonish
    run --log-format json``): nothing more is printed."""

    def __init__(self, exit_code: int) -> None:
        super().__init__("")
        self.exit_code = exit_code  # type: ignore[misc]
