"""``moonish cdc tail``: envelopes as NDJSON to the end of the log, or forever."""

from __future__ import annotations

import sys

import click

from cli.params import LSN
from moonish.cdc import shard_read
from moonish.cdc.cursor import Cursor


@click.command("tail")
@click.argument("wal_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--from-lsn",
    type=LSN,
    default=0,
    show_default=True,
    help="First LSN to print (0: the start of the shard).",
)
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new records (Ctrl-C stops).")
@click.option("--name", default="moonish", show_default=True, help="source.name in envelopes.")
@click.option(
    "--poll-ms",
    type=click.IntRange(1, 60_000),
    default=1000,
    show_default=True,
    help="With --follow: longest wait without a file-system event before re-checking.",
)
@click.option("--snapshot", is_flag=True, help='Start with the newest snapshot\'s keys (op "r").')
@click.option("--transactions", is_flag=True, help="Also print BEGIN/END records.")
def tail(
    wal_dir: str, from_lsn: Cursor, follow: bool, name: str, poll_ms: int, snapshot: bool,
    transactions: bool,
) -> None:  # fmt: skip
    """Print envelopes from FROM_LSN as NDJSON, in LSN order.

    Without --follow, stops at the current end of the log. With --follow, waits for new
    records, woken by file-system events (watchdog) with a polling fallback, until Ctrl-C,
    which exits with status 0 after flushing what was printed.

    Example:

        moonish cdc tail data/shard-0 --from-lsn 100 --follow
    """
    out = sys.stdout.buffer
    with shard_read.tail(
        wal_dir, from_lsn, follow=follow, name=name, fallback_poll_ms=poll_ms,
        snapshot=snapshot, transactions=transactions,
    ) as stream:  # fmt: skip
        try:
            for batch in stream.batches():
                out.write(b"\n".join(batch.envelopes))
                out.write(b"\n")
                out.flush()
        except KeyboardInterrupt:
            out.flush()
