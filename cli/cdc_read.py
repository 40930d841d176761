"""``moonish cdc read``: one batch of envelopes from a cursor (Moon's CDC.READ)."""

from __future__ import annotations

import sys

import click

from cli.params import LSN
from moonish.cdc import shard_read
from moonish.cdc.cursor import Cursor


# A negative FROM_LSN ("-1") must reach the LSN type and get its message, not "no such option".
@click.command("read", context_settings={"ignore_unknown_options": True})
@click.argument("wal_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("from_lsn", type=LSN, required=False)
@click.option(
    "--limit",
    type=click.IntRange(1, shard_read.MAX_LIMIT),
    default=shard_read.DEFAULT_LIMIT,
    show_default=True,
    help="Most envelopes to print (1..10000).",
)
@click.option("--name", default="moonish", show_default=True, help="source.name in envelopes.")
@click.option(
    "--snapshot",
    is_flag=True,
    help='Start a new consumer: the newest snapshot\'s keys as op "r", then the changes '
    "after it (FROM_LSN omitted or 0).",
)
@click.option(
    "--transactions",
    is_flag=True,
    help="Also print Debezium BEGIN/END records around atomic batches.",
)
def read(
    wal_dir: str, from_lsn: Cursor | None, limit: int, name: str, snapshot: bool,
    transactions: bool,
) -> None:  # fmt: skip
    """Print the next cursor, then up to LIMIT envelopes with LSN >= FROM_LSN, one per line.

    WAL_DIR is one shard's directory. The first line is the cursor to pass back as FROM_LSN
    to continue; when nothing is new it equals FROM_LSN and no envelope follows. 0 reads from
    the start of the shard. FROM_LSN may also be a snapshot cursor (snapshot:<lsn>:<row>)
    printed by an earlier --snapshot read. FROM_LSN is required unless --snapshot is given.

    Example:

        moonish cdc read data/shard-0 0 --limit 10

        moonish cdc read data/shard-0 --snapshot --limit 100
    """
    if from_lsn is None and not snapshot:
        raise click.UsageError("Missing argument 'FROM_LSN'.")
    result = shard_read.read(
        wal_dir, from_lsn or Cursor(0), limit, name=name, snapshot=snapshot,
        transactions=transactions,
    )  # fmt: skip
    out = sys.stdout.buffer
    out.write(f"{result.cursor}\n".encode())
    if result.events:
        out.write(b"\n".join(result.events.envelopes))
        out.write(b"\n")
    out.flush()
