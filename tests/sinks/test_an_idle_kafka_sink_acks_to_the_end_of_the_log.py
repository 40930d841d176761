"""A following Kafka sink that delivered everything moves its named consumer to the end of
the log and shows no lag, against a real broker: the last change's acknowledgement is not
lost to the once-a-second limit when the sink goes idle, and records that send nothing
(position markers, checkpoints) move its position too."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonish.cdc import lag
from moonish.datadir import consumers
from moonish.errors import ConsumerNotFoundError
from moonish.log.records import position_marker
from moonish.log.verify import verify_shard
from moonish.sinks.kafka.sink import KafkaOptions, KafkaSink
from moonish.state.shard import ShardWriter
from tests.support.servers.kafka_broker import Broker, broker

pytestmark = pytest.mark.kafka

__all__ = ["broker"]  # the fixture


def until(condition: object, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def positions(data: Path) -> tuple[int, ...] | None:
    """Consumer ``k``'s positions (``None`` before the sink registered it)."""
    try:
        return consumers.load(data, "k").positions
    except ConsumerNotFoundError:
        return None


@pytest.fixture
def following(tmp_path: Path, broker: Broker, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A data directory of one shard, and a sink following it as consumer ``k``."""
    data = tmp_path / "data"
    with ShardWriter(data / "shard-0") as writer:
        writer.execute(0, ["SET", "first", "1"])
    options = KafkaOptions(
        broker.bootstrap,
        topic_prefix=f"t{uuid.uuid4().hex[:10]}",
        consumer="k",
        delivery=request.param,
        poll_ms=100,
    )
    with KafkaSink(data, options) as sink:
        thread = threading.Thread(target=sink.run, kwargs={"follow": True}, daemon=True)
        thread.start()
        try:
            until(lambda: positions(data) == (1,), "the first change")
            yield data
        finally:
            sink.stop()
            thread.join(60)


def last_lsn(data: Path) -> int:
    last = verify_shard(data / "shard-0").last_lsn
    assert last is not None
    return last


@pytest.mark.parametrize("following", ["exactly-once", "at-least-once"], indirect=True)
def test_the_last_change_is_acknowledged_when_the_sink_goes_idle(following: Path) -> None:
    """Two changes a moment apart: the second is delivered within a second of the first
    acknowledgement; the consumer still reaches it, and its lag is 0."""
    data = following
    with ShardWriter(data / "shard-0") as writer:
        writer.execute(0, ["SET", "second", "2"])
    with ShardWriter(data / "shard-0") as writer:
        writer.execute(0, ["SET", "third", "3"])
    until(lambda: positions(data) == (last_lsn(data),), "the last ack")
    (entry,) = lag.lag_table(data)
    assert entry.shards[0].lag_records == 0
    assert entry.shards[0].oldest_unconfirmed_age_ms is None


@pytest.mark.parametrize("following", ["exactly-once", "at-least-once"], indirect=True)
def test_markers_and_checkpoints_after_the_last_change_move_the_position(
    following: Path, broker: Broker
) -> None:
    data = following
    with ShardWriter(data / "shard-0") as writer:
        for i in range(5):
            source = b"position %d" % i
            writer.append([position_marker(source)], False, time.time_ns() // 1000, source)
        writer.checkpoint("idle")
    end = last_lsn(data)
    until(lambda: positions(data) == (end,), "the end of the log")
    (entry,) = lag.lag_table(data)
    assert (entry.shards[0].lag_records, entry.shards[0].lag_bytes) == (0, 0)
    assert entry.shards[0].oldest_unconfirmed_age_ms is None
