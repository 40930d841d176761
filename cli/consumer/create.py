"""``moonish consumer create``: register a named consumer, from a position."""

from __future__ import annotations

import click

from moonish.cdc import lag
from moonish.cdc.positions import data_shards, resolve
from moonish.datadir import consumers

from .. import options
from ..remote import DATA_PATH, connect
from .output import print_json


@click.command("create")
@click.argument("data_dir", type=DATA_PATH)
@click.argument("name")
@options.from_position(
    "start",
    help="Where it starts: earliest (every retained change), now (changes from now on) or "
    "a token (the changes after it).",
    default="now",
)
@click.option("--owner", default="cli", show_default=True, help="What registers it.")
@click.option("--replace", is_flag=True, help="Replace a consumer of the same name.")
@options.remote_options
def create(
    data_dir: str,
    name: str,
    start: str,
    owner: str,
    replace: bool,
    token_file: str | None,
    cacert: str | None,
) -> None:
    """Register consumer NAME in DATA_DIR (a data or shard directory); prints it as JSON.

    From then on retention keeps every change it has not confirmed (`consumer ack`).

    Example:

        moonish consumer create data export --from earliest
    """
    client = connect(data_dir, token_file, cacert, ())
    if client is not None:
        with client:
            print_json(client.create_consumer(name, start, owner=owner, replace=replace))
        return
    token = resolve(data_shards(data_dir), start)
    made = consumers.create(data_dir, name, token.positions, owner=owner, replace=replace)
    print_json(lag.describe(data_dir, made.name).to_json())
