"""``moonish wal capture <cluster node> --metrics-port`` against a real Redis Cluster: the
``moonish_source_*`` series are the links' sums under the capture's ``link`` label (connected
when every link is), every write counted once, ``/readyz`` ready, and ``promtool check
metrics`` passes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.metrics.promtool import get, promtool_check, samples, total
from tests.support.paths import ROOT
from tests.support.redis.capture import wait_for
from tests.support.redis.cluster import writer
from tests.support.servers.cluster import redis_cluster
from tests.support.servers.redis_server import _free_port

pytestmark = [pytest.mark.redis, pytest.mark.promtool]


def test_cluster_capture_metrics(tmp_path: Path) -> None:
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    with (
        redis_cluster(tmp_path / "cluster") as cluster,
        open(tmp_path / "capture.log", "wb") as log,
    ):
        options = ["--shards", "2", "--metrics-port", str(port), "--quiet"]
        capture = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "wal", "capture", cluster.url(), "data", *options],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            wait_for(lambda: get(f"{base}/readyz") == (200, "ready\n"), "a ready capture", 60)
            client = writer(cluster)
            for number in range(60):
                client.set(f"k:{number}", "v")
            client.close()

            def counted() -> bool:
                found = samples(get(f"{base}/metrics")[1])
                return (
                    total(found, "moonish_events_total", op="c") == 60
                    and total(found, "moonish_source_commands_total") == 60
                    and total(found, "moonish_source_behind_bytes") == 0
                )

            wait_for(counted, "every write counted once, and no lag", 60)
            status, text = get(f"{base}/metrics")
            assert status == 200
            promtool_check(text)
            found = samples(text)
            link = f"cluster {cluster.url()}"
            assert found[("moonish_source_connected", (("link", link),))] == 1
            assert found[("moonish_source_full_resyncs_total", (("link", link),))] == 3
        finally:
            capture.send_signal(signal.SIGTERM)
            assert capture.wait(60) == 0, (tmp_path / "capture.log").read_text()
