"""A real Redis Cluster's topology (moonish.redis.topology.probe) against redis-servers on
127.0.0.1 (3 masters, a replica each, made by ``redis-cli --cluster create``): the masters own
the slots Redis routes keys to, each replica is named with its master, a node that is not a
cluster node says so, and slots in migration are read from each master's own line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from moonish.redis.topology.nodes import SLOTS
from moonish.redis.topology.probe import ClusterProbe, node_url
from tests.support.servers.cluster import Cluster, redis_cluster
from tests.support.servers.redis_server import redis_server

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def test_the_masters_own_the_slots_redis_routes_keys_to(cluster: Cluster) -> None:
    with ClusterProbe(cluster.url()) as probe:
        assert probe.cluster_enabled()
        topology = probe.topology()
    assert topology.state == "ok" and topology.current_epoch >= 3
    masters = topology.masters()
    assert sorted(master.port for master in masters) == sorted(cluster.master_ports())
    assert topology.uncovered() == []
    assert sum(master.slot_count() for master in masters) == SLOTS
    table = topology.slot_table()
    with contextlib.closing(cluster.client(cluster.ports[0])) as client:
        for key in ("user:1", "order:42", "{tag}a", "x"):
            slot = client.cluster("keyslot", key)
            owner = topology.node(table[slot] or "")
            assert owner is not None
            with contextlib.closing(cluster.client(owner.port)) as node:
                node.set(key, "v")  # the owner takes the key (any other node answers MOVED)
                assert node.get(key) == "v"
    for master in masters:
        (replica,) = topology.replicas_of(master.node_id)
        assert replica.role == "replica" and replica.port in cluster.ports
        with contextlib.closing(cluster.client(replica.port)) as client:
            assert client.info("replication")["master_port"] == master.port
    assert "slots 0-" in topology.describe()


def test_every_node_describes_the_same_slot_table(cluster: Cluster) -> None:
    tables = []
    for port in cluster.ports:
        with ClusterProbe(cluster.url(port)) as probe:
            tables.append(probe.topology(states=False).slot_table())
    assert all(table == tables[0] for table in tables)


def test_slots_in_migration_are_read_from_each_masters_own_line(cluster: Cluster) -> None:
    with ClusterProbe(cluster.url()) as probe:
        topology = probe.topology()
        assert topology.migrations() == {}
        source, target = topology.masters()[1], topology.masters()[2]
        slot = source.slots[0][0]
        with (
            contextlib.closing(cluster.client(source.port)) as from_node,
            contextlib.closing(cluster.client(target.port)) as to_node,
        ):
            to_node.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source.node_id)
            from_node.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target.node_id)
            try:
                # asked through the first master, which sees neither state on its own line
                assert probe.topology().migrations() == {slot: (source.node_id, target.node_id)}
                assert probe.topology(states=False).migrations() == {}
            finally:
                to_node.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
                from_node.execute_command("CLUSTER", "SETSLOT", slot, "STABLE")
        assert probe.topology().migrations() == {}


def test_a_node_url_keeps_the_seeds_scheme_and_credentials(cluster: Cluster) -> None:
    with ClusterProbe(cluster.url()) as probe:
        node = probe.topology(states=False).masters()[1]
    assert node_url("redis://user:secret@127.0.0.1:1", node) == (
        f"redis://user:secret@{node.host}:{node.port}"
    )


def test_a_standalone_redis_is_not_a_cluster_node(tmp_path: Path) -> None:
    with redis_server(tmp_path) as client:
        port = client.connection_pool.connection_kwargs["port"]
        with ClusterProbe(f"redis://127.0.0.1:{port}") as probe:
            assert not probe.cluster_enabled()
