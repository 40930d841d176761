"""One shard of the Kafka sink (moonish.sinks.kafka.sink): its producer, log iterator and
position, and at-least-once's delivery reports still due."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from confluent_kafka import KafkaError, Producer

from moonish.cdc.shard_read import Tail


class Pending:
    """At-least-once: the delivery reports still due for the records up to ``lsn``."""

    __slots__ = ("error", "lsn", "remaining", "reported")

    def __init__(
        self, lsn: int, reported: Callable[[KafkaError | None], None] | None = None
    ) -> None:
        self.lsn, self.remaining, self.error = lsn, 0, ""
        self.reported = reported  # told each report (the sink's metrics)

    def __call__(self, error: KafkaError | None, message: object) -> None:
        self.remaining -= 1
        if self.reported is not None:
            self.reported(error)
        if error is not None and not self.error:
            self.error = str(error)


class SinkShard:
    """One shard's producer, log iterator and position."""

    def __init__(self, index: int, path: str, producer: Producer, txn_id: str) -> None:
        self.index, self.path, self.producer, self.txn_id = index, path, producer, txn_id
        self.tail: Tail | None = None
        self.position = 0  # last LSN stored for good
        self.pending: deque[Pending] = deque()
        self.passed_at = 0.0  # when the position was last stored past records sending nothing

    @property
    def read_to(self) -> int:
        """The last LSN read from the log (records that send nothing included)."""
        return self.position if self.tail is None else self.tail.cursor.lsn - 1
