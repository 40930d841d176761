"""``moonish wal import-aof``: a Redis 7 append-only file into sharded moonish WALs."""

from __future__ import annotations

import contextlib
import os
import sys
from typing import TYPE_CHECKING, Any

import click
import orjson

from .. import options
from ..params import OUTPUT_DIR

if TYPE_CHECKING:
    from moonish.redis.routing.keyfilter import FilterSpec
    from moonish.state.autosnapshot import SnapshotPolicy


@click.command("import-aof")
@click.argument("appendonlydir", type=click.Path(exists=True, file_okay=False))
@click.argument("data_dir", type=OUTPUT_DIR)
@options.shard_options
@options.snapshot_policy
@options.key_filter
@options.retention_policy
@click.option(
    "--skip-unsupported",
    is_flag=True,
    help="Write each command moonish does not implement (a module's) as a moonish.skipped "
    "message record (the command as RESP) instead of failing; the summary counts them by "
    "name. Scripts (EVAL, FCALL) are refused still.",
)
@options.processes(
    help="A first import (every shard empty) runs in up to this many processes, each "
    "writing its share of the shards, to use several cores; a rerun, or an AOF holding SORT, "
    "runs in one. If a command is refused, the other processes' shards may have gone past "
    "it: fix it without changing its keys, or import into a new directory."
)
@options.log_format()
def import_aof_command(
    appendonlydir: str,
    data_dir: str,
    shards: int,
    view: str,
    max_value_bytes: int,
    segment_bytes: int,
    skip_unsupported: bool,
    processes: int,
    log_format: str,
    snapshots: SnapshotPolicy,
    key_filter: FilterSpec,
    retention: dict[str, int],
) -> None:
    """Replay a Redis 7 multi-part AOF (APPENDONLYDIR, with its manifest) into DATA_DIR.

    Keys are routed by Redis Cluster hash slot ({hashtag} rules) to DATA_DIR/shard-<k>;
    MULTI/EXEC blocks stay atomic per shard; SELECT is honoured. Commands run on each shard's
    keyspace as Redis loads an AOF, so records say c/u/d with images per --view; keys whose
    expiry time has passed are removed at the end (d records marked as expiries). A base file
    that is an RDB file (aof-use-rdb-preamble yes, Redis's default) is loaded as r rows.
    FUNCTION commands run on every shard (each keeps all libraries) as moonish.function
    message records. A command moonish does not implement fails the import (exit 5, naming
    the file and byte offset) unless --skip-unsupported. Prints a JSON summary; progress goes
    to stderr (--log-format json: a status line a second and a done line, as JSON).

    Running it again continues where each shard stopped (a failed, killed or finished
    import, or an AOF Redis appended to since): every command is applied once. After Redis
    rewrote the AOF, the shards receive only the differences. DATA_DIR remembers its AOF
    directory and refuses another source.

    Nothing is created when the import is refused: DATA_DIR must not be a file, a shard
    directory or the AOF directory, an existing DATA_DIR must hold the same number of shards,
    and the open-file limit must allow 4 descriptors per shard (a soft limit is raised up to
    the hard limit when needed).

    Example:

        moonish wal import-aof fixtures/redis-aof/mixed/appendonlydir data --shards 4

        moonish wal import-aof appendonlydir data --shards 4 --segment-bytes 16777216

        moonish wal import-aof appendonlydir data --shards 4 --skip-unsupported

        moonish wal import-aof appendonlydir data --shards 4 --processes 2

        moonish wal import-aof appendonlydir data --shards 4 --exclude-keys 'tmp:*'
    """
    from moonish.redis.aof.checks import check_import
    from moonish.redis.aof.importer import import_aof
    from moonish.state.config import StreamConfig, parse_view

    from ..logs import CountLines, StderrLog
    from .rebuilding import rebuild_lines

    log = StderrLog("import-aof", log_format=log_format)
    # refusals (target, shard count, open-file limit) come before the progress bar and
    # before anything is created
    total = sum(os.path.getsize(path) for path in check_import(appendonlydir, data_dir, shards))
    shown: contextlib.AbstractContextManager[Any] = (
        CountLines(log, "bytes", total)
        if log.json
        else click.progressbar(length=total, label="importing", file=sys.stderr)
    )
    with shown as bar:
        stream = StreamConfig(parse_view(view), max_value_bytes)
        report = import_aof(
            appendonlydir,
            data_dir,
            shards,
            progress=bar.update,
            stream=stream,
            segment_bytes=segment_bytes,
            skip_unsupported=skip_unsupported,
            processes=processes,
            snapshots=snapshots,
            on_recovery=rebuild_lines(log),
            key_filter=key_filter,
            retention=retention,
        )
    if report.truncated_tail and log.json:
        fields = {"truncated_tail": report.truncated_tail}
        log.line("truncated_tail", report.truncated_tail, fields, level="warning")
    elif report.truncated_tail:
        click.echo(f"moonish: warning: {report.truncated_tail}", err=True)
    summary = {
        "files": report.files,
        "bytes": report.bytes,
        "commands": report.commands,
        "transactions": report.transactions,
        "records": report.records,
        "per_shard": report.per_shard,
        "lsn_ranges": report.lsn_ranges,
        "per_command": dict(sorted(report.per_command.items())),
        "skipped": dict(sorted(report.skipped.items())),
        "truncated_tail": report.truncated_tail,
        "rdb_keys": report.rdb_keys,
        "resumed_from": report.resumed_from,
        "resynced": report.resynced,
        "position": report.position,
        "filtered": dict(sorted(report.filtered.items())),
    }
    click.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
