"""A failover while a cluster capture runs (moonish.redis.cluster.session), against a real
cluster on 127.0.0.1: when a master is SIGKILLed and its replica wins the election, or a
replica takes over by ``CLUSTER FAILOVER`` under writes, the link moves to the promoted node
and continues by ``PSYNC`` (no full resync), and the data directory still equals the cluster
with every command applied once."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import pytest

from tests.support.redis.capture import our_state, wait_for
from tests.support.redis.cluster import (
    assert_each_counter_value_once,
    assert_same_keyspace,
    caught_up_report,
    cluster_state,
    follow,
    kill_first_master,
    mixed_writes,
    writer,
)
from tests.support.servers.cluster import Cluster

pytestmark = pytest.mark.redis


def test_a_killed_master_is_followed_to_its_promoted_replica(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    mixed_writes(client, 0, 200)
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    mixed_writes(client, 200, 200)
    client.close()
    heir = kill_first_master(cluster)
    client = writer(cluster)
    mixed_writes(client, 400, 200)
    client.close()
    caught_up_report(following, cluster)
    report = following.finish()
    assert report.links is not None
    (moved,) = [link for link in report.links if link["address"] == f"127.0.0.1:{heir}"]
    assert moved["full_resyncs"] == 1 and moved["partial_resyncs"] == 1  # +CONTINUE
    assert moved["reconnects"] >= 1 and moved["link"] != moved["node"]
    assert any(e.kind == "source" and str(heir) in e.text for e in following.events)
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    assert_each_counter_value_once(data)


def test_a_manual_failover_under_writes_loses_and_repeats_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    client = writer(cluster)
    mixed_writes(client, 0, 100)
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    stop = threading.Event()
    written = [100]

    def load() -> None:
        while not stop.is_set():
            mixed_writes(client, written[0], 10)
            written[0] += 10

    loader = threading.Thread(target=load, daemon=True)
    loader.start()
    try:
        old = cluster.master_ports()[1]
        heir = cluster.replica_of(old)
        with contextlib.closing(cluster.client(heir)) as node:
            node.execute_command("CLUSTER", "FAILOVER")
        cluster.wait_for_master(heir)
        wait_for(lambda: written[0] > 400, "writes after the failover", 60)
    finally:
        stop.set()
        loader.join(30)
    client.close()
    caught_up_report(following, cluster)
    report = following.finish()
    assert report.links is not None
    assert report.full_resyncs == 3  # the first loads only
    (moved,) = [link for link in report.links if link["address"] == f"127.0.0.1:{heir}"]
    assert moved["partial_resyncs"] == 1 and moved["state"] == "stopped"
    assert_same_keyspace(our_state(data), cluster_state(cluster))
    assert_each_counter_value_once(data)
