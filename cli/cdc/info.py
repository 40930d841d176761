"""``moonish cdc info``: oldest/latest LSN, segments and bytes of a shard (or all shards)."""

from __future__ import annotations

import os
from typing import Any

import click
import orjson

from moonish.cdc import shard_read
from moonish.redis.capture.status import read_status
from moonish.redis.routing.filterfile import load_filter
from moonish.redis.routing.sources import describe, load_source, stored_position

from .. import options
from ..remote import DATA_PATH, connect


@click.command("info")
@click.argument("wal_dir", type=DATA_PATH)
@options.remote_options
def info(wal_dir: str, token_file: str | None, cacert: str | None) -> None:
    """Print JSON facts about a shard: oldest_lsn, latest_lsn, next_lsn, segments, bytes.

    Given a data directory (with shard-<k> subdirectories) it prints
    {"data_dir": ..., "shards": [...]} with one object per shard, and for a live capture's
    data directory "capture" (its capture.json): the link's state, the offsets it received
    and made durable (pending_bytes between them), the master's offset and how far the
    durable offset is behind it (bytes_behind, seconds_behind; null while unknown),
    reconnects and the last full resync. A data directory written under a source filter
    (--include-keys, --exclude-keys, --dbs, --types) shows "filter": the filter and what it
    left out, commands and loaded keys by rule (docs/filters.md). A
    shard of an import or capture also shows "source_position": the source position its log
    stores last ({"lsn", "position", "text"}; null when its last 10,000 records hold none).

    Given a server's URL (moonish serve; with --token-file, --cacert) it prints the server's
    GET /v1/info: every shard's facts, the earliest and now tokens, the lag table and the
    server's own figures.

    Example:

        moonish cdc info data/shard-0
    """
    client = connect(wal_dir, token_file, cacert, ())
    if client is not None:
        with client:
            click.echo(orjson.dumps(client.info(), option=orjson.OPT_INDENT_2).decode())
        return
    shards = shard_read.shard_dirs(wal_dir)
    if len(shards) == 1 and shards[0] == wal_dir:
        report = _shard(wal_dir, os.path.dirname(os.path.abspath(wal_dir)))
    else:
        report = {"data_dir": wal_dir, "shards": [_shard(path, wal_dir) for path in shards]}
        status = read_status(wal_dir)
        if status is not None:  # a live capture writes it (docs/redis-source.md)
            report["capture"] = status
        stored = load_filter(wal_dir)
        if stored is not None:
            spec, commands, keys = stored
            report["filter"] = {
                **spec.to_json(),
                "commands_filtered": dict(sorted(commands.items())),
                "keys_filtered": dict(sorted(keys.items())),
            }
    click.echo(orjson.dumps(report, option=orjson.OPT_INDENT_2).decode())


def _shard(shard_dir: str, data_dir: str) -> dict[str, Any]:
    """A shard's facts, with its stored source position when the data directory has a
    source (source.json: an import or a capture wrote it)."""
    facts = shard_read.info(shard_dir)
    if load_source(data_dir) is not None:
        stored = stored_position(shard_dir)
        facts["source_position"] = stored and {
            "lsn": stored[0],
            "position": stored[1],
            "text": describe(stored[1]),
        }
    return facts
