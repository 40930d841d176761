"""The Kafka sink's routes and filters against a real broker (Tansu): a change goes to the
topic of the first route its key matches, else to ``<prefix>.db<N>``; keys the sink's filter
leaves out send nothing and are counted (a FLUSHDB's deletes of them too); exactly once per
partition still (a rerun sends nothing); the CLI and the library alike."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import orjson
import pytest

from moonish.errors import InvalidArgumentError
from moonish.sinks.kafka.sink import KafkaOptions, KafkaSink
from moonish.state.shard import ShardWriter
from tests.sinks.test_kafka_sink import prefix
from tests.support.cli import run
from tests.support.servers.kafka_broker import Broker, broker, read_topics

pytestmark = pytest.mark.kafka

__all__ = ["broker"]  # the fixture


def write(data: Path) -> None:
    with ShardWriter(data / "shard-0") as writer:
        for i in range(5):
            writer.execute(0, [b"SET", b"user:%d" % i, b"u"])
            writer.execute(0, [b"SET", b"order:%d" % i, b"o"])
            writer.execute(0, [b"SET", b"tmp:%d" % i, b"t"])
            writer.execute(0, [b"SET", b"other:%d" % i, b"x"])
        writer.execute(0, [b"DEL", b"user:0"])
        writer.execute(0, [b"FLUSHDB"])


def test_routes_send_keys_to_their_topics_and_filtered_keys_nowhere(
    tmp_path: Path, broker: Broker
) -> None:
    data = tmp_path / "data"
    write(data)
    name = prefix()
    routes = (("user:*", f"{name}.users"), ("order:*", f"{name}.orders"))
    options = KafkaOptions(
        broker.bootstrap, topic_prefix=name, routes=routes, exclude_keys=("tmp:*",)
    )
    with KafkaSink(data, options) as sink:
        stats = sink.run()
    assert stats.filtered == 10  # SET and FLUSHDB's delete of each tmp: key
    topics = [f"{name}.users", f"{name}.orders", f"{name}.db0"]
    got = read_topics(broker.bootstrap, [(topic, 0) for topic in topics], count=stats.messages - 2)
    by_topic: dict[str, Counter[str]] = {topic: Counter() for topic in topics}
    for message in got:
        if message.value is None:
            by_topic[message.topic]["tombstone"] += 1
            continue
        event = orjson.loads(message.value)
        image = event["after"] or event["before"]
        key = "-" if image is None else image["key"].split(":")[0]
        by_topic[message.topic][f"{event['op']} {key}"] += 1
    for topic, key in zip(topics, ("user", "order", "other"), strict=True):
        assert by_topic[topic] == {f"c {key}": 5, f"d {key}": 5, "tombstone": 5}
    with KafkaSink(data, options) as sink:  # exactly once: nothing new
        assert sink.run().messages == 0


def test_the_cli_takes_routes_and_filters_and_refuses_bad_ones(
    tmp_path: Path, broker: Broker
) -> None:
    data = tmp_path / "data"
    write(data)
    name = prefix()
    args = ["cdc", "kafka", str(data), "-b", broker.bootstrap, "--topic-prefix", name]
    out = run(*args, "--route", f"user:*={name}.users", "--include-keys", "user:*")
    assert out.returncode == 0, out.stderr
    got = read_topics(broker.bootstrap, [(f"{name}.users", 0)], count=15)
    assert len(got) == 15  # 5 c, 5 d (DEL, FLUSHDB), their tombstones
    bad = run(*args, "--route", "user:[*=x")
    assert bad.returncode == 2 and b"has an unclosed [" in bad.stderr
    with pytest.raises(InvalidArgumentError):
        KafkaOptions(broker.bootstrap, topic_prefix=name, routes=(("a*", f"{name}.offsets"),))
