"""A transaction Kafka asks the sink to abort (``txn_requires_abort`` on commit) against a real
broker (Tansu): the sink aborts it, reads the log again from the committed position and sends
the records in the next transaction; until then neither its position nor the named consumer's
acknowledgement moves past what is committed (retention could otherwise remove records Kafka
never got)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from moonish.datadir import consumers
from moonish.sinks.kafka.sink import KafkaOptions, KafkaSink
from moonish.state.shard import ShardWriter
from tests.sinks.test_kafka_sink import prefix
from tests.support.servers.kafka_broker import Broker, broker, read_topics

pytestmark = pytest.mark.kafka

__all__ = ["broker"]  # the fixture


class AbortFirstCommit:
    """The real producer, except that Kafka answers its first commit of data with an error
    that requires an abort; records the consumer's acknowledged positions at each commit."""

    def __init__(self, producer: Any, data: Path) -> None:
        self.producer, self.data = producer, data
        self.acked_at_commit: list[tuple[int, ...]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.producer, name)

    def __len__(self) -> int:
        return len(self.producer)

    def commit_transaction(self, *args: Any) -> Any:
        self.acked_at_commit.append(consumers.load(self.data, "k").positions)
        if len(self.acked_at_commit) == 1:
            error = KafkaError(KafkaError._FAIL, "injected", txn_requires_abort=True)
            raise KafkaException(error)
        return self.producer.commit_transaction(*args)


def test_an_aborted_transaction_is_sent_again_and_not_acknowledged_before(
    tmp_path: Path, broker: Broker
) -> None:
    data = tmp_path / "data"
    with ShardWriter(data / "shard-0") as writer:
        for i in range(30):
            writer.execute(0, [b"SET", b"k%d" % i, b"v"])
    name = prefix()
    options = KafkaOptions(
        broker.bootstrap,
        topic_prefix=name,
        consumer="k",
        max_transaction_records=10,
        tombstones=False,
        messages=False,
    )
    with KafkaSink(data, options) as sink:
        sink.start()
        (shard,) = sink._shards
        failing = AbortFirstCommit(shard.producer, data)
        shard.producer = failing
        stats = sink.run()
    first = failing.acked_at_commit[0]
    assert failing.acked_at_commit[1] == first  # the aborted records were not acknowledged
    assert stats.positions == {0: 30} and consumers.load(data, "k").positions == (30,)
    got = read_topics(broker.bootstrap, [(f"{name}.db0", 0)], count=30)
    assert sorted(int(m.headers["moonish.lsn"]) for m in got) == list(range(1, 31))
