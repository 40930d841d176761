"""The metrics endpoint (moonish.metrics.http) on 127.0.0.1: ``/metrics`` in the Prometheus
text format from the collectors it is given, ``/healthz`` while alive, ``/readyz`` by its
checks (a link that is down, or too far behind, is unready), 404 elsewhere; a taken port is
an UnavailableError."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.parser import text_string_to_metric_families

from moonish.errors import UnavailableError
from moonish.metrics.http import Collectors, MetricsServer
from moonish.metrics.readiness import source_check
from tests.metrics.promtool import get


def source_registry() -> tuple[CollectorRegistry, Gauge, Gauge]:
    registry = CollectorRegistry()
    connected = Gauge("moonish_source_connected", "up", ["link"], registry=registry)
    behind = Gauge("moonish_source_behind_seconds", "lag", ["link"], registry=registry)
    return registry, connected, behind


def test_metrics_health_and_readiness() -> None:
    registry, connected, behind = source_registry()
    checks = [source_check(registry, 5.0, expected=True)]
    with MetricsServer("127.0.0.1", 0, Collectors([registry]), checks) as server:
        assert get(f"{server.url}/healthz") == (200, "ok\n")
        status, body = get(f"{server.url}/readyz")
        assert status == 503 and "no replication link yet" in body

        connected.labels("127.0.0.1:6379").set(0)
        behind.labels("127.0.0.1:6379").set(float("nan"))
        status, body = get(f"{server.url}/readyz")
        assert (status, body) == (
            503,
            "not ready: replication link 127.0.0.1:6379 is not connected\n",
        )

        connected.labels("127.0.0.1:6379").set(1)  # up, the lag unknown: ready
        assert get(f"{server.url}/readyz") == (200, "ready\n")
        behind.labels("127.0.0.1:6379").set(7.5)
        status, body = get(f"{server.url}/readyz")
        assert status == 503 and "is 7.5 s behind its master (the bound is 5 s)" in body
        behind.labels("127.0.0.1:6379").set(0.5)
        assert get(f"{server.url}/readyz") == (200, "ready\n")

        status, text = get(f"{server.url}/metrics")
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(text)}
        (sample,) = families["moonish_source_behind_seconds"].samples
        assert sample.labels == {"link": "127.0.0.1:6379"} and sample.value == 0.5
        assert get(f"{server.url}/other")[0] == 404


def test_a_taken_port_is_unavailable() -> None:
    with MetricsServer("127.0.0.1", 0, Collectors([])) as server:
        taken = f"cannot listen on 127.0.0.1:{server.port}"
        with pytest.raises(UnavailableError, match=taken):
            MetricsServer("127.0.0.1", server.port, Collectors([]))
