"""cdc kafka against a real broker (Tansu; noida-db where Tansu's transactions fall short):
every change once per partition in LSN order, keys and tombstones, positions, fencing, kills."""

from __future__ import annotations

import base64
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path

import orjson
import pytest

import moonish
from moonish.datadir import consumers
from moonish.redis.aof.importer import import_aof
from moonish.sinks.kafka.offsets import BrokerUnavailableError, DeliveryError, SinkFencedError
from moonish.sinks.kafka.sink import KafkaOptions, KafkaSink, KafkaStats
from moonish.state.shard import ShardWriter
from tests.support.paths import ROOT
from tests.support.servers.kafka_broker import (
    Broker,
    Message,
    broker,
    free_port,
    noida,
    read_topics,
    tansu,
)

pytestmark = pytest.mark.kafka

__all__ = ["broker"]  # the fixture
SLICE = ROOT / "fixtures" / "redis-aof" / "slice" / "appendonlydir"
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kafka") / "data"
    import_aof(SLICE, path, 2)
    return path


def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


def expected(data: Path) -> list[tuple[int, int, str, bytes]]:
    """(shard, lsn, op, envelope) of every event the sink sends, BEGIN/END included."""
    events = []
    for shard_dir in moonish.shard_dirs(data):
        with moonish.tail(shard_dir, transactions=True) as stream:
            events += [(e.shard, e.lsn, e.op, e.envelope) for e in stream]
    return events


def kafka_count(events: list[tuple[int, int, str, bytes]], tombstones: bool = True) -> int:
    return len(events) + (sum(op == "d" for _, _, op, _ in events) if tombstones else 0)


def partitions(name: str, shards: int = 2, dbs: tuple[int, ...] = (0, 2)) -> list[tuple[str, int]]:
    topics = [f"{name}.db{db}" for db in dbs] + [f"{name}.transaction", f"{name}.message"]
    return [(topic, part) for topic in topics for part in range(shards)]


def identity(message: Message) -> tuple[str, int, int, str]:
    """What a Kafka record stands for: topic, partition, LSN and kind (op, or tombstone)."""
    lsn = int(message.headers["moonish.lsn"])
    if message.value is None:
        return message.topic, message.partition, lsn, "tombstone"
    value = orjson.loads(message.value)
    return message.topic, message.partition, lsn, value.get("op") or value["status"]


def check_once_in_order(got: list[Message], events: list[tuple[int, int, str, bytes]]) -> None:
    """Every event exactly once, in LSN order per partition, with its key and tombstone."""
    kinds = [identity(m) for m in got]
    assert len(kinds) == len(set(kinds)), "a record is in the topics twice"
    by_partition: dict[tuple[str, int], list[int]] = defaultdict(list)
    for message in got:
        by_partition[(message.topic, message.partition)].append(int(message.headers["moonish.lsn"]))
        assert int(message.headers["moonish.shard"]) == message.partition
    for lsns in by_partition.values():
        assert lsns == sorted(lsns)
    want = Counter()
    for shard, lsn, op, _ in events:
        want[(shard, lsn, op)] += 1
        if op == "d":
            want[(shard, lsn, "tombstone")] += 1
    assert Counter((part, lsn, kind) for _, part, lsn, kind in kinds) == want
    for message in got:
        check_key(message)


def check_key(message: Message) -> None:
    """A change's key is its row's identity; a transaction record's is its id."""
    assert message.key is not None
    key = orjson.loads(message.key)
    if message.topic.endswith(".transaction"):
        assert key == {"id": orjson.loads(message.value or b"")["id"]}
        return
    if message.value is None:
        return  # a tombstone: its key is the delete's (checked by order and count)
    event = orjson.loads(message.value)
    image = event["after"] or event["before"]
    raw = image["key"]
    text, encoding = (raw["_b64"], "base64") if isinstance(raw, dict) else (raw, "utf8")
    assert key == {"db": image["db"], "key": text, "key_encoding": encoding}
    assert message.topic.endswith(f".db{image['db']}")


def run_sink(data: Path, broker: Broker, name: str, **options: object) -> KafkaStats:
    with KafkaSink(data, KafkaOptions(broker.bootstrap, topic_prefix=name, **options)) as sink:  # type: ignore[arg-type]
        return sink.run()


@pytest.mark.parametrize("delivery", ["exactly-once", "at-least-once"])
def test_every_change_once_in_lsn_order_per_partition(
    data: Path, broker: Broker, delivery: str
) -> None:
    name = prefix()
    events = expected(data)
    stats = run_sink(data, broker, name, delivery=delivery, consumer="kafka")
    assert stats.events == len(events) == 4013
    assert stats.messages == kafka_count(events)
    assert stats.positions == {0: 1899, 1: 1575}  # 1575: the import's position marker
    got = read_topics(broker.bootstrap, partitions(name), count=stats.messages)
    check_once_in_order(got, events)
    tombstones = [m for m in got if m.value is None]
    for tombstone in tombstones:  # right after its delete, same key
        place = (tombstone.topic, tombstone.partition, tombstone.offset - 1)
        before = next(m for m in got if (m.topic, m.partition, m.offset) == place)
        assert orjson.loads(before.value or b"")["op"] == "d" and before.key == tombstone.key
    assert consumers.load(data, "kafka").positions == (1899, 1575)  # retention keeps the rest
    again = run_sink(data, broker, name, delivery=delivery, consumer="kafka")
    assert again.events == 0 and again.positions == {0: 1899, 1: 1575}
    consumers.drop(data, "kafka")


def test_binary_and_base64_looking_keys_do_not_collide(tmp_path: Path, broker: Broker) -> None:
    looks_like = base64.b64encode(b"\xff").decode()
    with ShardWriter(tmp_path / "shard-0") as writer:
        writer.execute(0, [b"SET", b"\xff", b"binary"])
        writer.execute(0, [b"SET", looks_like.encode(), b"text"])
        writer.execute(3, [b"DEL", looks_like.encode()])
        writer.checkpoint()
    name = prefix()
    stats = run_sink(tmp_path, broker, name, tombstones=False, messages=False)
    assert stats.messages == 2  # DEL of a missing key changes nothing; the checkpoint is off
    got = read_topics(broker.bootstrap, partitions(name, 1, (0,)), count=2)
    assert sorted(orjson.loads(m.key or b"")["key_encoding"] for m in got) == ["base64", "utf8"]
    assert len({m.key for m in got}) == 2


def test_checkpoints_go_to_the_message_topic(tmp_path: Path, broker: Broker) -> None:
    with ShardWriter(tmp_path / "shard-0") as writer:
        writer.execute(0, ["SET", "k", "v"])
        writer.execute(0, ["DEL", "k"])
        writer.checkpoint()
    name = prefix()
    stats = run_sink(tmp_path, broker, name, tombstones=False)
    got = read_topics(broker.bootstrap, partitions(name, 1, (0,)), count=stats.messages)
    assert [(m.topic, orjson.loads(m.value or b"")["op"]) for m in got] == [
        (f"{name}.db0", "c"),
        (f"{name}.db0", "d"),
        (f"{name}.message", "m"),
    ]
    assert orjson.loads(got[2].key or b"") == {"prefix": "moonish.checkpoint"}


def test_a_second_instance_fences_the_first(data: Path, broker: Broker) -> None:
    name = prefix()
    options = KafkaOptions(broker.bootstrap, topic_prefix=name, max_transaction_records=1)
    second: list[KafkaStats] = []

    def start_second(stats: KafkaStats) -> None:
        if not second:  # after the first instance's first transaction
            with KafkaSink(data, options) as other:
                second.append(other.run())

    with (
        KafkaSink(data, options, progress=start_second, progress_ms=0) as first,
        pytest.raises(SinkFencedError, match="fenced by another instance"),
    ):
        first.run()
    assert second[0].positions == {0: 1899, 1: 1575}
    events = expected(data)
    check_once_in_order(
        read_topics(broker.bootstrap, partitions(name), count=kafka_count(events)), events
    )


def crash(data: Path, servers: str, name: str, delivery: str, where: str, n: int) -> int:
    command = [
        sys.executable,
        "-m",
        "tests.support.servers.kafka_crash",
        str(data),
        servers,
        name,
        delivery,
        where,
        str(n),
    ]
    return subprocess.run(command, env=ENV, timeout=120).returncode


def test_killed_between_transactions_then_restarted_holds_every_change_once(
    data: Path, broker: Broker
) -> None:
    name = prefix()
    rng = random.Random(14)
    codes = [
        crash(data, broker.bootstrap, name, "exactly-once", "between", rng.randint(1, 2))
        for _ in range(3)
    ]
    assert codes[0] == -signal.SIGKILL and set(codes) <= {0, -signal.SIGKILL}  # 0: it finished
    stats = run_sink(data, broker, name)
    assert stats.positions == {0: 1899, 1: 1575}
    events = expected(data)
    check_once_in_order(
        read_topics(broker.bootstrap, partitions(name), count=kafka_count(events)), events
    )


def test_at_least_once_killed_anywhere_loses_nothing_and_repeats_whole_records(
    data: Path, broker: Broker
) -> None:
    name = prefix()
    codes = [
        crash(data, broker.bootstrap, name, "at-least-once", where, n)
        for where, n in (("inside", 2), ("between", 1), ("inside", 1))
    ]
    assert codes[0] == -signal.SIGKILL and set(codes) <= {0, -signal.SIGKILL}  # 0: it finished
    run_sink(data, broker, name, delivery="at-least-once")
    got = read_topics(broker.bootstrap, partitions(name))
    events = expected(data)
    first_seen = {}
    for message in got:
        kind = identity(message)
        if kind in first_seen:  # a repeat is the same record again (key, row, source)
            assert message.key == first_seen[kind].key
            if message.value is not None:
                old, new = orjson.loads(first_seen[kind].value or b""), orjson.loads(message.value)
                assert {k: v for k, v in old.items() if not k.startswith("ts_")} == {
                    k: v for k, v in new.items() if not k.startswith("ts_")
                }
        else:
            first_seen[kind] = message
    check_once_in_order(list(first_seen.values()), events)


def test_the_test_broker_makes_a_killed_transaction_visible(broker: Broker) -> None:
    """Documents Tansu 0.6.0's transactional bug (docs/kafka.md): three records produced in
    a transaction whose producer is killed become visible, read_committed, once the next
    producer with its transactional.id calls init_transactions(); a correct broker aborts
    them (see the noida-db test). If this fails, Tansu was fixed: run the crash-inside test on
    it too."""
    assert abort_probe(broker.bootstrap) == [b"v0", b"v1", b"v2", b"after"]


def abort_probe(servers: str) -> list[bytes | None]:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    topic, txn_id = f"probe-{uuid.uuid4().hex[:8]}", f"probe-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": servers})  # kept: a dropped client cancels
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    child = (
        "import os, signal, sys\nfrom confluent_kafka import Producer\n"
        "p = Producer({'bootstrap.servers': sys.argv[1], 'transactional.id': sys.argv[3]})\n"
        "p.init_transactions(30); p.begin_transaction()\n"
        "for i in range(3): p.produce(sys.argv[2], b'v%d' % i, partition=0)\n"
        "p.flush(10); os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    died = subprocess.run([sys.executable, "-c", child, servers, topic, txn_id], timeout=60)
    assert died.returncode == -signal.SIGKILL
    producer = Producer({"bootstrap.servers": servers, "transactional.id": txn_id})
    producer.init_transactions(60)
    producer.begin_transaction()
    producer.produce(topic, b"after", partition=0)
    producer.commit_transaction(30)
    return [m.value for m in read_topics(servers, [(topic, 0)], idle_ms=2000)]


def test_killed_inside_a_transaction_on_a_correct_broker(tmp_path: Path) -> None:
    """The crash inside a transaction, on noida-db (Tansu would show the killed transaction's
    records: see the test above). A small workload: noida-db fails at volume."""
    with ShardWriter(tmp_path / "data" / "shard-0") as writer:
        for i in range(60):
            writer.execute(0, ["SET", f"k{i % 7}", str(i)])
            if i % 5 == 4:
                writer.execute(0, ["DEL", f"k{i % 7}"])
    data = tmp_path / "data"
    with noida(tmp_path) as correct:
        assert abort_probe(correct.bootstrap) == [b"after"]
        name = prefix()
        assert crash(data, correct.bootstrap, name, "exactly-once", "inside", 1) == -signal.SIGKILL
        run_sink(data, correct, name)
        events = expected(data)
        got = read_topics(correct.bootstrap, partitions(name, 1, (0,)), count=kafka_count(events))
        check_once_in_order(got, events)


def test_an_unreachable_broker_is_exit_6_with_the_address(data: Path) -> None:
    servers = f"127.0.0.1:{free_port()}"
    started = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "cli.main",
            "cdc",
            "kafka",
            str(data),
            "-b",
            servers,
            "--timeout-ms",
            "1500",
            "--no-consumer",
        ],
        env=ENV,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 6, done.stderr
    assert f"Kafka at {servers}".encode() in done.stderr
    assert time.monotonic() - started < 30
    with pytest.raises(BrokerUnavailableError):
        run_sink(data, Broker(servers, None), prefix(), timeout_ms=500)  # type: ignore[arg-type]


def test_follow_sends_new_records_and_stops_on_sigterm(tmp_path: Path, broker: Broker) -> None:
    data = tmp_path / "data"
    with ShardWriter(data / "shard-0") as writer:
        writer.execute(0, ["SET", "a", "1"])
    name = prefix()
    command = [
        sys.executable,
        "-m",
        "cli.main",
        "cdc",
        "kafka",
        str(data),
        "-b",
        broker.bootstrap,
        "--topic-prefix",
        name,
        "--follow",
    ]
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        read_topics(broker.bootstrap, partitions(name, 1, (0,)), count=1)
        with ShardWriter(data / "shard-0") as writer:
            writer.execute(0, ["SET", "b", "2"])
        got = read_topics(broker.bootstrap, partitions(name, 1, (0,)), count=2)
        assert [orjson.loads(m.key or b"")["key"] for m in got] == ["a", "b"]
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert b"positions: shard 0: 2" in out
    assert b"moonish: 2 events" in err  # progress on stderr
    assert consumers.load(data, f"kafka-{name}").positions == (2,)


def test_follow_waits_for_a_broker_that_comes_up_later(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with ShardWriter(data / "shard-0") as writer:
        writer.execute(0, ["SET", "a", "1"])
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "cli.main",
        "cdc",
        "kafka",
        str(data),
        "-b",
        f"127.0.0.1:{port}",
        "--topic-prefix",
        "late",
        "--follow",
        "--timeout-ms",
        "500",
    ]
    process = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        time.sleep(2)  # it fails to connect, and retries
        assert process.poll() is None
        with tansu(port) as late:
            got = read_topics(late.bootstrap, partitions("late", 1, (0,)), count=1)
            assert orjson.loads(got[0].key or b"")["key"] == "a"
            process.send_signal(signal.SIGTERM)
            out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert b"positions: shard 0: 1" in out


def test_at_least_once_a_failed_delivery_stops_before_the_record(tmp_path: Path) -> None:
    """A delivery the producer reports as failed (the broker stopped: the records time out)
    is a DeliveryError naming the shard and an LSN not yet stored; nothing after the stored
    position moves, and a later run delivers everything."""
    path = tmp_path / "data"

    def write(first: int, last: int) -> None:
        with ShardWriter(path / "shard-0") as writer:
            for n in range(first, last + 1):
                writer.execute(0, [b"SET", b"k%d" % n, b"v"])

    write(1, 10)
    with tansu() as stopped:
        name = prefix()
        assert run_sink(path, stopped, name, delivery="at-least-once").positions == {0: 10}
        write(11, 50)
        options = KafkaOptions(
            stopped.bootstrap,
            topic_prefix=name,
            delivery="at-least-once",
            client_config={"message.timeout.ms": "1500"},
        )
        with KafkaSink(path, options) as sink:
            sink.start()  # the topics exist: the failure comes from the deliveries
            os.kill(stopped.process.pid, signal.SIGSTOP)
            try:
                with pytest.raises(DeliveryError) as caught:
                    sink.run()
            finally:
                os.kill(stopped.process.pid, signal.SIGCONT)
            assert caught.value.shard == 0 and 11 <= (caught.value.lsn or 0) <= 50
            assert sink.positions == [10]
        assert run_sink(path, stopped, name, delivery="at-least-once").positions == {0: 50}
        got = read_topics(stopped.bootstrap, [(f"{name}.db0", 0)])
        assert {int(m.headers["moonish.lsn"]) for m in got} == set(range(1, 51))
