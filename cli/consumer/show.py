"""``moonish consumer show``: one named consumer's lag, with its token."""

from __future__ import annotations

import click

from moonish.cdc import lag

from .. import options
from ..remote import DATA_PATH, connect
from .output import print_table


@click.command("show")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@options.as_json(help="Print JSON.")
@options.remote_options
def show(
    data_dir: str, name: str, as_json: bool, token_file: str | None, cacert: str | None
) -> None:
    """One consumer's lag, per shard, with its token.

    Example:

        moonish consumer show data export --json
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            print_table([client.consumer(name)], as_json)
        return
    print_table([lag.describe(data_dir, name).to_json()], as_json)
