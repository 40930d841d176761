"""The Kafka sink's positions, stored Connect-style in a compacted ``<topic-prefix>.offsets``
topic (one partition), and the errors of the sink.

One record per shard and delivery, written in the same transaction as the shard's records
(exactly-once) or after their delivery reports (at-least-once)::

    key    ["<sink>", {"server": "<topic prefix>", "shard": <k>}]
    value  {"lsn": <last LSN delivered>, "source": "<data directory, realpath>", "shards": <n>}

as Kafka Connect stores a source connector's offsets (key: ``[connector, partition map]``,
value: the offset map; Debezium's PostgreSQL connector writes ``{"lsn": ...}`` the same way).

Reading them back cannot stop at the high watermark (it is wrong on some brokers, and a
transaction may be open), nor when reading goes idle (a slow fetch would lose a position and
repeat records). So a start writes a **marker** of its own (a fresh nonce, key
``["<sink>", {"server": "<prefix>", "marker": true}]``) after every shard's producer has
fenced its predecessors, then reads ``read_committed`` from the beginning until it meets that
marker: every position committed before the start is behind it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, TopicPartition

from moonish.errors import InvalidArgumentError, UnavailableError


class BrokerUnavailableError(UnavailableError):
    """The Kafka cluster cannot be reached, or did not answer in time.

    Attributes:
        bootstrap_servers: the servers tried.
    """

    def __init__(self, message: str, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers
        super().__init__(f"Kafka at {bootstrap_servers}: {message}")


class SinkFencedError(UnavailableError):
    """Another instance of the same sink (same data directory, sink name and shard) started
    and fenced this one (Kafka's ``transactional.id`` fencing); this one stops.

    Attributes:
        shard: the shard whose producer was fenced.
    """

    def __init__(self, shard: int, transactional_id: str) -> None:
        self.shard = shard
        super().__init__(
            f"shard {shard}: fenced by another instance of this sink (transactional.id "
            f"{transactional_id!r}); it goes on from the positions this one committed"
        )


class DeliveryError(UnavailableError):
    """Kafka refused or failed to deliver a record; the position stays before it.

    Attributes:
        shard, lsn: the record's shard and LSN.
    """

    def __init__(self, shard: int, lsn: int, topic: str, reason: str) -> None:
        self.shard = shard
        super().__init__(f"shard {shard}: delivery to {topic} failed: {reason}", lsn=lsn)


def offset_key(sink: str, prefix: str, shard: int) -> bytes:
    """The offsets topic key of one shard's position."""
    return orjson.dumps([sink, {"server": prefix, "shard": shard}])


def marker_key(sink: str, prefix: str) -> bytes:
    """The offsets topic key of a start's marker."""
    return orjson.dumps([sink, {"server": prefix, "marker": True}])


def offset_value(lsn: int, source: str, shards: int) -> bytes:
    """The offsets topic value of one shard's position."""
    return orjson.dumps({"lsn": lsn, "source": source, "shards": shards})


def new_marker() -> bytes:
    """A marker value with a fresh nonce."""
    return orjson.dumps({"marker": uuid.uuid4().hex})


def read_positions(
    config: dict[str, Any],
    topic: str,
    sink: str,
    prefix: str,
    marker: bytes,
    source: str,
    shards: int,
    timeout_ms: int,
) -> dict[int, int]:
    """Each shard's stored position (last LSN delivered), read ``read_committed`` from the
    start of ``topic`` up to ``marker`` (already written; see the module docstring).

    Args:
        config: the client configuration (``bootstrap.servers`` and security settings).
        source, shards: the data directory (realpath) and its shard count, which the stored
            positions must be about.
        timeout_ms: longest wait for the marker.

    Raises:
        BrokerUnavailableError: the marker did not come back within ``timeout_ms``.
        InvalidArgumentError: the positions stored under this sink and prefix are about another
            data directory or shard count (give another sink name or topic prefix).
    """
    want_marker = marker_key(sink, prefix)
    shard_keys = {offset_key(sink, prefix, k): k for k in range(shards)}
    consumer = Consumer(
        {
            **config,
            "group.id": f"{sink}.positions",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": False,
        }
    )
    positions: dict[int, int] = {}
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + timeout_ms / 1000
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)  # returns at the first message (consume() waits)
            if message is None:
                continue
            if message.error() is not None:
                raise BrokerUnavailableError(
                    f"reading {topic}: {message.error()}", config["bootstrap.servers"]
                )
            key = message.key()
            if key == want_marker and message.value() == marker:
                return positions
            shard = shard_keys.get(key or b"")
            if shard is None or message.value() is None:
                continue  # another sink's, another prefix's, or a marker
            stored = orjson.loads(message.value() or b"")
            if stored.get("source") != source or stored.get("shards") != shards:
                raise InvalidArgumentError(
                    f"sink {sink!r} with topic prefix {prefix!r} has positions for "
                    f"{stored.get('source')} ({stored.get('shards')} shards), not for "
                    f"{source} ({shards} shards): give another --sink-name or "
                    "--topic-prefix",
                    path=source,
                )
            positions[shard] = int(stored["lsn"])
        raise BrokerUnavailableError(
            f"the start marker did not come back from {topic} within {timeout_ms} ms",
            config["bootstrap.servers"],
        )
    except KafkaException as error:
        raise BrokerUnavailableError(str(error.args[0]), config["bootstrap.servers"]) from None
    finally:
        consumer.close()
