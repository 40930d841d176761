"""``moonish wal stream``: show or change a shard's stream configuration (view type)."""

from __future__ import annotations

import dataclasses

import click
import orjson

from moonish.cdc import shard_read
from moonish.state.config import load_config, parse_view
from moonish.state.shard import ShardWriter

from .. import options


@click.command("stream")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@options.view(help="New view type (OFF disables the stream).")
@options.max_value_bytes(
    help='Values whose JSON is larger are left out of images: envelopes carry "value": null, '
    '"omitted_length": n.'
)
def stream(path: str, view: str | None, max_value_bytes: int | None) -> None:
    """Show, or with --view / --max-value-bytes change, the stream configuration of every
    shard under PATH. Records written from then on follow it; nothing is produced for
    earlier records. Changing it needs the shard's writer lock. Prints one JSON line per shard.

    Example:

        moonish wal stream data --view KEYS_ONLY
    """
    for shard_dir in shard_read.existing_shard_dirs(path):
        if view is not None or max_value_bytes is not None:
            with ShardWriter(shard_dir) as writer:
                old = writer.stream
                writer.set_stream(
                    dataclasses.replace(  # the retention policy stays as it is
                        old,
                        view=parse_view(view) if view else old.view,
                        max_value_bytes=old.max_value_bytes
                        if max_value_bytes is None
                        else max_value_bytes,
                    )
                )
        config = load_config(shard_dir)
        line = {"shard_dir": shard_dir, "stream": config.to_json() if config else None}
        click.echo(orjson.dumps(line).decode())
