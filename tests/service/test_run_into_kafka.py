"""``moonish run`` with a live capture and the Kafka sink against a real redis-server and the
Tansu broker: every write reaches its topic once, and SIGTERM stops both parts cleanly."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.support.moonish_run import running
from tests.support.redis.capture import url_of
from tests.support.servers.kafka_broker import Broker, broker, read_topics
from tests.support.servers.redis_server import redis_server

pytestmark = [pytest.mark.redis, pytest.mark.kafka]
__all__ = ["broker"]  # the fixture


def test_every_write_reaches_kafka_once_under_the_supervisor(
    tmp_path: Path, broker: Broker
) -> None:
    with redis_server(tmp_path, "--repl-diskless-sync-delay", "0") as client:
        pipeline = tmp_path / "pipeline.toml"
        pipeline.write_text(
            'data_dir = "data"\n\n[source]\n'
            f'url = "{url_of(client)}"\nshards = 2\nsync_interval_ms = 10\n\n'
            f'[kafka]\nbootstrap_servers = "{broker.bootstrap}"\ntopic_prefix = "run"\n'
            "max_transaction_records = 50\n"
        )
        with running(pipeline) as run:
            run.pid("kafka")
            for index in range(300):
                client.set(f"key:{index}", index)
            got = read_topics(broker.bootstrap, [("run.db0", 0), ("run.db0", 1)], count=300)
            keys = [orjson.loads(message.key or b"null")["key"] for message in got]
            assert sorted(keys) == sorted(f"key:{index}" for index in range(300))
            assert run.stop_all() == {"source": 0, "kafka": 0}
            assert not run.events("kafka", "restarting")
