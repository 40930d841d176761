"""The Kafka sink's topics and records: which topic, partition, key, value and headers each
change event becomes (docs/kafka.md, "Topics, keys, partitions").

- ``c``/``u``/``d``/``r``: topic ``<prefix>.db<N>`` (N: the row's Redis database), or the
  topic of the first route whose pattern the key matches; key ``{"db", "key",
  "key_encoding"}``, value the envelope; after a ``d``, a tombstone (same key, null value)
  unless tombstones are off. A key the sink's own filter leaves out sends nothing.
- ``t`` (``FLUSHDB``/``FLUSHALL`` of a plain kv record): the database's topic and every
  route's, null key, as Debezium's truncate events (``FLUSHALL``: ``source.db`` is null and
  the topic is ``db0``'s).
- ``BEGIN``/``END``: ``<prefix>.transaction``, key ``{"id": <transaction id>}``.
- ``m`` (any non-data record, by the envelope's op, whatever its record type): ``<prefix>.message``
  (or left out), key ``{"prefix": <message.prefix>}``.

The partition is the shard's number; headers are ``moonish.shard`` and ``moonish.lsn``; the
record timestamp is the commit time in ms.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import orjson
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from moonish.cdc.events import EventBatch
from moonish.errors import InvalidArgumentError, UnsupportedFormatError
from moonish.keypatterns import KeyPatterns
from moonish.log.format import RecordType
from moonish.log.frames import Frame
from moonish.log.payloads import change_key
from moonish.sinks.kafka.offsets import BrokerUnavailableError
from moonish.sinks.kafka.schema import SchemaForm, key_payload

ROW_OPS = frozenset({"c", "u", "d", "r"})
Headers = list[tuple[str, str | bytes | None]]


class Topics:
    """The sink's topics: made when first needed with one partition per shard (the offsets
    topic: one, compacted), and checked to have enough partitions when they exist.

    Args:
        config: client configuration (``bootstrap.servers``, security settings).
        prefix: the topic prefix.
        shards: the data directory's shard count (partitions per topic).
        replication_factor: of created topics (-1: the broker's default).
        timeout_ms: longest wait for the broker.
    """

    def __init__(
        self,
        config: dict[str, Any],
        prefix: str,
        shards: int,
        replication_factor: int,
        timeout_ms: int,
    ) -> None:
        self._admin = AdminClient(config)
        self._servers = str(config["bootstrap.servers"])
        self.prefix, self.shards = prefix, shards
        self._replication, self._timeout_s = replication_factor, timeout_ms / 1000
        self.offsets = f"{prefix}.offsets"
        self.transaction = f"{prefix}.transaction"
        self.message = f"{prefix}.message"
        self._data: dict[int, str] = {}
        self._made: set[str] = set()

    def _metadata(self) -> dict[str, int]:
        """Every topic of the cluster and its partition count."""
        try:
            topics = self._admin.list_topics(timeout=self._timeout_s).topics
        except KafkaException as error:
            raise BrokerUnavailableError(str(error.args[0]), self._servers) from None
        return {name: len(meta.partitions) for name, meta in topics.items() if meta.error is None}

    def check_reachable(self) -> None:
        """Raises :class:`BrokerUnavailableError` when the cluster does not answer."""
        self._metadata()

    def ensure_static(self) -> None:
        """The offsets, transaction and message topics; the database topics that already
        exist are checked now, so that sending to them needs no metadata request."""
        self.ensure(self.offsets, 1, {"cleanup.policy": "compact"})
        self.ensure(self.transaction, self.shards)
        self.ensure(self.message, self.shards)
        for name in self._metadata():
            db = name.removeprefix(f"{self.prefix}.db")
            if name.startswith(f"{self.prefix}.db") and db.isdigit() and str(int(db)) == db:
                self.data(int(db))

    def data(self, db: int) -> str:
        """The topic of database ``db``'s changes, made if missing."""
        topic = self._data.get(db)
        if topic is None:
            topic = f"{self.prefix}.db{db}"
            self.ensure(topic, self.shards)
            self._data[db] = topic
        return topic

    def routed(self, topic: str) -> str:
        """A route's topic, made if missing (one partition per shard)."""
        if topic not in self._made:
            self.ensure(topic, self.shards)
            self._made.add(topic)
        return topic

    def ensure(self, topic: str, partitions: int, config: dict[str, str] | None = None) -> None:
        """Make ``topic`` with ``partitions`` partitions unless it exists with at least that
        many.

        Raises:
            InvalidArgumentError: it exists with fewer partitions.
            BrokerUnavailableError: the broker did not answer or refused.
        """
        have = self._metadata().get(topic)
        if have is None:
            future = self._admin.create_topics(
                [NewTopic(topic, partitions, self._replication, config=config or {})],
                request_timeout=self._timeout_s,
            )[topic]
            try:
                future.result(self._timeout_s)
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise BrokerUnavailableError(
                        f"cannot create topic {topic}: {error}", self._servers
                    ) from None
            have = self._metadata().get(topic, partitions)
        if have < partitions:
            raise InvalidArgumentError(
                f"topic {topic} has {have} partitions; the sink needs one per shard "
                f"({partitions}): add partitions or use another --topic-prefix"
            )


def _header(value: int) -> bytes:
    return b"%d" % value


class RecordMaker:
    """Turns a shard's events into Kafka records (see the module docstring).

    Args:
        routes: ``(pattern, topic)`` pairs, the first match wins.
        include_keys, exclude_keys: the sink's own filter (Redis glob patterns).

    Attributes:
        filtered: changes the sink's filter passed over.
    """

    def __init__(
        self,
        topics: Topics,
        schemas: bool,
        tombstones: bool,
        messages: bool,
        routes: tuple[tuple[str, str], ...] = (),
        include_keys: tuple[str, ...] = (),
        exclude_keys: tuple[str, ...] = (),
    ) -> None:
        self.topics = topics
        self.form = SchemaForm() if schemas else None
        self.tombstones, self.messages = tombstones, messages
        self._routes = KeyPatterns(pattern for pattern, _ in routes)
        self._route_topics = [topic for _, topic in routes]
        self._include, self._exclude = KeyPatterns(include_keys), KeyPatterns(exclude_keys)
        self._filters = bool(self._include or self._exclude)
        self.filtered = 0

    def _topic(self, db: int, key: bytes) -> str | None:
        """The topic of a change of ``(db, key)``, ``None`` when the sink's filter leaves
        the key out."""
        if self._filters and (
            (self._include and not self._include.any(key)) or self._exclude.any(key)
        ):
            return None
        if self._routes:
            index = self._routes.first(key)
            if index is not None:
                return self.topics.routed(self._route_topics[index])
        return self.topics.data(db)

    def produce(self, producer: Producer, shard: int, batch: EventBatch, delivered: Any) -> int:
        """Produce ``batch`` (of shard ``shard``, to partition ``shard``); returns how many
        Kafka records. ``delivered`` (at-least-once) counts them and receives their reports.

        Raises:
            UnsupportedFormatError: an event of an op the sink does not know.
            BrokerUnavailableError: the producer's queue stayed full.
        """
        form, tombstones, topics = self.form, self.tombstones, self.topics
        shard_header: tuple[str, str | bytes | None] = ("moonish.shard", _header(shard))
        data, send = topics.data, _sender(producer, shard, delivered)
        plain = not (self._routes or self._filters)
        count = 0
        change = RecordType.KV_CHANGE
        for frame, op, envelope in zip(batch.frames, batch.ops, batch.envelopes, strict=True):
            headers: Headers = [shard_header, ("moonish.lsn", _header(frame.lsn))]
            ts_ms = frame.commit_us // 1000
            if op in ROW_OPS:
                if frame.record_type == change:
                    db, raw_key = change_key(frame.payload)  # the reader checked it
                else:
                    db, raw_key = _image_key(envelope)
                if plain:
                    topic = data(db)
                else:
                    routed = self._topic(db, raw_key)
                    if routed is None:
                        self.filtered += 1
                        continue
                    topic = routed
                key = key_payload(db, raw_key)
                value: bytes | None = envelope
                if form is not None:
                    key, value = form.change_key(topic, key), form.change_value(topic, envelope)
                send(topic, value, key, headers, ts_ms)
                count += 1
                if op == "d" and tombstones:
                    send(topic, None, key, headers, ts_ms)
                    count += 1
            elif op == "BEGIN" or op == "END" or (op == "m" and self.messages):
                topic, key, value = self._non_data(op, envelope)
                send(topic, value, key, headers, ts_ms)
                count += 1
            elif op == "m":
                continue  # messages are off
            elif op == "t":
                source = orjson.loads(envelope)["source"]
                first = data(source["db"] if source.get("db") is not None else 0)
                others = [topics.routed(topic) for topic in dict.fromkeys(self._route_topics)]
                for topic in [first, *others]:  # every topic that holds keys it removed
                    value = envelope if form is None else form.change_value(topic, envelope)
                    send(topic, value, None, headers, ts_ms)
                    count += 1
            else:
                raise _unknown_op(op, frame)
        return count

    def _non_data(self, op: str, envelope: bytes) -> tuple[str, bytes, bytes]:
        """(topic, key, value) of a transaction record or a message (op ``m``)."""
        event = orjson.loads(envelope)
        if op == "m":
            kind, topic = "message", self.topics.message
            key = orjson.dumps({"prefix": (event.get("message") or {}).get("prefix")})
        else:
            kind, topic = "transaction", self.topics.transaction
            key = orjson.dumps({"id": event["id"]})
        if self.form is None:
            return topic, key, envelope
        key, value = self.form.non_data(kind, key, envelope)
        return topic, key, value


def _unknown_op(op: str, frame: Frame) -> UnsupportedFormatError:
    return UnsupportedFormatError(f"the Kafka sink does not know op {op!r}", lsn=frame.lsn)


def _image_key(envelope: bytes) -> tuple[int, bytes]:
    """The database and key of a command-shaped (plain kv, temporal, graph) envelope's image;
    records without a database count as database 0."""
    event = orjson.loads(envelope)
    image = event.get("after") or event.get("before") or {}
    key = image.get("key")
    if isinstance(key, dict):
        raw = base64.b64decode(key["_b64"])
    else:
        raw = b"" if key is None else str(key).encode()
    db = image.get("db")
    return (db if isinstance(db, int) else 0), raw


def _sender(
    producer: Producer, partition: int, delivered: Any
) -> Callable[[str, bytes | None, bytes | None, Headers, int], None]:
    """``send(topic, value, key, headers, timestamp_ms)`` to ``partition``: waits (serving
    delivery reports) while the producer's queue is full."""
    produce, poll = producer.produce, producer.poll

    def send(
        topic: str,
        value: bytes | None,
        key: bytes | None,
        headers: Headers,
        timestamp_ms: int,
    ) -> None:
        if delivered is not None:
            delivered.remaining += 1
        for _ in range(600):
            try:
                produce(
                    topic,
                    value,
                    key,
                    partition=partition,
                    on_delivery=delivered,
                    timestamp=timestamp_ms,
                    headers=headers,
                )
                return
            except BufferError:
                poll(0.1)  # the queue is full: let librdkafka send, then try again
        raise BrokerUnavailableError(
            "the producer queue stayed full for 60 s", str(getattr(producer, "bootstrap", "?"))
        )

    return send
