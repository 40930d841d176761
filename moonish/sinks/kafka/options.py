"""The Kafka sink's options and stats (moonish.sinks.kafka.sink, ``moonish cdc kafka``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from moonish.cdc.envelope import CONNECTOR
from moonish.datadir import consumers
from moonish.errors import InvalidArgumentError
from moonish.keypatterns import KeyPatterns

EXACTLY_ONCE, AT_LEAST_ONCE = "exactly-once", "at-least-once"
TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{1,200}")
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
"""A legal Kafka topic name (Kafka's ``Topic.validate``)."""


@dataclass(frozen=True, slots=True)
class KafkaOptions:
    """What the sink writes where, and how.

    Attributes:
        bootstrap_servers: ``host:port[,host:port...]`` of the Kafka cluster.
        topic_prefix: the topics' prefix (``None``: ``name``).
        name: ``source.name`` in the envelopes.
        sink: the sink's name: the connector name of its stored positions and the base of its
            transactional ids (``None``: ``kafka-<topic prefix>``).
        delivery: ``"exactly-once"`` or ``"at-least-once"``.
        schemas: Connect's ``schemas.enable=true`` form for keys and values.
        tombstones: a tombstone after every ``d`` (Debezium's ``tombstones.on.delete``).
        messages: write ``op: "m"`` records to ``<prefix>.message`` (else leave them out).
        consumer: register as this named consumer of the data directory; ``None``: none.
        max_transaction_records: a transaction (or position step) takes polls of the log (up
            to 1024 records each, never part of an atomic batch) while it holds fewer records.
        replication_factor: of the topics the sink creates (-1: the broker's default).
        poll_ms: with ``follow``, longest wait without a file-system event.
        timeout_ms: longest wait for the broker in one step (connect, commit, flush).
        client_config: further librdkafka settings (security, ``linger.ms``, ...).
        routes: ``(pattern, topic)`` pairs: a change whose key matches a pattern (a Redis
            glob, moonish.keypatterns) goes to its topic instead of ``<prefix>.db<N>``; the
            first match wins.
        include_keys, exclude_keys: this sink sends only the changes of keys matching one
            of ``include_keys`` (all when empty) and none of ``exclude_keys``; the others
            are passed over (counted, their positions committed all the same).
    """

    bootstrap_servers: str
    topic_prefix: str | None = None
    name: str = CONNECTOR
    sink: str | None = None
    delivery: str = EXACTLY_ONCE
    schemas: bool = False
    tombstones: bool = True
    messages: bool = True
    consumer: str | None = None
    max_transaction_records: int = 10_000
    replication_factor: int = -1
    poll_ms: int = 1000
    timeout_ms: int = 30_000
    client_config: dict[str, str] = field(default_factory=dict)
    routes: tuple[tuple[str, str], ...] = ()
    include_keys: tuple[str, ...] = ()
    exclude_keys: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.delivery not in (EXACTLY_ONCE, AT_LEAST_ONCE):
            raise InvalidArgumentError(
                f"delivery must be {EXACTLY_ONCE} or {AT_LEAST_ONCE}, got {self.delivery!r}"
            )
        if not TOPIC_PREFIX.fullmatch(self.prefix):
            raise InvalidArgumentError(
                f"topic prefix must be 1..200 of A-Z a-z 0-9 . _ -, got {self.prefix!r}"
            )
        if not 1 <= self.max_transaction_records <= 1_000_000 or self.poll_ms < 1:
            raise InvalidArgumentError("max_transaction_records must be 1..1000000, poll_ms >= 1")
        consumers.validate_name(self.sink_name)
        KeyPatterns([*self.include_keys, *self.exclude_keys, *(p for p, _ in self.routes)])
        own = {f"{self.prefix}.{name}" for name in ("offsets", "transaction", "message")}
        for _, topic in self.routes:
            if not TOPIC.fullmatch(topic) or topic in own:
                raise InvalidArgumentError(
                    f"a route's topic must be 1..249 of A-Z a-z 0-9 . _ - and not one of the "
                    f"sink's own ({', '.join(sorted(own))}), got {topic!r}"
                )

    @property
    def prefix(self) -> str:
        """The topic prefix in force."""
        return self.topic_prefix if self.topic_prefix is not None else self.name

    @property
    def sink_name(self) -> str:
        """The sink's name in force."""
        return self.sink if self.sink is not None else f"kafka-{self.prefix}"[:64]


@dataclass(slots=True)
class KafkaStats:
    """What the sink did: events sent (changes, BEGIN/END and messages, as read), Kafka
    records written (tombstones included), transactions committed, each shard's position
    (the last LSN whose records are stored for good: committed, or acknowledged), and the
    changes its ``include_keys``/``exclude_keys`` passed over (``filtered``)."""

    events: int = 0
    messages: int = 0
    transactions: int = 0
    positions: dict[int, int] = field(default_factory=dict)
    filtered: int = 0
