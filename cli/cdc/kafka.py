"""``moonish cdc kafka``: the changes of a data directory into Kafka, as Debezium would."""

from __future__ import annotations

import dataclasses
import signal
from types import FrameType

import click

from .. import options
from ..params import KEY_PATTERN


def _client_setting(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    settings = {}
    for value in values:
        name, sep, setting = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"expected NAME=VALUE, got {value!r}", ctx, param)
        settings[name.strip()] = setting
    return settings


def _route(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> tuple[tuple[str, str], ...]:
    routes = []
    for value in values:
        pattern, sep, topic = value.rpartition("=")  # (a topic holds no "=")
        if not sep or not pattern or not topic:
            raise click.BadParameter(f"expected PATTERN=TOPIC, got {value!r}", ctx, param)
        routes.append((KEY_PATTERN.convert(pattern, param, ctx), topic))
    return tuple(routes)


@click.command("kafka")
@click.argument("data_dir", type=click.Path(exists=True, file_okay=False))
@click.option("--bootstrap-servers", "-b", required=True, help="HOST:PORT[,HOST:PORT...].")
@options.follow(help="Keep sending new records (Ctrl-C stops).")
@click.option("--topic-prefix", help="Topic prefix (default: --name): <prefix>.db<N>, ...")
@options.source_name
@click.option(
    "--delivery",
    type=click.Choice(["exactly-once", "at-least-once"]),
    default="exactly-once",
    show_default=True,
    help="Transactions with the positions in <prefix>.offsets, or idempotent producers.",
)
@click.option(
    "--schemas", is_flag=True, help="Kafka Connect JsonConverter schemas.enable=true form."
)
@click.option("--no-tombstones", is_flag=True, help="No tombstone after a delete.")
@click.option("--no-messages", is_flag=True, help="Leave op m records (checkpoints) out.")
@click.option(
    "--sink-name",
    help="Name of the sink's positions and transactional ids (default: kafka-<prefix>).",
)
@options.consumer(
    help="Register as this named consumer of DATA_DIR (default: the sink name), so retention "
    "keeps what is not yet delivered."
)
@options.no_consumer
@click.option(
    "--max-transaction-records",
    type=click.IntRange(1, 1_000_000),
    default=10_000,
    show_default=True,
    help="Most log records in one transaction (or position step).",
)
@click.option(
    "--replication-factor",
    type=int,
    default=-1,
    show_default=True,
    help="Of the topics the sink creates (-1: the broker's default).",
)
@click.option(
    "--timeout-ms",
    type=click.IntRange(100, None),
    default=30_000,
    show_default=True,
    help="Longest wait for the broker in one step.",
)
@click.option(
    "--client-config",
    "-X",
    multiple=True,
    callback=_client_setting,
    help="A librdkafka setting NAME=VALUE (security.protocol, sasl.*...).",
)
@click.option(
    "--route",
    multiple=True,
    metavar="PATTERN=TOPIC",
    callback=_route,
    help="Send the changes of keys matching PATTERN (a Redis glob) to TOPIC instead of "
    "<prefix>.db<N>; repeatable, the first match wins. FLUSHDB/FLUSHALL go to every route's "
    "topic too.",
)
@click.option(
    "--include-keys",
    multiple=True,
    type=KEY_PATTERN,
    metavar="PATTERN",
    help="Send only the changes of keys matching one of these Redis glob patterns "
    "(repeatable); the others are passed over, counted.",
)
@click.option(
    "--exclude-keys",
    multiple=True,
    type=KEY_PATTERN,
    metavar="PATTERN",
    help="Pass over the changes of keys matching any of these patterns (repeatable).",
)
@options.log_format()
@options.metrics_endpoint
def kafka(
    data_dir: str,
    bootstrap_servers: str,
    follow: bool,
    topic_prefix: str | None,
    name: str,
    delivery: str,
    schemas: bool,
    no_tombstones: bool,
    no_messages: bool,
    sink_name: str | None,
    consumer: str | None,
    no_consumer: bool,
    max_transaction_records: int,
    replication_factor: int,
    timeout_ms: int,
    client_config: dict[str, str],
    route: tuple[tuple[str, str], ...],
    include_keys: tuple[str, ...],
    exclude_keys: tuple[str, ...],
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
) -> None:
    """Send the changes of DATA_DIR to Kafka: one topic per Redis database (<prefix>.db<N>),
    BEGIN/END records on <prefix>.transaction, op m records on <prefix>.message; one
    partition per shard, keys {db, key, key_encoding}, a tombstone after each delete.

    Exactly-once (default): per shard, transactions that hold whole records and the shard's
    position in <prefix>.offsets; a restart resumes after the committed positions, and a
    second instance fences the first (which exits 6). At-least-once: a crash may send whole
    records again. The sink is a named consumer of DATA_DIR (the sink name unless
    --consumer or --no-consumer), so retention keeps what it has not delivered. Progress goes
    to stderr (--log-format json: events, messages and positions per shard as JSON); SIGTERM
    and Ctrl-C stop cleanly (exit 0). An unreachable broker is exit 6 (with --follow, retried
    with backoff). docs/kafka.md has the details.

    Example:

        moonish cdc kafka data --bootstrap-servers localhost:9092 --follow

        moonish cdc kafka data -b localhost:9092 --route 'user:*=app.users' --exclude-keys 'tmp:*'
    """
    from moonish.sinks.kafka.sink import KafkaOptions, KafkaSink, KafkaStats

    from ..logs import StderrLog
    from ..metrics import endpoint

    if no_consumer and consumer is not None:
        raise click.UsageError("--consumer and --no-consumer exclude each other.")
    options = KafkaOptions(
        bootstrap_servers,
        topic_prefix,
        name,
        sink_name,
        delivery,
        schemas,
        tombstones=not no_tombstones,
        messages=not no_messages,
        max_transaction_records=max_transaction_records,
        replication_factor=replication_factor,
        timeout_ms=timeout_ms,
        client_config=client_config,
        routes=route,
        include_keys=include_keys,
        exclude_keys=exclude_keys,
    )
    if not no_consumer:
        options = dataclasses.replace(options, consumer=consumer or options.sink_name)

    log = StderrLog("kafka", log_format=log_format)

    def progress(stats: KafkaStats) -> None:
        where = ", ".join(f"shard {s}: {lsn}" for s, lsn in stats.positions.items())
        text = f"{stats.events} events, {stats.messages} Kafka records; {where}"
        if stats.filtered:
            text += f"; {stats.filtered} changes filtered"
        if not log.json:
            click.echo(f"moonish: {text}", err=True)
            return
        positions = {str(shard): lsn for shard, lsn in stats.positions.items()}
        fields = {
            "events": stats.events,
            "messages": stats.messages,
            "filtered": stats.filtered,
            "positions": positions,
        }
        log.line("progress", text, fields)

    def announce(url: str) -> None:
        log.line("metrics", f"metrics on {url}/metrics", {"url": url})

    with (
        endpoint(metrics_port, metrics_host, data_dir, announce),
        KafkaSink(data_dir, options, progress=progress) as sink,
    ):

        def stop(signum: int, frame: FrameType | None) -> None:
            sink.stop()

        previous = signal.signal(signal.SIGTERM, stop)
        previous_int = signal.signal(signal.SIGINT, stop)
        try:
            stats = sink.run(follow=follow)
        finally:
            signal.signal(signal.SIGTERM, previous)
            signal.signal(signal.SIGINT, previous_int)
    click.echo(
        f"{stats.events} events, {stats.messages} Kafka records; positions: "
        + ", ".join(f"shard {s}: {lsn}" for s, lsn in stats.positions.items())
    )
