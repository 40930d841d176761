"""A Redis Cluster node as a single master's capture source (moonish.redis.capture.source),
against a real cluster on 127.0.0.1: ``capture()`` refuses it by name before anything is
written, naming the cluster's masters and slots (and so does the replication link itself),
since one node holds only its own slots' keys (``moonish wal capture`` follows the whole
cluster: tests/redis/cluster); ``--no-cluster`` follows that node alone, from the library and
the CLI, equal to its keyspace."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.cluster import ClusterNode as ClientNode
from redis.cluster import RedisCluster

from moonish.redis.capture.runner import capture
from moonish.redis.replication.connection import ReplicaConnection
from moonish.redis.replication.messages import ClusterNodeError, ReplicaOptions
from moonish.redis.routing.sources import load_source
from tests.support.cli import MOONISH
from tests.support.paths import ROOT
from tests.support.redis.capture import FAST, Running, our_state, redis_state, wait_for
from tests.support.servers.cluster import Cluster, redis_cluster

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with redis_cluster(tmp_path_factory.mktemp("cluster")) as running:
        yield running


def test_the_library_refuses_a_cluster_node_naming_its_masters(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    with pytest.raises(ClusterNodeError) as raised:
        capture(cluster.url(), data, 2, options=FAST)
    message = str(raised.value)
    for port in cluster.master_ports():
        assert f"127.0.0.1:{port}" in message
    assert "slots 0-" in message and "--no-cluster" in message
    assert raised.value.path == cluster.url()
    assert not data.exists() or not any(data.iterdir())  # nothing written


def test_the_replication_link_refuses_a_cluster_node_before_psync(cluster: Cluster) -> None:
    port = cluster.master_ports()[0]
    with contextlib.closing(cluster.client(port)) as client:
        replicas_before = client.info("replication")["connected_slaves"]
        with (
            ReplicaConnection(cluster.url(port)) as link,
            pytest.raises(ClusterNodeError, match="Redis Cluster"),
        ):
            link.psync()
        assert client.info("replication")["connected_slaves"] == replicas_before


def test_the_cli_follows_one_node_with_no_cluster(cluster: Cluster, tmp_path: Path) -> None:
    port = cluster.master_ports()[0]
    data = tmp_path / "data"
    process = subprocess.Popen(
        [*MOONISH, "wal", "capture", cluster.url(port), str(data), "--shards", "2", "--no-cluster"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        wait_for(lambda: (data / "capture.json").exists(), "capture.json", 60)
    finally:
        process.send_signal(signal.SIGTERM)
        stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr.decode()
    summary = json.loads(stdout)
    assert summary["master"] == cluster.url(port) and summary["links"] is None
    assert load_source(str(data)) is not None
    assert load_source(str(data))["kind"] == "replica"  # type: ignore[index]


def test_no_cluster_follows_one_node_alone(cluster: Cluster, tmp_path: Path) -> None:
    port = cluster.master_ports()[0]
    writer = RedisCluster(startup_nodes=[ClientNode("127.0.0.1", port)])
    options = dataclasses.replace(FAST, replica=ReplicaOptions(cluster_node=True))
    with contextlib.closing(cluster.client(port)) as node:
        with Running(node, tmp_path / "data", 2, options=options) as running:
            for number in range(300):
                writer.set(f"key:{number}", number)
                writer.rpush(f"list:{number % 7}", number)
            writer.close()
            running.caught_up(node)
        expected = redis_state(node, dbs=(0,))
        report = running.finish()
    assert report.full_resyncs == 1
    assert 0 < len(expected) < 307  # this node's share of the keys
    assert our_state(tmp_path / "data") == expected
