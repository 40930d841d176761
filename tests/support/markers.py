"""The markers of tests that need a service or a system package (registered in
tests/conftest.py, selected against by ``make check``)."""

from __future__ import annotations

# What a test needs beyond the package and its test dependencies (``.[test]``): `make check`
# runs the tests that carry none of these markers, `make test` every test.
MARKERS = {
    "redis": "starts or needs a redis-server (Debian's 7.0, or Redis 7.4 from .venv/redis-7.4)",
    "kafka": "starts or needs a Kafka-protocol broker (Tansu or noida-db, from the dev set)",
    "s3": "starts an S3-compatible server (moto in server mode, moto[server] from the dev set)",
    "spark": "needs PySpark, which needs Java 17 or later",
    "java": "needs a JVM otherwise (Debezium's Kafka Connect classes through JPype)",
    "browser": "drives a headless chromium",
    "promtool": "checks /metrics with promtool (Debian's prometheus package, `make install`)",
}

SLOW = (
    "takes over 0.8 s at make check's scale (end-to-end runs of the CLI, servers killed and "
    "restarted, crash trials): run by make test, left out of make check's fast loop"
)
