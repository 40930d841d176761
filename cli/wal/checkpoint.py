"""``moonish wal checkpoint``: write a snapshot of each shard's keyspace and a checkpoint."""

from __future__ import annotations

import click
import orjson

from moonish.cdc import shard_read
from moonish.state.shard import ShardWriter


@click.command("checkpoint")
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option("--label", default="", help="Checkpoint label (default: the snapshot file name).")
def checkpoint(path: str, label: str) -> None:
    """Snapshot the keyspace of every shard under PATH (a data or shard directory).

    Each shard gets <lsn>.snap (its keyspace after record <lsn>, written atomically) and a
    checkpoint record; `cdc read --snapshot` starts from the newest snapshot. A shard a
    running writer holds (a capture, an import) is asked to write it, in the background
    while it goes on appending, and the command waits until it is in place; any other shard
    is opened and written here. Prints one JSON line per shard.

    Example:

        moonish wal checkpoint data
    """
    from moonish.state.requests import ask_checkpoint

    for shard_dir in shard_read.existing_shard_dirs(path):
        answer = ask_checkpoint(shard_dir, label)
        if answer is not None:
            line = {"shard_dir": shard_dir, **answer, "by": "the running writer"}
        else:
            with ShardWriter(shard_dir) as writer:
                snapshot, lsn = writer.checkpoint(label)
                keys = len(writer.keyspace)
            line = {"shard_dir": shard_dir, "snapshot": snapshot, "lsn": lsn, "keys": keys}
        click.echo(orjson.dumps(line).decode())
