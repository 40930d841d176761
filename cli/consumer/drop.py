"""``moonish consumer drop``: remove a named consumer, so it no longer holds the log."""

from __future__ import annotations

import click

from moonish.datadir import consumers

from .. import options
from ..remote import DATA_PATH, connect
from .output import print_json


@click.command("drop")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@options.remote_options
def drop(data_dir: str, name: str, token_file: str | None, cacert: str | None) -> None:
    """Remove consumer NAME: it no longer holds the log.

    Example:

        moonish consumer drop data export
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            client.drop(name)
    else:
        consumers.drop(data_dir, name)
    print_json({"name": name, "dropped": True})
