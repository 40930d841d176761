"""``moonish spark materialize``: a table of the latest state per key, kept by Spark."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import click

from moonish.errors import InvalidArgumentError

from .. import options
from ..remote import DATA_PATH

if TYPE_CHECKING:
    from ..logs import StderrLog


def source_kind(source: str) -> str:
    """``"url"`` for a server's URL (``moonish serve``), ``"export"`` for a directory of
    envelope files (``cdc export``), ``"wal"`` for a data directory or a shard.

    Raises:
        InvalidArgumentError: none of these.
    """
    from moonish.remote.options import is_url
    from moonish.sinks.export import FILE_NAME, STATE_NAME

    if is_url(source):
        return "url"

    entries = os.listdir(source)
    if STATE_NAME in entries or any(FILE_NAME.match(entry) for entry in entries):
        return "export"
    if any(entry.startswith("shard-") for entry in entries) or any(
        entry.endswith(".seg") for entry in entries
    ):
        return "wal"
    raise InvalidArgumentError(
        "neither a data directory (shard-<k>/) nor an export directory (cdc export)",
        path=source,
    )


@click.command("materialize")
@click.argument("source", type=DATA_PATH)
@click.argument("table_dir", metavar="TABLE", type=click.Path(file_okay=False))
@click.option(
    "--format",
    "table_format",
    type=click.Choice(["delta"]),
    default="delta",
    show_default=True,
    help="The table format: Delta Lake, written with delta-rs (Iceberg: not yet, docs/spark.md).",
)
@click.option(
    "--checkpoint",
    "checkpoint_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Spark's checkpoint directory for this query (keep it with the table).",
)
@click.option(
    "--max-records-per-trigger",
    type=click.IntRange(1, None),
    help="WAL or server source: most records per micro-batch (default: all available).",
)
@click.option(
    "--max-files-per-trigger",
    type=click.IntRange(1, None),
    help="Export source: most files per micro-batch (default: all available).",
)
@options.follow(help="Keep applying new changes every --interval-ms (Ctrl-C stops).", short=False)
@click.option(
    "--interval-ms",
    type=click.IntRange(1, None),
    default=1000,
    show_default=True,
    help="With --follow: time between micro-batches.",
)
@click.option(
    "--buckets",
    type=click.IntRange(1, None),
    default=64,
    show_default=True,
    help="Buckets (partitions by key hash) of a table this creates; an existing table keeps "
    "its own. A micro-batch rewrites only the buckets its keys fall in (docs/spark.md).",
)
@click.option(
    "--optimize-every",
    type=click.IntRange(0, None),
    default=100,
    show_default=True,
    help="Compact the table's small files every N micro-batches (0: never).",
)
@options.storage_option
@options.spark_master
@options.consumer(
    help="WAL or server source: register the query as this named consumer (default: "
    "spark-<TABLE's name>), acknowledged as micro-batches commit, so retention keeps what it "
    "has not applied."
)
@options.no_consumer
@options.remote_options
@options.log_format()
@options.metrics_endpoint
def materialize(
    source: str,
    table_dir: str,
    checkpoint_dir: str,
    max_records_per_trigger: int | None,
    max_files_per_trigger: int | None,
    follow: bool,
    interval_ms: int,
    table_format: str,
    buckets: int,
    optimize_every: int,
    storage_option: tuple[str, ...],
    master: str,
    consumer: str | None,
    no_consumer: bool,
    token_file: str | None,
    cacert: str | None,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Keep TABLE at the latest state of every key of SOURCE, exactly once.

    SOURCE is a data directory (read through the moonish Spark data source), a `moonish
    serve` server's URL (the same data source over HTTP, offsets the server's tokens,
    --token-file and --cacert as for `cdc read`: executors then need only the network), or
    an export directory written by `moonish cdc export` (read through Spark's file source). Without
    --follow, applies what is there now (trigger availableNow); with --follow, keeps applying
    new changes. Reading a data directory or a server, the query is a named consumer of it
    (spark-<TABLE's name> unless --consumer or --no-consumer), acknowledged as each
    micro-batch commits, so retention never removes what the table has not applied. Each
    micro-batch prints a progress line to stderr (batch id, rows, duration in ms, LSNs per
    shard or file-source offsets; --log-format json: a JSON line with batch_id, rows,
    duration_ms and lsn_ranges or offsets). Ctrl-C or SIGTERM stops the query cleanly
    after the running micro-batch (exit 0; a second one stops at once, and the micro-batch
    cut short is applied by the next run). At the end, prints the table's Delta version and
    live keys. TABLE is a Delta Lake table (one MERGE per micro-batch, its commit carrying
    the query id and batch id, so a replayed batch is skipped; Change Data Feed on), which
    delta-spark, DuckDB, polars and pandas read (docs/spark.md). A directory holding a table
    of moonish's earlier own format (_moonish_table.json) is refused (exit 5).

    TABLE is a local directory or s3://BUCKET/PATH: credentials and endpoint from the AWS
    environment variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION,
    AWS_ENDPOINT_URL, AWS_ALLOW_HTTP) or --storage-option; commits use S3 conditional writes
    (AWS_S3_ALLOW_UNSAFE_RENAME is refused). The bucket must exist (exit 2 otherwise; exit 6
    when the endpoint cannot be reached). The checkpoint stays a local directory.

    Example:

        moonish spark materialize data table --checkpoint table-checkpoint --follow

        moonish spark materialize data s3://lake/redis --checkpoint redis-checkpoint

        moonish spark materialize http://cdc.example:8470 table --checkpoint table-ck
    """
    import moonish.spark
    from moonish.spark.delta import open_table, require_table
    from moonish.spark.progress import BatchGate, StopRequest, run_until_stopped, stop_on_signals
    from moonish.spark.storage import parse_options, table_uri

    from ..logs import StderrLog
    from ..metrics import endpoint
    from ..params import sink_name
    from ..remote import connect

    if no_consumer and consumer is not None:
        raise click.UsageError("--consumer and --no-consumer exclude each other.")
    assert table_format == "delta"
    kind = source_kind(source)
    if max_files_per_trigger is not None and kind != "export":
        raise click.UsageError("--max-files-per-trigger applies to an export directory's files.")
    if max_records_per_trigger is not None and kind == "export":
        raise click.UsageError(
            "--max-records-per-trigger applies to a data directory or a server, not to an "
            "export directory (--max-files-per-trigger)."
        )
    if kind == "url":
        _check_server(source, token_file, cacert, metrics_port)
    else:
        connect(source, token_file, cacert, ())  # refuses --token-file/--cacert
    uri, storage_options = table_uri(table_dir), parse_options(storage_option)
    open_table(uri, storage_options)  # the format, the bucket, the endpoint: before Spark starts
    if kind in ("wal", "url") and not no_consumer and consumer is None:
        consumer = sink_name("spark", uri.rstrip("/").rpartition("/")[2] or uri)
    spark = moonish.spark.session(master)
    gate, request = BatchGate(), StopRequest()
    log = StderrLog("spark", log_format=log_format)

    def announce(url: str) -> None:
        log.line("metrics", f"metrics on {url}/metrics", {"url": url})

    with (
        stop_on_signals(request),  # after the session: it replaces PySpark's SIGINT handler
        endpoint(metrics_port, metrics_host, source, announce),
        ExitStack() as closing,
    ):
        changes = _changes(
            spark,
            kind,
            source,
            max_records_per_trigger,
            max_files_per_trigger,
            consumer,
            {"tokenFile": token_file, "caFile": cacert},
        )
        query = moonish.spark.materialize(
            changes,
            uri,
            os.path.abspath(checkpoint_dir),
            available_now=not follow,
            processing_time_ms=interval_ms,
            gate=gate,
            buckets=buckets,
            optimize_every=optimize_every,
            storage_options=storage_options,
        )
        acknowledge = _acknowledger(source, consumer, kind, token_file, cacert, closing)
        report = _reporter(log)
        run_until_stopped(spark, query, gate, request, report, on_batch=acknowledge)
    delta_table = require_table(uri, storage_options)
    version, keys = delta_table.version(), delta_table.count()
    click.echo(f"table {table_dir}: Delta version {version}, {keys} live keys ({kind} source)")


def _check_server(
    source: str, token_file: str | None, cacert: str | None, metrics_port: int | None
) -> None:
    """Ask the server at ``source`` for its info, before Spark starts.

    Raises:
        RemoteUnavailableError: it cannot be reached (exit 6).
        RemoteUnauthorizedError: it refuses the bearer token (exit 2).
        click.UsageError: ``--metrics-port`` (it reports a data directory on this machine).
    """
    from ..remote import connect

    if metrics_port is not None:
        raise click.UsageError(
            "--metrics-port reports a data directory on this machine; a server's own "
            "/metrics reports its WAL and consumers."
        )
    client = connect(source, token_file, cacert, ())
    assert client is not None
    with client:
        client.info()


def _acknowledger(
    source: str,
    consumer: str | None,
    kind: str,
    token_file: str | None,
    cacert: str | None,
    closing: ExitStack,
) -> Any:
    """A callback that acknowledges each committed micro-batch's end offsets for the named
    consumer (``None``: no consumer or an export source, no callback): in the data
    directory, or on the server for a URL (the end token; its client closed by
    ``closing``)."""
    if consumer is None or kind == "export":
        return None
    import orjson

    if kind == "url":
        from moonish.spark.urlsource import token_of

        from ..remote import connect

        client = connect(source, token_file, cacert, ())
        assert client is not None
        closing.callback(client.close)

        def acknowledge_token(progress: Any) -> None:
            for each in progress.get("sources") or []:
                end = each.get("endOffset")
                offsets = orjson.loads(end) if isinstance(end, str) else end
                if isinstance(offsets, dict):
                    client.ack(consumer, token_of(offsets))

        return acknowledge_token

    from moonish.datadir import consumers
    from moonish.spark.datasource import consumer_positions

    path = os.path.abspath(source)

    def acknowledge(progress: Any) -> None:
        for each in progress.get("sources") or []:
            end = each.get("endOffset")
            offsets = orjson.loads(end) if isinstance(end, str) else end
            if isinstance(offsets, dict):
                consumers.ack(path, consumer, consumer_positions(path, offsets))

    return acknowledge


def _reporter(log: StderrLog) -> Callable[[str, Mapping[str, Any] | None], None]:
    """The ``report`` of ``run_until_stopped``: ``moonish: <line>`` on stderr, or with a
    JSON ``log`` a ``batch`` line with the micro-batch's fields (``stopping`` for the line
    of a stop that waits)."""
    from moonish.spark.progress import progress_fields

    def report(line: str, progress: Mapping[str, Any] | None) -> None:
        if not log.json:
            click.echo(f"moonish: {line}", err=True)
        elif progress is None:
            log.line("stopping", line)
        else:
            log.line("batch", line, progress_fields(progress))

    return report


def _changes(
    spark: Any,
    kind: str,
    source: str,
    max_records: int | None,
    max_files: int | None,
    consumer: str | None,
    remote: Mapping[str, str | None],
) -> Any:
    """The streaming DataFrame of flat change rows of SOURCE (``kind`` from
    :func:`source_kind`; ``remote``: the URL source's ``tokenFile`` and ``caFile``)."""
    import moonish.spark

    if kind in ("wal", "url"):
        reader = spark.readStream.format("moonish")
        if max_records:
            reader = reader.option("maxRecordsPerTrigger", max_records)
        if consumer is not None:
            reader = reader.option("consumer", consumer)
        if kind == "url":
            reader = reader.option("url", source)
            for name, value in remote.items():
                if value is not None:
                    reader = reader.option(name, os.path.abspath(value))
            return reader.load()
        return reader.load(os.path.abspath(source))
    return moonish.spark.read_envelope_files(
        spark, os.path.abspath(source), max_files_per_trigger=max_files
    )
