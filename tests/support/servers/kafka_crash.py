"""A Kafka sink run that kills itself (SIGKILL) at a chosen point, for the crash tests:
``python -m tests.support.servers.kafka_crash DATA SERVERS PREFIX DELIVERY WHERE N``.

WHERE is ``between`` (after the N-th step is stored: committed, or acknowledged) or ``inside``
(in the middle of the N-th step's records, once they reached the broker: inside an open
transaction under exactly-once).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from moonish.sinks.kafka import records as kafka_records
from moonish.sinks.kafka.sink import KafkaOptions, KafkaSink, KafkaStats


def main() -> None:
    data, servers, prefix, delivery, where, n = sys.argv[1:]
    kill_at = int(n)
    steps = 0

    def progress(stats: KafkaStats) -> None:
        nonlocal steps
        steps += 1
        if where == "between" and steps == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)

    produce = kafka_records.RecordMaker.produce
    calls = 0

    def produce_then_die(self: Any, producer: Any, shard: int, batch: Any, delivered: Any) -> int:
        nonlocal calls
        count = produce(self, producer, shard, batch, delivered)
        calls += 1
        if calls == kill_at:
            producer.flush(10)  # the records are at the broker, the transaction is open
            os.kill(os.getpid(), signal.SIGKILL)
        return count

    if where == "inside":
        kafka_records.RecordMaker.produce = produce_then_die  # type: ignore[method-assign]
    options = KafkaOptions(
        servers, topic_prefix=prefix, delivery=delivery, max_transaction_records=40
    )
    with KafkaSink(data, options, progress=progress, progress_ms=0) as sink:
        sink.run()


if __name__ == "__main__":
    main()
