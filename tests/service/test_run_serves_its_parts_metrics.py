"""``moonish run`` with ``[metrics]`` against a real redis-server: the supervisor's endpoint
serves the parts' metrics (prometheus-client's multiprocess mode: the capture's, counted in
its child process), the data directory's and its own; a part killed and restarted shows in
``moonish_part_restarts_total`` while the capture's counters go on rising; the output passes
``promtool check metrics``; ``/readyz`` turns unready when redis-server stops."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from tests.metrics.promtool import get, promtool_check, samples, total
from tests.support.moonish_run import running
from tests.support.redis.capture import url_of, wait_for
from tests.support.servers.redis_server import _free_port, redis_server

pytestmark = [pytest.mark.redis, pytest.mark.promtool]


def test_run_serves_the_parts_metrics_and_restarts(tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with redis_server(tmp_path, "--repl-diskless-sync-delay", "0") as client:
        pipeline = tmp_path / "pipeline.toml"
        pipeline.write_text(
            'data_dir = "data"\n\n[source]\n'
            f'url = "{url_of(client)}"\nshards = 2\nsync_interval_ms = 10\n\n'
            "[serve]\nport = 0\n\n"
            f"[metrics]\nport = {port}\nready_max_lag_ms = 30000\n\n"
            "[supervisor]\nrestart_backoff_ms = 100\nstop_timeout_ms = 20000\n"
        )
        with running(pipeline) as run:
            wait_for(lambda: get(f"{base}/readyz") == (200, "ready\n"), "a ready pipeline", 60)
            for i in range(30):
                client.set(f"k:{i}", "v")

            def scraped() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
                return samples(get(f"{base}/metrics")[1])

            wait_for(
                lambda: (
                    total(scraped(), "moonish_source_commands_total") == 30
                    and total(scraped(), "moonish_events_total", op="c") == 30
                ),
                "the capture child's commands and the events",
                60,
            )
            found = scraped()
            assert found[("moonish_part_up", (("part", "source"),))] == 1
            assert found[("moonish_part_up", (("part", "serve"),))] == 1
            assert found[("moonish_part_restarts_total", (("part", "source"),))] == 0
            assert total(found, "moonish_source_connected") == 1

            os.kill(run.pid("source"), signal.SIGKILL)
            wait_for(lambda: run.events("source", "restarting"), "the capture's restart")
            wait_for(lambda: len(run.events("source", "started")) == 2, "the capture again")
            for i in range(30, 40):
                client.set(f"k:{i}", "v")
            wait_for(
                lambda: (
                    total(scraped(), "moonish_source_commands_total") == 40
                    and total(scraped(), "moonish_source_connected") == 1
                ),
                "the restarted capture's commands added to the first one's",
                60,
            )
            status, text = get(f"{base}/metrics")
            assert status == 200
            promtool_check(text)
            found = samples(text)
            assert found[("moonish_part_restarts_total", (("part", "source"),))] == 1
            assert found[("moonish_part_restarts_total", (("part", "serve"),))] == 0
            assert total(found, "moonish_source_behind_bytes") == 0  # one live capture's
            assert get(f"{base}/readyz") == (200, "ready\n")

            client.shutdown(nosave=True)
            wait_for(lambda: get(f"{base}/readyz")[0] == 503, "readyz unready", 30)
            assert "is not connected" in get(f"{base}/readyz")[1]
            assert run.stop_all() == {"source": 0, "serve": 0}
