"""``moonish cdc export``: envelope files for Spark's file source, resumable, exactly once."""

from __future__ import annotations

import signal
from types import FrameType

import click

from .. import options
from ..params import OUTPUT_DIR, sink_name


@click.command("export")
@click.argument("source", type=click.Path(exists=True, file_okay=False))
@click.argument("out_dir", type=OUTPUT_DIR)
@options.follow(help="Keep exporting new records (Ctrl-C stops).")
@click.option(
    "--max-records-per-file",
    type=click.IntRange(1, 10_000_000),
    default=50_000,
    show_default=True,
    help="Most envelopes in one file.",
)
@click.option(
    "--max-file-age-ms",
    type=click.IntRange(0, None),
    default=1000,
    show_default=True,
    help="With --follow: longest time an envelope waits before its file is written.",
)
@options.source_name
@options.consumer(
    help="Register as this named consumer of SOURCE (default: export-<OUT_DIR's name>), so "
    "retention keeps what is not yet in a file."
)
@options.no_consumer
@options.messages(help='Also export checkpoints and message records (op "m").')
def export(
    source: str,
    out_dir: str,
    follow: bool,
    max_records_per_file: int,
    max_file_age_ms: int,
    name: str,
    consumer: str | None,
    no_consumer: bool,
    messages: bool,
) -> None:
    """Write the envelopes of SOURCE (a data directory or a shard) as NDJSON files in OUT_DIR.

    Each file appears complete or not at all (temporary name, fsync, rename) and is named
    shard-<shard>-<first LSN>-<last LSN>.ndjson. The export's cursor is kept in
    OUT_DIR/_moonish_export.json and committed after each file, so a rerun after a crash
    continues where the complete files end: every change is in exactly one file. OUT_DIR
    holds the export of one SOURCE (its real path and shard count are recorded there); an
    export of another one into it is refused (exit 2, naming both). The export is a named
    consumer of SOURCE (export-<OUT_DIR's name> unless --consumer or --no-consumer), moved
    with each file, so retention never removes what it has not written. Prints one line per
    shard: its cursor after the run. SIGTERM and Ctrl-C stop a --follow export cleanly
    (exit 0); envelopes not yet in a file are exported by the next run.

    Example:

        moonish cdc export data export --max-records-per-file 100000
    """
    from moonish.sinks.export import Exporter, ExportOptions

    if no_consumer and consumer is not None:
        raise click.UsageError("--consumer and --no-consumer exclude each other.")
    if not no_consumer and consumer is None:
        consumer = sink_name("export", out_dir)
    options = ExportOptions(
        max_records_per_file, max_file_age_ms, name=name, consumer=consumer, messages=messages
    )
    with Exporter(source, out_dir, options) as exporter:

        def stop(signum: int, frame: FrameType | None) -> None:
            exporter.close()

        previous = signal.signal(signal.SIGTERM, stop)
        try:
            stats = exporter.run(follow=follow)
        except KeyboardInterrupt:
            stats = None
        finally:
            signal.signal(signal.SIGTERM, previous)
        cursors = exporter.cursors
    written = f"{stats.files} files, {stats.records} envelopes" if stats else "interrupted"
    click.echo(f"{written}; cursors: " + ", ".join(f"shard {s}: {c}" for s, c in cursors.items()))
