"""``moonish wal dump``: records in human-readable form, like pg_waldump."""

from __future__ import annotations

import click

from cli.params import LSN
from moonish.cdc.cursor import Cursor


@click.command("dump")
@click.argument("wal_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--from-lsn", type=LSN, default=0, show_default=True, help="First LSN to show.")
@click.option("--limit", type=click.IntRange(min=1), default=None, help="Most records to show.")
def dump(wal_dir: str, from_lsn: Cursor, limit: int | None) -> None:
    """Print one line per record: LSN, segment, offset, size, type, batch, commit time, content.

    Example:

        moonish wal dump data/shard-0 --from-lsn 100 --limit 20
    """
    from moonish.log.verify import dump_lines

    for line in dump_lines(wal_dir, from_lsn.lsn, limit):
        click.echo(line)
