"""What ``cdc read``, ``cdc tail``, ``cdc info`` and the ``consumer`` commands share to read
a server (``moonish serve``) by URL instead of a data directory: the PATH type, and the
client, which refuses the options that only make sense on the machine that holds the log.
Their ``--token-file`` and ``--cacert`` are ``cli.options.remote_options``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
from click.core import ParameterSource

from moonish.remote.options import ClientOptions, is_url, read_token_file

if TYPE_CHECKING:
    from moonish.remote.client import Client


class DataPath(click.ParamType):  # type: ignore[type-arg]
    """A shard or data directory that exists, or a server's ``http(s)://`` URL."""

    name = "path_or_url"
    _directory = click.Path(exists=True, file_okay=False)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if isinstance(value, str) and is_url(value):
            return value
        return str(self._directory.convert(value, param, ctx))


DATA_PATH = DataPath()


def connect(
    path: str, token_file: str | None, cacert: str | None, local_only: tuple[str, ...]
) -> Client | None:
    """A client when PATH is a URL (``None`` for a directory).

    Raises:
        click.UsageError: an option that reads the log itself (``local_only``, given on the
            command line) with a URL, or ``--token-file``/``--cacert`` without one.
        InvalidArgumentError: a bad URL, token file or certificate file.
    """
    ctx = click.get_current_context()
    if not is_url(path):
        for name in ("token_file", "cacert"):
            if ctx.params.get(name) is not None:
                raise click.UsageError(f"--{name.replace('_', '-')} goes with a server URL.")
        return None
    for name in local_only:
        if ctx.get_parameter_source(name) in (
            ParameterSource.COMMANDLINE,
            ParameterSource.ENVIRONMENT,
        ):
            option = "--" + name.replace("_", "-")
            raise click.UsageError(f"{option} reads a log on this machine, not with a URL.")
    token = None if token_file is None else read_token_file(token_file)
    from moonish.remote.client import connect as connect_client  # a local read needs none

    return connect_client(path, token, ClientOptions(cafile=cacert))
