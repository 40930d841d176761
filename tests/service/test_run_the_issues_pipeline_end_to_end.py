"""The issue's pipeline end to end under ``moonish run``: a live redis-server into the Tansu
broker with a key filter and metrics. Writes (filtered keys among them) go on while a part is
SIGKILLed and restarted by the supervisor, and while the supervisor itself is SIGKILLed and
started again; afterwards the Kafka topics hold every unfiltered change exactly once and no
filtered key, ``/metrics`` passes ``promtool check metrics``, counts the filtered commands and
shows the capture 0 bytes behind once writes stop."""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter
from pathlib import Path

import orjson
import pytest

from tests.metrics.promtool import get, promtool_check, samples, total
from tests.support.moonish_run import running
from tests.support.processes import gone
from tests.support.redis.capture import url_of, wait_for
from tests.support.servers.kafka_broker import Broker, broker, read_topics
from tests.support.servers.redis_server import _free_port, redis_server

pytestmark = [pytest.mark.redis, pytest.mark.kafka, pytest.mark.promtool]
__all__ = ["broker"]  # the fixture

ROUNDS = 600


def test_the_issues_pipeline_survives_kills_and_keeps_filtered_keys_out(
    tmp_path: Path, broker: Broker
) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with redis_server(tmp_path, "--repl-diskless-sync-delay", "0") as client:
        pipeline = tmp_path / "pipeline.toml"
        pipeline.write_text(
            'data_dir = "data"\n\n[source]\n'
            f'url = "{url_of(client)}"\nshards = 2\nsync_interval_ms = 10\n\n'
            '[filter]\nexclude_keys = ["tmp:*", "session:*"]\n\n'
            f'[kafka]\nbootstrap_servers = "{broker.bootstrap}"\ntopic_prefix = "app"\n'
            "max_transaction_records = 50\n\n"
            f"[metrics]\nport = {port}\n\n"
            "[supervisor]\nrestart_backoff_ms = 100\nstop_timeout_ms = 20000\n"
        )
        stop = threading.Event()
        written: list[int] = []

        def write() -> None:  # one kept key and two filtered ones per round
            for i in range(ROUNDS):
                if stop.is_set():
                    return
                client.rpush("queue", i)
                client.set(f"tmp:{i}", i)
                client.hset(f"session:{i % 7}", "n", i)
                written.append(i)
                stop.wait(0.01)

        with running(pipeline) as run:
            wait_for(lambda: get(f"{base}/readyz")[0] == 200, "a ready pipeline", 60)
            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            wait_for(lambda: len(written) > ROUNDS // 4, "writes")
            os.kill(run.pid("kafka"), signal.SIGKILL)  # a part: the supervisor restarts it
            wait_for(lambda: len(run.events("kafka", "started")) == 2, "the sink again")
            wait_for(lambda: len(written) > ROUNDS // 2, "more writes")
            pids = [int(line["pid"]) for line in run.lines() if line["event"] == "started"]
            run.kill()  # the supervisor: SIGKILL; its parts die with it
            wait_for(lambda: all(gone(pid) for pid in pids), "the parts gone with it")
        with running(pipeline) as run:  # started again: every part resumes
            writer.join(120)
            assert not writer.is_alive() and len(written) == ROUNDS
            kept = ROUNDS  # RPUSH queue: one change each
            got = read_topics(
                broker.bootstrap, [("app.db0", 0), ("app.db0", 1)], count=kept, idle_ms=3000
            )
            keys = Counter(orjson.loads(m.key or b"null")["key"] for m in got if m.value)
            assert keys == {"queue": ROUNDS}  # each once, nothing filtered
            lsns = [int(m.headers["moonish.lsn"]) for m in got if m.value]
            assert len(lsns) == len(set(lsns))
            length = [orjson.loads(m.value)["after"]["value"] for m in got if m.value]
            assert sorted(len(value) for value in length) == list(range(1, ROUNDS + 1))

            def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
                return samples(get(f"{base}/metrics")[1])

            wait_for(
                lambda: (
                    total(scraped(), "moonish_source_behind_bytes") == 0
                    and total(scraped(), "moonish_source_connected") == 1
                ),
                "the capture 0 bytes behind",
                60,
            )
            status, text = get(f"{base}/metrics")
            assert status == 200
            promtool_check(text)
            found = samples(text)
            filtered = total(found, "moonish_events_filtered_total")
            assert 0 < filtered <= 2 * ROUNDS  # this run's: what it read after the restart
            assert run.stop_all() == {"source": 0, "kafka": 0}
