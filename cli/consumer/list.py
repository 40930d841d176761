"""``moonish consumer list``: the lag table of every named consumer."""

from __future__ import annotations

import click

from moonish.cdc import lag

from .. import options
from ..remote import DATA_PATH, connect
from .output import print_table


@click.command("list")
@click.argument("data_dir", type=DATA_PATH)
@options.as_json(help="One JSON object per consumer.")
@options.remote_options
def list_command(data_dir: str, as_json: bool, token_file: str | None, cacert: str | None) -> None:
    """The lag table: per consumer and shard the confirmed and latest LSN, the lag in records
    and bytes, the age of the oldest unconfirmed change, and its status (reserved, extended,
    lost with the reason).

    Example:

        moonish consumer list data
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            print_table(client.consumers(), as_json)
        return
    print_table([entry.to_json() for entry in lag.lag_table(data_dir)], as_json)
