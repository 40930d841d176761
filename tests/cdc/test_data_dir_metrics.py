"""moonish.cdc.metrics: a data directory's WAL per shard, the change events appended since
the collector began (by op, per shard) and the consumers' lag, as Prometheus families."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from moonish.cdc.metrics import DataDirCollector
from moonish.datadir import consumers
from moonish.metrics.http import Collectors
from tests.support.datadirs import data_dir, fill


def scrape(collector: DataDirCollector) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = generate_latest(Collectors([collector])).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_wal_events_and_consumer_lag(tmp_path: Path) -> None:
    root = data_dir(tmp_path, shards=2, records=100)
    consumers.create(root, "reader", [40, 100])
    collector = DataDirCollector(root)
    try:
        first = scrape(collector)
        shard0 = (("shard", "0"),)
        assert first[("moonish_wal_records_total", shard0)] == 100
        assert first[("moonish_wal_segments", shard0)] > 1
        assert first[("moonish_wal_bytes", shard0)] > 1024
        assert first[("moonish_wal_retained_records", shard0)] == 100
        assert not [key for key in first if key[0] == "moonish_events_total"]  # none since
        lag = (("consumer", "reader"), ("shard", "0"))
        assert first[("moonish_consumer_lag_records", lag)] == 60
        assert first[("moonish_consumer_lag_seconds", lag)] > 0
        assert (
            first[("moonish_consumer_lag_records", (("consumer", "reader"), ("shard", "1")))] == 0
        )
        assert first[("moonish_consumer_lost", (("consumer", "reader"),))] == 0

        fill(root / "shard-0", 7)  # plain kv SETs: op u
        second = scrape(collector)
        assert second[("moonish_events_total", (("op", "u"), ("shard", "0")))] == 7
        assert ("moonish_events_total", (("op", "u"), ("shard", "1"))) not in second
        assert second[("moonish_wal_records_total", shard0)] == 107
        assert second[("moonish_consumer_lag_records", lag)] == 67
        assert second[("moonish_wal_last_commit_timestamp_seconds", shard0)] > 0
    finally:
        collector.close()


def test_no_shards_yet_gives_no_samples(tmp_path: Path) -> None:
    collector = DataDirCollector(tmp_path / "not-yet")
    assert scrape(collector) == {}
