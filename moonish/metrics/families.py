"""The metric families moonish's processes update, in prometheus-client's default registry.

Names follow Prometheus's conventions: the ``moonish_`` prefix, base units in the name
(``_seconds``, ``_bytes``), counters ending in ``_total``. Each process updates the families of
what it runs (a capture the ``moonish_source_*`` ones, the Kafka sink ``moonish_kafka_*``...);
families whose values are read from the data directory at scrape time (the WAL per shard,
events by op, consumer lag) are collectors of moonish.cdc.metrics, and the supervisor's
(part restarts) of moonish.service.metrics.

Under ``moonish run`` the parts are child processes run with ``PROMETHEUS_MULTIPROC_DIR``
set (prometheus-client's multiprocess mode): each writes its values to files there and the
supervisor's endpoint adds them up. Every gauge so says how (``multiprocess_mode``):
``livemax`` or ``livesum`` over the running processes (a part that exits drops out of it,
moonish.metrics.http.forget_process), counters sum over every process that ran, so they keep
rising across a part's restarts.

Labels: ``link`` is a replication link (the master's ``host:port``); ``sink`` a Kafka sink's
name; ``pattern`` a key filter's glob pattern.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

PREFIX = "moonish_"

# -- a live capture (moonish.redis.capture.metrics) --------------------------------------

SOURCE_CONNECTED = Gauge(
    "moonish_source_connected",
    "Whether the replication link to the master is up (1) or not (0: connecting, "
    "reconnecting, stopped).",
    ["link"],
    multiprocess_mode="livemax",
)
SOURCE_BEHIND_SECONDS = Gauge(
    "moonish_source_behind_seconds",
    "How long the master has been past the capture's durable offset, in seconds (NaN: "
    "unknown, the master does not answer INFO replication).",
    ["link"],
    multiprocess_mode="livemax",
)
SOURCE_BEHIND_BYTES = Gauge(
    "moonish_source_behind_bytes",
    "The master's replication offset minus the capture's durable offset, in bytes (NaN: unknown).",
    ["link"],
    multiprocess_mode="livemax",
)
SOURCE_DURABLE_OFFSET = Gauge(
    "moonish_source_durable_offset_bytes",
    "The replication offset whose changes are in the logs and synced (REPLCONF ACK).",
    ["link"],
    multiprocess_mode="livemax",
)
SOURCE_COMMANDS = Counter(
    "moonish_source_commands_total",
    "Write commands of the replication stream applied to the shards.",
    ["link"],
)
SOURCE_FULL_RESYNCS = Counter(
    "moonish_source_full_resyncs_total",
    "Full resynchronisations the master sent (+FULLRESYNC).",
    ["link"],
)
SOURCE_PARTIAL_RESYNCS = Counter(
    "moonish_source_partial_resyncs_total",
    "Partial resynchronisations the master granted (+CONTINUE).",
    ["link"],
)
SOURCE_RECONNECTS = Counter(
    "moonish_source_reconnects_total",
    "Connections to the master lost or refused, and tried again.",
    ["link"],
)
SOURCE_LAST_EVENT = Gauge(
    "moonish_source_last_event_timestamp_seconds",
    "When the capture last applied a write command (Unix time, seconds).",
    ["link"],
    multiprocess_mode="livemax",
)

# -- key filters (issue 28 section 2: moonish.redis.routing counts) ------------------------

EVENTS_FILTERED = Counter(
    "moonish_events_filtered_total",
    "Commands left out by the source filter, by the rule that left them out "
    "(exclude_keys:<pattern>, include_keys, dbs, types:<type>); keys of an RDB file or a "
    "full resync as keys:<rule>.",
    ["pattern"],
)

# -- retention (moonish.datadir.retention) ---------------------------------------------------

RETENTION_DELETED_SEGMENTS = Counter(
    "moonish_retention_deleted_segments_total",
    "WAL segments removed by retention.",
    ["shard"],
)
RETENTION_DELETED_BYTES = Counter(
    "moonish_retention_deleted_bytes_total",
    "Bytes of WAL segments removed by retention.",
    ["shard"],
)

# -- the Kafka sink (moonish.sinks.kafka) ---------------------------------------------------

KAFKA_DELIVERED = Counter(
    "moonish_kafka_records_delivered_total",
    "Kafka records stored for good: in committed transactions (exactly-once) or "
    "acknowledged by the broker (at-least-once).",
    ["sink"],
)
KAFKA_IN_FLIGHT = Gauge(
    "moonish_kafka_records_in_flight",
    "Kafka records in the producers' queues or sent and not yet acknowledged.",
    ["sink"],
    multiprocess_mode="livesum",
)
KAFKA_COMMITTED = Counter(
    "moonish_kafka_transactions_committed_total",
    "Kafka transactions committed (exactly-once).",
    ["sink"],
)
KAFKA_ABORTED = Counter(
    "moonish_kafka_transactions_aborted_total",
    "Kafka transactions aborted (their records are sent again in the next one).",
    ["sink"],
)

# -- the change-feed server (moonish.serve) -------------------------------------------------

SERVE_SUBSCRIBERS = Gauge(
    "moonish_serve_subscribers",
    "Open feeds of the change-feed server (longpoll, continuous, eventsource, WebSocket).",
    multiprocess_mode="livesum",
)
SERVE_SENT_BYTES = Counter(
    "moonish_serve_sent_bytes_total",
    "Bytes of changes the server sent to its feeds (response bodies and WebSocket messages).",
)


def count_filtered(pattern: str, count: int = 1) -> None:
    """Count ``count`` commands (or keys) that the key filter ``pattern`` left out
    (``moonish_events_filtered_total{pattern=...}``; Debezium's NumberOfEventsFiltered).

    Args:
        pattern: the filter's pattern as configured (``"tmp:*"``).
        count: how many; at least 0.

    Raises:
        ValueError: ``count`` is negative.
    """
    EVENTS_FILTERED.labels(pattern=pattern).inc(count)
