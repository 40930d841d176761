"""Prometheus metrics: the families moonish exports (``families``), readiness from their
values (``readiness``) and the HTTP endpoint serving ``/metrics``, ``/healthz`` and ``/readyz``
(``http``). The only package that imports ``prometheus_client`` (docs/operations.md,
"Metrics and health", lists every family with its Debezium counterpart).
"""
