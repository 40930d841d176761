"""``moonish consumer seek``: reset a named consumer to a position, back or forward."""

from __future__ import annotations

import click

from moonish.datadir import consumers

from .. import options
from ..remote import DATA_PATH, connect
from .output import move, print_json


@click.command("seek")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@click.argument("position")
@options.remote_options
def seek(
    data_dir: str, name: str, position: str, token_file: str | None, cacert: str | None
) -> None:
    """Reset consumer NAME to POSITION (earliest, now or a token), back or forward; clears a
    lost status. Prints its token.

    Example:

        moonish consumer seek data export earliest
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            print_json({"name": name, "token": str(client.seek(name, position))})
        return
    move(consumers.seek, data_dir, name, position)
