"""``moonish wal capture``: follow a live Redis as its replica into sharded moonish WALs."""

from __future__ import annotations

import functools
import signal
import threading
from types import FrameType
from typing import TYPE_CHECKING

import click
import orjson

from .. import options

if TYPE_CHECKING:
    from moonish.redis.routing.keyfilter import FilterSpec
    from moonish.state.autosnapshot import SnapshotPolicy


@click.command("capture")
@click.argument("redis_url")
@click.argument("data_dir", type=click.Path(file_okay=False))
@options.shard_options
@options.snapshot_policy
@options.key_filter
@options.retention_policy
@click.option(
    "--sync-interval-ms",
    type=click.IntRange(0, None),
    default=100,
    show_default=True,
    help="Sync written shards at most this often (0: after every read); changes "
    "are acknowledged to Redis only once synced.",
)
@click.option(
    "--ack-interval-ms",
    type=click.IntRange(10, None),
    default=1000,
    show_default=True,
    help="How often REPLCONF ACK tells Redis the durable offset (Redis's replicas: "
    "every second); INFO replication's view of the capture is this fresh.",
)
@click.option(
    "--password-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="A file whose first line is the password of REDIS_URL's user (the master's, and "
    "every node's a Sentinel names), so that it is on no command line or shell history.",
)
@click.option(
    "--tls-ca-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="rediss://: CA certificates (PEM) of the master's certificate.",
)
@click.option(
    "--tls-cert-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="rediss://: this client's certificate (PEM).",
)
@click.option(
    "--tls-key-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="rediss://: this client's key (PEM).",
)
@options.processes(
    help="Write the shards in up to this many worker processes, each its share, to use several "
    "cores (this process reads the stream and acknowledges); the logs are the same as with one."
)
@click.option(
    "--accept-new-source",
    is_flag=True,
    help="Follow REDIS_URL's master even when its replication history does not hold DATA_DIR's "
    "position (another data set): its full resync is written as the differences. Without it "
    "such a node is refused (exit 2); a node whose history holds the position (a promoted "
    "replica) is followed anyway.",
)
@click.option(
    "--no-cluster",
    is_flag=True,
    help="REDIS_URL is a Redis Cluster node: follow that node alone (the keys of the hash slots "
    "it serves; a failover or a slot migration is not followed) instead of the whole cluster.",
)
@click.option(
    "--prefer-replica",
    is_flag=True,
    help="REDIS_URL is a Redis Cluster node: read each master's stream from one of its "
    "in-sync replicas (the master when it has none), to spare the masters; offsets, lag and "
    "slot states are still asked of the masters.",
)
@click.option(
    "--quiet",
    is_flag=True,
    help="No progress or status lines on stderr (PSYNC answers, full resyncs and "
    "reconnects are still logged).",
)
@options.log_format()
@options.metrics_endpoint
@options.ready_max_lag_ms
def capture_command(
    redis_url: str,
    data_dir: str,
    shards: int,
    view: str,
    max_value_bytes: int,
    segment_bytes: int,
    sync_interval_ms: int,
    ack_interval_ms: int,
    password_file: str | None,
    tls_ca_file: str | None,
    tls_cert_file: str | None,
    tls_key_file: str | None,
    processes: int,
    accept_new_source: bool,
    no_cluster: bool,
    prefer_replica: bool,
    quiet: bool,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    ready_max_lag_ms: int,
    snapshots: SnapshotPolicy,
    key_filter: FilterSpec,
    retention: dict[str, int],
) -> None:
    """Follow the Redis master at REDIS_URL (redis[s]://[[user]:password@]host[:port], or
    redis[s]+sentinel://[[user]:password@]host[:port][,host[:port]...]/MASTER_NAME: the
    master Sentinel names, asked again after each lost connection) as a replica: every
    change goes, routed by hash slot, to DATA_DIR/shard-<k>, until SIGTERM or Ctrl-C (then
    what was received is written, synced and acknowledged, and it exits 0).

    The first run loads the master's full resync as r rows (snapshot reads), then applies
    the command stream (c/u/d; MULTI/EXEC atomic per shard). Redis's INFO replication shows
    the offset whose changes are synced. A restart continues after the last command every
    shard stored (PSYNC); when Redis can no longer continue (backlog overrun, failover) its
    full resync is written as differences only. Network errors reconnect with backoff.
    DATA_DIR remembers where it followed its master; another node continues it when its
    replication history holds DATA_DIR's position (a promoted replica: PSYNC continues), and
    one with another history is refused unless --accept-new-source. Commit times are when moonish
    received the changes (Redis sends none). A JSON summary at the end;
    DATA_DIR/capture.json holds the link's state, the offsets received and durable, and how
    far the durable offset is behind the master in bytes and seconds (asked with INFO
    replication on a side connection every second; null while Redis does not answer;
    moonish cdc info shows it).

    On stderr: on a terminal, a progress line redrawn in place; otherwise (a file, a pipe)
    a timestamped status line a second (--log-format json: a JSON object per line). Either
    way one line for each PSYNC answer (+CONTINUE, or +FULLRESYNC with its replication ID and
    offset), each full resync applied (the RDB's size, keys loaded, c/u/d of the differences)
    and each lost connection (with its reason).

    Each shard's writer snapshots its keyspace in the background (--snapshot-every-*), so a
    restart rebuilds it from the newest snapshot and the records after it (a line a second
    on stderr while it does; SIGTERM or Ctrl-C then stops at once, before connecting).

    REDIS_URL may be any node of a Redis Cluster: the whole cluster is followed, one
    replication link per master (the topology read from that node), each shard storing every
    link's position, so a restart continues each link by PSYNC; a link's full resync is written
    as the differences of its node's slots; capture.json and moonish cdc info show each link.
    A failover is followed (the promoted replica continues the link by PSYNC), and a key that
    a slot migration moves makes no change event (docs/redis-source.md, "A Redis Cluster").
    --no-cluster follows that one node alone, the keys of its own hash slots. --prefer-replica
    reads each master's stream from one of its replicas.

    The user needs the psync, replconf and ping commands, and info for the figures against
    the master (ACL +psync +replconf +ping +info).

    Example:

        moonish wal capture redis://capture:secret@127.0.0.1:6379 data --shards 4

        moonish wal capture redis://127.0.0.1:6379 data --shards 4 --processes 2

        moonish wal capture redis+sentinel://10.0.0.1,10.0.0.2,10.0.0.3/mymaster data

        moonish wal capture redis://10.0.0.5:7000 data --shards 8   # a cluster node

        moonish wal capture redis://127.0.0.1:6379 data --exclude-keys 'session:*'
    """
    from moonish.redis.capture.runner import capture
    from moonish.redis.capture.source import is_cluster_node
    from moonish.redis.capture.status import CaptureEvent, CaptureOptions, CaptureReport
    from moonish.redis.cluster.runner import capture_cluster
    from moonish.redis.replication.messages import ReplicaOptions
    from moonish.state.config import StreamConfig, parse_view

    from ..logs import StderrLog
    from ..metrics import endpoint
    from .rebuilding import rebuild_lines

    stop = threading.Event()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, request_stop)

    log = StderrLog("capture", log_format=log_format)

    def progress(report: CaptureReport) -> None:
        if not quiet:
            log.progress(report.line(), report.to_json())

    def logged(event: CaptureEvent) -> None:
        log.line(event.kind, event.text, event.fields, event.time_us)

    if password_file is not None:
        from moonish.redis.replication.messages import with_password

        with open(password_file, encoding="utf-8") as file:
            redis_url = with_password(redis_url, file.readline().rstrip("\r\n"))
    replica = ReplicaOptions(
        ack_interval_ms=ack_interval_ms,
        tls_ca_file=tls_ca_file,
        tls_cert_file=tls_cert_file,
        tls_key_file=tls_key_file,
        cluster_node=no_cluster,
    )

    def announce(url: str) -> None:
        log.line("metrics", f"metrics on {url}/metrics", {"url": url})

    cluster = not no_cluster and is_cluster_node(redis_url, replica)
    if prefer_replica and not cluster:
        raise click.UsageError(
            "--prefer-replica reads a Redis Cluster's masters from their replicas; REDIS_URL "
            "is not followed as a cluster (give a replica's URL to follow a standalone master "
            "through it)"
        )

    with endpoint(
        metrics_port,
        metrics_host,
        data_dir,
        announce,
        source=True,
        max_lag_ms=ready_max_lag_ms,
    ):
        follow = (
            functools.partial(capture_cluster, prefer_replica=prefer_replica, processes=processes)
            if cluster
            else functools.partial(capture, processes=processes)
        )
        report = follow(
            redis_url,
            data_dir,
            shards,
            stop=stop,
            progress=progress,
            options=CaptureOptions(
                sync_interval_ms=sync_interval_ms,
                replica=replica,
                settle_gc=True,
                snapshots=snapshots,
                key_filter=key_filter,
            ),
            stream=StreamConfig(parse_view(view), max_value_bytes),
            segment_bytes=segment_bytes,
            on_recovery=rebuild_lines(log, quiet),
            on_event=logged,
            accept_new_source=accept_new_source,
            retention=retention,
        )
    if not quiet:
        if log.tty:
            log.progress(report.line())
            log.end_progress()
        else:
            log.line("stopped", report.line(), report.to_json())
    resync = report.last_full_resync
    summary = {
        "master": report.master,
        "replid": report.replid,
        "received_offset": report.received_offset,
        "durable_offset": report.durable_offset,
        "master_offset": report.master_offset,
        "bytes_behind": report.bytes_behind,
        "seconds_behind": report.seconds_behind,
        "commands": report.commands,
        "transactions": report.transactions,
        "records": report.records,
        "per_shard": report.per_shard,
        "full_resyncs": report.full_resyncs,
        "last_full_resync": None if resync is None else resync.to_json(),
        "continues": report.continues,
        "rdb_keys": report.rdb_keys,
        "removed_keys": report.removed_keys,
        "reconnects": report.reconnects,
        "resumed_from": report.resumed_from,
        "filtered": report.filtered,
        "links": report.links,
    }
    click.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
