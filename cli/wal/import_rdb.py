"""``moonish wal import-rdb``: a Redis RDB snapshot seeds sharded moonish WALs."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click
import orjson

from .. import options
from ..params import OUTPUT_DIR

if TYPE_CHECKING:
    from moonish.redis.rdbimport.importer import RdbImportReport
    from moonish.redis.routing.keyfilter import FilterSpec
    from moonish.state.autosnapshot import SnapshotPolicy


@click.command("import-rdb")
@click.argument("rdb_file", type=click.Path(exists=True, dir_okay=False))
@click.argument("data_dir", type=OUTPUT_DIR)
@options.shard_options
@options.snapshot_policy
@options.key_filter
@options.retention_policy
@options.processes(
    help="Once the file is read, load the shards in up to this many processes, each its share, "
    "to use several cores; the logs are the same as with one."
)
@options.log_format()
def import_rdb_command(
    rdb_file: str,
    data_dir: str,
    shards: int,
    view: str,
    max_value_bytes: int,
    segment_bytes: int,
    processes: int,
    log_format: str,
    snapshots: SnapshotPolicy,
    key_filter: FilterSpec,
    retention: dict[str, int],
) -> None:
    """Load a Redis RDB file (RDB_FILE: dump.rdb, versions 9 to 12, Redis 6.2 to 7.4, or Valkey
    9's VALKEY080) into
    DATA_DIR as r rows (Debezium snapshot reads), one per key, routed by hash slot to
    DATA_DIR/shard-<k>.

    The whole file is read and its CRC-64 checked before anything is written; expired keys
    and empty containers are left out, as Redis's loader does. Running it again with the same
    file writes nothing; a load cut short continues; a newer dump at the same path is loaded
    as differences (c/u for new or changed keys, d for keys that are gone). DATA_DIR remembers
    its RDB file and refuses another source. Prints a JSON summary; progress on stderr
    (--log-format json: a status line a second and a done line, as JSON).

    Example:

        moonish wal import-rdb /var/lib/redis/dump.rdb data --shards 4

        moonish wal import-rdb /var/lib/redis/dump.rdb data --shards 4 --processes 2

        moonish wal import-rdb dump.rdb data --shards 4 --exclude-keys 'session:*' --dbs 0
    """
    from moonish.redis.rdbimport.importer import import_rdb
    from moonish.state.config import StreamConfig, parse_view

    from ..logs import CountLines, StderrLog
    from .rebuilding import rebuild_lines

    stream = StreamConfig(parse_view(view), max_value_bytes)
    log = StderrLog("import-rdb", log_format=log_format)
    written = [0, 0]  # records written, records when last shown

    def progress(records: int) -> None:
        written[0] += records
        if written[0] - written[1] >= 100_000:
            written[1] = written[0]
            click.echo(f"\rloading: {written[0]} records written", file=sys.stderr, nl=False)

    def load(progress: Callable[[int], None]) -> RdbImportReport:
        return import_rdb(
            rdb_file,
            data_dir,
            shards,
            stream=stream,
            segment_bytes=segment_bytes,
            progress=progress,
            processes=processes,
            snapshots=snapshots,
            on_recovery=rebuild_lines(log),
            key_filter=key_filter,
            retention=retention,
        )

    if log.json:
        with CountLines(log, "records") as count:
            report = load(count.update)
    else:
        report = load(progress)
        if written[1]:
            click.echo(file=sys.stderr)
    summary = {
        "rdb": report.rdb,
        "version": report.version,
        "keys_loaded": report.keys_loaded,
        "keys_expired": report.keys_expired,
        "empty_keys_skipped": report.empty_keys_skipped,
        "records": report.records,
        "per_shard": report.per_shard,
        "ops": report.ops,
        "resumed_from": report.resumed_from,
        "filtered": dict(sorted(report.filtered.items())),
    }
    click.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
