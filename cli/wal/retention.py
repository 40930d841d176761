"""``moonish wal retention``: show or set the retention policy of every shard."""

from __future__ import annotations

import dataclasses

import click
import orjson

from moonish.cdc.positions import data_shards
from moonish.datadir.policy import RetentionPolicy
from moonish.state.config import load_config, store_retention

from ..params import BYTES

MS = click.IntRange(0)


@click.command("retention")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--max-bytes", type=BYTES, help="Delete the oldest segments past this size.")
@click.option("--max-age-ms", type=MS, help="Delete segments whose newest record is older.")
@click.option("--max-records", type=click.IntRange(0), help="Keep at most this many LSNs.")
@click.option("--min-age-ms", type=MS, help="Never delete a segment younger than this.")
@click.option(
    "--max-pinned-bytes",
    type=BYTES,
    help="Most that consumers may hold beyond the rest; past it the laggiest is marked lost.",
)
@click.option("--clear", is_flag=True, help="Start from an empty policy (keep everything).")
def retention(data_dir: str, clear: bool, **rules: int | None) -> None:
    """Show, or with options set, the retention policy of every shard under DATA_DIR, stored
    in each shard's stream.json. Given options replace those rules only (--clear first
    forgets the others). Setting it takes each shard's writer lock, like `wal stream`; the
    writer applies it when it rotates a segment, `wal prune` by hand. Prints one JSON line
    per shard.

    Example:

        moonish wal retention data --max-bytes 10G --max-pinned-bytes 50G
    """
    given = {name: value for name, value in rules.items() if value is not None}
    for shard_dir in data_shards(data_dir):
        config = load_config(shard_dir)
        if given or clear:
            old = RetentionPolicy() if clear or config is None else config.retention
            config = store_retention(shard_dir, dataclasses.replace(old, **given))
        policy = None if config is None else config.retention.to_json()
        click.echo(orjson.dumps({"shard_dir": shard_dir, "retention": policy}).decode())
