"""``moonish wal dump``: records in human-readable form, like pg_waldump."""

from __future__ import annotations

import click

from moonish.cdc.cursor import Cursor

from .. import options


@click.command("dump")
@click.argument("wal_dir", type=click.Path(exists=True, file_okay=False))
@options.from_lsn(help="First LSN to show.", default=0)
@options.limit(help="Most records to show.", default=None)
def dump(wal_dir: str, from_lsn: Cursor, limit: int | None) -> None:
    """Print one line per record: LSN, segment, offset, size, type, batch, commit time, content.

    Example:

        moonish wal dump data/shard-0 --from-lsn 100 --limit 20
    """
    from moonish.log.verify import dump_lines

    for line in dump_lines(wal_dir, from_lsn.lsn, limit):
        click.echo(line)
