"""``moonish cdc info``: oldest/latest LSN, segments and bytes of a shard (or all shards)."""

from __future__ import annotations

import click
import orjson

from moonish.cdc import shard_read
from moonish.redis.capture_status import read_status


@click.command("info")
@click.argument("wal_dir", type=click.Path(exists=True, file_okay=False))
def info(wal_dir: str) -> None:
    """Print JSON facts about a shard: oldest_lsn, latest_lsn, next_lsn, segments, bytes.

    Given a data directory (with shard-<k> subdirectories) it prints
    {"data_dir": ..., "shards": [...]} with one object per shard, and for a live capture's
    data directory "capture": the offsets it received and made durable, and lag_bytes.

    Example:

        moonish cdc info data/shard-0
    """
    shards = shard_read.shard_dirs(wal_dir)
    if len(shards) == 1 and shards[0] == wal_dir:
        report = shard_read.info(wal_dir)
    else:
        report = {"data_dir": wal_dir, "shards": [shard_read.info(path) for path in shards]}
        status = read_status(wal_dir)
        if status is not None:  # a live capture writes it (docs/redis-source.md)
            report["capture"] = status
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())
