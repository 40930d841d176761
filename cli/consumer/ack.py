"""``moonish consumer ack``: confirm a named consumer's changes up to a token."""

from __future__ import annotations

import click

from moonish.datadir import consumers

from .. import options
from ..remote import DATA_PATH, connect
from .output import move, print_json


@click.command("ack")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@click.argument("token")
@options.remote_options
def ack(data_dir: str, name: str, token: str, token_file: str | None, cacert: str | None) -> None:
    """Confirm every change up to TOKEN (positions only move forward; an older token changes
    nothing). Prints the consumer's token after it.

    Example:

        moonish consumer ack data export m4.d1234.b12.a0.e99999
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            print_json({"name": name, "token": str(client.ack(name, token))})
        return
    move(consumers.ack, data_dir, name, token)
