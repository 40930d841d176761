"""``moonish wal repair``: cut a damaged log, or set where a lost log continues."""

from __future__ import annotations

import click
import orjson

from moonish.log.format import parse_segment_name

from .. import options


@click.command("repair")
@click.argument("shard_dir", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--truncate-at",
    "offset",
    type=click.IntRange(0),
    help="Cut the segment at this byte offset (the offset the writer's or verify's error "
    "names: the end of a record, or a damaged frame, whose atomic batch is cut whole) and "
    "remove every later segment; 0 removes the segment whole (a damaged segment header).",
)
@click.option(
    "--segment",
    help="With --truncate-at: the segment file to cut (default: the newest).",
)
@click.option(
    "--next-lsn",
    type=click.IntRange(1),
    help="Make the next writer continue at this LSN (when the end of the log is unknown).",
)
@options.dry_run(help="Only print what would be discarded.")
def repair(
    shard_dir: str, offset: int | None, segment: str | None, next_lsn: int | None, dry_run: bool
) -> None:
    """Repair SHARD_DIR by an explicit choice, printing what it discards as JSON.

    The writer cuts nothing but a torn tail by itself; on damage it stops and names the
    offset to cut at. --truncate-at cuts there: the records from that offset on (and every
    later segment) are removed, and their LSNs (as far as any frame header with a valid
    checksum, the damaged one's included, or the index shows) are marked discarded in
    control.json, so no LSN is ever written twice; readers that reach them exit 3 naming
    where the log continues.
    --next-lsn sets where the writer continues when every segment was removed after a crash.
    Needs the writer lock: no writer may run. Run with --dry-run first.

    Example:

        moonish wal repair data/shard-0 --truncate-at 73144 --dry-run
    """
    from moonish.log.repair import set_next_lsn, truncate_at

    if (offset is None) == (next_lsn is None):
        raise click.UsageError("give exactly one of --truncate-at and --next-lsn")
    if segment is not None and offset is None:
        raise click.UsageError("--segment goes with --truncate-at")
    if offset is not None:
        base = None
        if segment is not None:
            base = parse_segment_name(segment.rsplit("/", 1)[-1])
            if base is None:
                raise click.UsageError(f"{segment!r} is not a segment file name")
        report = truncate_at(shard_dir, offset, segment_base=base, dry_run=dry_run)
    else:
        assert next_lsn is not None
        report = set_next_lsn(shard_dir, next_lsn, dry_run=dry_run)
    click.echo(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2).decode())
