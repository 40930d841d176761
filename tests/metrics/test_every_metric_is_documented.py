"""Every metric family moonish exports is in docs/operations.md's table ("The metrics"),
and the table names no family that does not exist."""

from __future__ import annotations

import re

from prometheus_client import REGISTRY

import moonish.metrics.families  # noqa: F401 (the families, registered on import)
from tests.support.paths import ROOT

# Families built at scrape time by collectors (moonish.cdc.metrics, moonish.service.metrics)
COLLECTED = {
    "moonish_wal_bytes",
    "moonish_wal_segments",
    "moonish_wal_records_total",
    "moonish_wal_retained_records",
    "moonish_wal_last_commit_timestamp_seconds",
    "moonish_retention_max_pinned_bytes",
    "moonish_events_total",
    "moonish_consumer_lag_records",
    "moonish_consumer_lag_bytes",
    "moonish_consumer_lag_seconds",
    "moonish_consumer_lost",
    "moonish_part_up",
    "moonish_part_restarts_total",
}


def exported() -> set[str]:
    names = set()
    for family in REGISTRY.collect():
        if family.name.startswith("moonish_"):
            names.add(family.name + ("_total" if family.type == "counter" else ""))
    return names | COLLECTED


def test_the_table_is_the_families() -> None:
    page = (ROOT / "docs" / "operations.md").read_text()
    table = page[page.index("### The metrics") : page.index("### What to alert on")]
    documented = set(re.findall(r"^\| `(moonish_[a-z_]+)` \|", table, re.MULTILINE))
    assert documented == exported()


def test_the_collected_families_are_the_collectors() -> None:
    for path in ("moonish/cdc/metrics.py", "moonish/service/metrics.py"):
        source = (ROOT / path).read_text()
        for name in re.findall(r'"(moonish_[a-z_]+)"', source):
            counter = f'CounterMetricFamily(\n            "{name}"' in source
            assert (f"{name}_total" if counter else name) in COLLECTED, name
