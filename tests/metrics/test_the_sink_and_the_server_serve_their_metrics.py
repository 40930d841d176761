"""``cdc kafka --metrics-port`` against the Tansu broker and ``serve --metrics-port``: their
``/metrics`` count what they did (Kafka records delivered and transactions committed, the
sink's consumer lag falling to 0; the server's open feeds and the bytes it sent), and each
passes ``promtool check metrics``."""

from __future__ import annotations

import signal
import subprocess
import urllib.request
from pathlib import Path

import orjson
import pytest

from moonish.state.shard import ShardWriter
from tests.metrics.promtool import get, promtool_check, samples, total
from tests.support.cli import MOONISH
from tests.support.paths import ROOT
from tests.support.redis.capture import wait_for
from tests.support.servers.kafka_broker import Broker, broker
from tests.support.servers.redis_server import _free_port

pytestmark = pytest.mark.promtool
__all__ = ["broker"]  # the fixture


def write(data: Path, count: int) -> None:
    with ShardWriter(data / "shard-0") as writer:
        for i in range(count):
            writer.execute(0, [b"SET", b"k%d" % i, b"v"])


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return samples(get(f"{base}/metrics")[1])


@pytest.mark.kafka
def test_the_kafka_sink_counts_what_it_delivered(tmp_path: Path, broker: Broker) -> None:
    data = tmp_path / "data"
    write(data, 40)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    args = ["cdc", "kafka", str(data), "-b", broker.bootstrap, "--topic-prefix", "m", "--follow"]
    sink = subprocess.Popen(
        [*MOONISH, *args, "--metrics-port", str(port), "--no-tombstones"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(
            lambda: total(scrape(base), "moonish_kafka_records_delivered_total") == 40,
            "40 records delivered",
            60,
        )
        wait_for(
            lambda: total(scrape(base), "moonish_consumer_lag_records", consumer="kafka-m") == 0,
            "the sink's consumer at the end of the log",
            30,
        )
        status, text = get(f"{base}/metrics")
        assert status == 200
        promtool_check(text)
        found = samples(text)
        assert total(found, "moonish_kafka_transactions_committed_total") >= 1
        assert total(found, "moonish_kafka_transactions_aborted_total") == 0
        assert get(f"{base}/healthz")[0] == 200
    finally:
        sink.send_signal(signal.SIGTERM)
        assert sink.wait(60) == 0


def test_the_server_counts_its_feeds_and_the_bytes_it_sent(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, 25)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [*MOONISH, "serve", str(data), "--port", "0", "--metrics-port", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        url = orjson.loads(server.stdout.readline())["url"]
        with urllib.request.urlopen(f"{url}/v1/changes?since=earliest&limit=25", timeout=30) as r:
            body = r.read()
        assert len(orjson.loads(body)["results"]) == 25
        feed = urllib.request.urlopen(
            f"{url}/v1/changes?feed=continuous&since=now&heartbeat=500", timeout=30
        )
        try:
            wait_for(
                lambda: total(scrape(base), "moonish_serve_subscribers") == 1, "an open feed", 30
            )
        finally:
            feed.close()
        status, text = get(f"{base}/metrics")
        assert status == 200
        promtool_check(text)
        assert total(samples(text), "moonish_serve_sent_bytes_total") >= len(body)
        wait_for(lambda: total(scrape(base), "moonish_serve_subscribers") == 0, "feed closed", 30)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        if server.stdout is not None:
            server.stdout.close()
