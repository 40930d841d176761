"""``moonish wal capture --metrics-port`` against a real redis-server: ``/metrics`` shows the
writes as change events by op and the lag falling to zero once writes stop, and passes
``promtool check metrics``; ``/readyz`` is ready while the link is up and turns unready when
redis-server stops."""

from __future__ import annotations

import math
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.metrics.promtool import get, promtool_check, samples, total
from tests.support.paths import ROOT
from tests.support.redis.capture import url_of, wait_for
from tests.support.servers.redis_server import _free_port, redis_server

pytestmark = [pytest.mark.redis, pytest.mark.promtool]


def test_capture_metrics_lag_and_readiness(tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with (
        redis_server(tmp_path, "--repl-diskless-sync-delay", "0") as client,
        open(tmp_path / "capture.log", "wb") as log,
    ):
        client.set("before", "0")
        capture = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cli.main",
                "wal",
                "capture",
                url_of(client),
                str(tmp_path / "data"),
                "--shards",
                "2",
                "--sync-interval-ms",
                "10",
                "--metrics-port",
                str(port),
                "--ready-max-lag-ms",
                "30000",
                "--quiet",
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            wait_for(lambda: get(f"{base}/readyz") == (200, "ready\n"), "a ready capture")
            assert get(f"{base}/healthz") == (200, "ok\n")
            for i in range(50):
                client.set(f"k:{i}", "v")  # c
            for i in range(20):
                client.set(f"k:{i}", "w")  # u
            client.delete(*[f"k:{i}" for i in range(10)])  # d

            def caught_up() -> bool:
                found = samples(get(f"{base}/metrics")[1])
                return (
                    total(found, "moonish_events_total", op="c") == 50
                    and total(found, "moonish_events_total", op="u") == 20
                    and total(found, "moonish_events_total", op="d") == 10
                    and total(found, "moonish_source_commands_total") == 71  # 70 SETs, a DEL
                    and total(found, "moonish_source_behind_bytes") == 0
                    and total(found, "moonish_source_behind_seconds") == 0
                )

            wait_for(caught_up, "every write counted, and the lag at zero", 60)
            status, text = get(f"{base}/metrics")
            assert status == 200
            promtool_check(text)
            found = samples(text)
            link = url_of(client)
            assert found[("moonish_source_connected", (("link", link),))] == 1
            assert found[("moonish_source_full_resyncs_total", (("link", link),))] == 1
            assert total(found, "moonish_source_commands_total") == 71
            assert total(found, "moonish_wal_records_total") >= 81  # the rows, c/u/d
            assert total(found, "moonish_wal_segments") >= 2
            assert found[("moonish_source_last_event_timestamp_seconds", (("link", link),))] > 0

            client.shutdown(nosave=True)  # the master goes away
            wait_for(lambda: get(f"{base}/readyz")[0] == 503, "readyz unready", 30)
            status, body = get(f"{base}/readyz")
            assert f"replication link {link} is not connected" in body
            found = samples(get(f"{base}/metrics")[1])
            assert found[("moonish_source_connected", (("link", link),))] == 0
            assert math.isnan(found[("moonish_source_behind_seconds", (("link", link),))])
            assert found[("moonish_source_reconnects_total", (("link", link),))] >= 1
            assert get(f"{base}/healthz") == (200, "ok\n")  # alive all the same
        finally:
            capture.send_signal(signal.SIGTERM)
            assert capture.wait(60) == 0, (tmp_path / "capture.log").read_text()
