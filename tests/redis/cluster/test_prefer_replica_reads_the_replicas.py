"""``prefer_replica`` (``--prefer-replica``; moonish.redis.cluster.runner, 7), against a real
cluster on 127.0.0.1: each link reads its master's stream from the master's replica (the
masters serve no moonish link), a restart continues every link there by ``PSYNC``, a master
SIGKILLed is followed to its promoted replica, and the data directory equals the cluster with
every command applied once."""

from __future__ import annotations

import contextlib
import signal
from pathlib import Path

import pytest

from tests.support.cli import run
from tests.support.redis.capture import wait_for
from tests.support.redis.cluster import (
    assert_captured,
    caught_up_report,
    cli_capture_info,
    follow,
    mixed_writes,
    replicas_online,
    writer,
    written_with_replicas,
)
from tests.support.servers.cluster import Cluster

pytestmark = pytest.mark.redis


def replicas_served(cluster: Cluster, port: int) -> int:
    """``connected_slaves`` of the node at ``port``."""
    with contextlib.closing(cluster.client(port)) as client:
        return int(client.info("replication")["connected_slaves"])


def test_each_link_reads_a_replica_and_a_restart_continues_there(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    client = written_with_replicas(cluster, 200)
    following = follow(cluster, data, prefer_replica=True)
    caught_up_report(following, cluster)
    mixed_writes(client, 200, 200)
    caught_up_report(following, cluster)
    masters = cluster.master_ports()
    assert all(replicas_served(cluster, port) == 1 for port in masters)  # their own replica
    for port in masters:
        assert replicas_served(cluster, cluster.replica_of(port)) == 1  # moonish
    report = following.finish()
    assert report.links is not None
    readers = {link["address"]: (link["read_from"], link["role"]) for link in report.links}
    assert readers == {
        f"127.0.0.1:{port}": (f"127.0.0.1:{cluster.replica_of(port)}", "replica")
        for port in masters
    }
    assert report.full_resyncs == 3

    mixed_writes(client, 400, 200)
    following = follow(cluster, data, prefer_replica=True)
    caught_up_report(following, cluster)
    report = following.finish()
    client.close()
    assert report.full_resyncs == 0 and report.continues == 3
    assert_captured(cluster, data)


def test_a_killed_master_read_through_its_replica_is_followed_to_it(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    client = written_with_replicas(cluster, 200)
    following = follow(cluster, data, prefer_replica=True)
    caught_up_report(following, cluster)
    victim = cluster.master_ports()[0]
    heir = cluster.replica_of(victim)
    (before,) = [
        link
        for link in following.report.links or []  # type: ignore[union-attr]
        if link["address"] == f"127.0.0.1:{victim}"
    ]
    assert before["read_from"] == f"127.0.0.1:{heir}"
    cluster.processes[victim].kill()
    cluster.processes[victim].wait()
    cluster.wait_for_master(heir)
    mixed_writes(client, 200, 200)
    client.close()
    caught_up_report(following, cluster)
    report = following.finish()
    assert report.links is not None
    (moved,) = [link for link in report.links if link["address"] == f"127.0.0.1:{heir}"]
    assert (moved["read_from"], moved["role"]) == (f"127.0.0.1:{heir}", "master")
    assert moved["full_resyncs"] == 1 and moved["partial_resyncs"] == 1  # +CONTINUE
    assert_captured(cluster, data)


def test_the_cli_reads_replicas_and_refuses_the_flag_without_a_cluster(
    cluster: Cluster, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    written_with_replicas(cluster, 50).close()
    args = [cluster.url(), str(data), "--shards", "2", "--prefer-replica"]
    info, _, _ = cli_capture_info(*args)
    links = info["capture"]["links"]
    assert len(links) == 3 and {link["role"] for link in links} == {"replica"}
    assert all(link["read_from"] != link["address"] for link in links)
    refused = run("wal", "capture", *args, "--no-cluster")
    assert refused.returncode == 2 and b"--prefer-replica" in refused.stderr


def test_a_replica_behind_the_links_position_is_passed_over_for_its_master(
    cluster: Cluster, tmp_path: Path
) -> None:
    """The capture read the masters, then restarts with ``prefer_replica`` while one replica
    is stopped (``SIGSTOP``) behind what the link applied: that link reads its master,
    continuing by ``PSYNC`` (a ``PSYNC`` past the replica's offset would be a full resync)."""
    data = tmp_path / "data"
    client = writer(cluster)
    mixed_writes(client, 0, 100)
    following = follow(cluster, data)
    caught_up_report(following, cluster)
    wait_for(lambda: replicas_online(cluster), "the seed to see every replica online")
    master = cluster.master_ports()[0]
    stuck = cluster.processes[cluster.replica_of(master)]
    stuck.send_signal(signal.SIGSTOP)
    try:
        mixed_writes(client, 100, 30)
        caught_up_report(following, cluster)
        following.finish()
        following = follow(cluster, data, prefer_replica=True)
        caught_up_report(following, cluster)
        report = following.finish()
    finally:
        stuck.send_signal(signal.SIGCONT)
    client.close()
    assert report.full_resyncs == 0 and report.continues == 3
    readers = {link["address"]: link["read_from"] for link in report.links or []}
    assert readers[f"127.0.0.1:{master}"] == f"127.0.0.1:{master}"
    assert any("reading the master" in event.text for event in following.events)
    assert_captured(cluster, data)
