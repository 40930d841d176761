"""The Kafka sink's figures as Prometheus metrics (moonish.metrics.families, the
``moonish_kafka_*`` families, labelled ``sink`` with the sink's name)."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import KafkaError, Producer

from moonish.metrics import families as f


class SinkMetrics:
    """The ``moonish_kafka_*`` series of one sink.

    Args:
        sink: the sink's name (``KafkaOptions.sink_name``), the ``sink`` label.
    """

    def __init__(self, sink: str) -> None:
        self.delivered = f.KAFKA_DELIVERED.labels(sink)
        self.committed = f.KAFKA_COMMITTED.labels(sink)
        self.aborted = f.KAFKA_ABORTED.labels(sink)
        self.in_flight = f.KAFKA_IN_FLIGHT.labels(sink)
        self.in_flight.set(0)

    def on_delivery(self, error: KafkaError | None) -> None:
        """At-least-once: a delivery report (``error`` ``None``: the broker stored it)."""
        if error is None:
            self.delivered.inc()

    def transaction(self, committed: bool, records: int) -> None:
        """A transaction of ``records`` Kafka records ended: committed, or aborted."""
        if committed:
            self.committed.inc()
            self.delivered.inc(records)
        else:
            self.aborted.inc()

    def producers(self, producers: Iterable[Producer]) -> None:
        """The records ``producers`` hold now: queued, or sent and not acknowledged."""
        self.in_flight.set(sum(len(producer) for producer in producers))
