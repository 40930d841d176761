"""The families a collector builds at scrape time (prometheus-client's ``*MetricFamily``),
for the collectors outside this package (moonish.cdc.metrics, moonish.service.metrics):
``prometheus_client`` is imported here only."""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["Collector", "CounterMetricFamily", "GaugeMetricFamily"]
